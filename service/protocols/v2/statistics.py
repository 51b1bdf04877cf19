"""/v2's statistics extension: ``GET /v2/models[/<m>[/versions/1]]/stats``, in Triton's shape.

The answer is read from the samples of the per-model inference metrics (service.web.inference), as
``/metrics`` shows them (under gunicorn: every worker's, added up by prometheus_client's multiprocess
collector), so the two never disagree. A model's statistics cover its requests on both protocols, as
Triton's cover HTTP and gRPC alike. How Triton's members map onto the metrics:

- ``success`` / ``fail``: the requests that succeeded / did not (every other outcome), with their seconds
  from start to answer (``attention_inference_requests_total``, ``…_request_seconds_total``);
- ``queue``, ``compute_input``, ``compute_infer``, ``compute_output``: the queue, decode, compute and encode
  histograms' counts and sums (each step counted when it completes);
- ``inference_count``: the successful requests (a request is one inference: the service does not batch);
  ``execution_count``: the computations that completed;
- ``last_inference``: milliseconds since the epoch of the last success, 0 if none.
"""

from __future__ import annotations

from typing import Any

from marshmallow import fields

from service.protocols.declarations.schemas import ResponseSchema
from service.protocols.v2.models import MODELS, VERSION
from service.web.inference import DurationTotal, ModelTotals, model_totals
from service.web.routes import Routes

routes = Routes(
    "v2_statistics",
    __name__,
    url_prefix="/v2",
    description="The statistics extension: each model's inference counts and times, as Triton reports them.",
)

NANOSECONDS = 1_000_000_000
# Triton's names for the steps the metrics time.
_STEP_NAMES = {
    "queue": "queue",
    "compute_input": "decode",
    "compute_infer": "compute",
    "compute_output": "encode",
}


class DurationStatSchema(ResponseSchema):
    count = fields.Integer(required=True, metadata={"description": "How many."})
    ns = fields.Integer(required=True, metadata={"description": "Their nanoseconds added up."})


class InferenceStatsSchema(ResponseSchema):
    success = fields.Nested(DurationStatSchema, required=True)
    fail = fields.Nested(DurationStatSchema, required=True)
    queue = fields.Nested(DurationStatSchema, required=True)
    compute_input = fields.Nested(DurationStatSchema, required=True)
    compute_infer = fields.Nested(DurationStatSchema, required=True)
    compute_output = fields.Nested(DurationStatSchema, required=True)


class ModelStatSchema(ResponseSchema):
    name = fields.String(required=True)
    version = fields.String(required=True)
    last_inference = fields.Integer(
        required=True,
        metadata={"description": "Milliseconds since the epoch of the last success; 0 if none."},
    )
    inference_count = fields.Integer(required=True)
    execution_count = fields.Integer(required=True)
    inference_stats = fields.Nested(InferenceStatsSchema, required=True)
    batch_stats = fields.List(fields.Dict(), required=True, metadata={"description": "Always empty."})


class InferenceStatisticsSchema(ResponseSchema):
    model_stats = fields.List(fields.Nested(ModelStatSchema), required=True)


def _duration(total: DurationTotal) -> dict[str, int]:
    return {"count": total.count, "ns": round(total.seconds * NANOSECONDS)}


def _model_stat(name: str, totals: ModelTotals) -> dict[str, Any]:
    stats = {"success": _duration(totals.success), "fail": _duration(totals.failure)}
    stats |= {triton: _duration(totals.steps[step]) for triton, step in _STEP_NAMES.items()}
    return {
        "name": name,
        "version": VERSION,
        "last_inference": round(totals.last_success * 1000),
        "inference_count": totals.success.count,
        "execution_count": totals.steps["compute"].count,
        "inference_stats": stats,
        "batch_stats": [],
    }


def statistics(names: list[str]) -> dict[str, Any]:
    """The statistics document of the models ``names`` (in that order)."""
    totals = model_totals(names)
    return {"model_stats": [_model_stat(name, totals[name]) for name in names]}


@routes.get("/models/stats", operation_id="modelsStatistics", response=InferenceStatisticsSchema)
def all_statistics() -> dict[str, Any]:
    """Inference statistics of every model (Triton's statistics extension)."""
    return statistics(list(MODELS))


def _register(name: str, prefix: str, suffix: str) -> None:
    def model_statistics() -> dict[str, Any]:
        return statistics([name])

    model_statistics.__doc__ = f"Inference statistics of the {name} model, both protocols (Triton's shape)."
    label = name.replace("-", "_") + suffix
    words = [*label.removesuffix("_versioned").split("_"), "statistics", *(["versioned"] if suffix else [])]
    routes.get(
        f"{prefix}/stats",
        endpoint=f"{label}_statistics",
        operation_id=words[0] + "".join(word.capitalize() for word in words[1:]),
        response=InferenceStatisticsSchema,
    )(model_statistics)


for _name in MODELS:
    _register(_name, f"/models/{_name}", "")
    _register(_name, f"/models/{_name}/versions/{VERSION}", "_versioned")
