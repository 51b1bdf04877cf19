"""deploy/observability's Grafana dashboard against the service: every PromQL expression in it parses, and
every metric and label it names is on /metrics once each model has answered a real request."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from service import create_app

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "observability" / "grafana-dashboard.json"
# Grafana's variables, as a Prometheus query would see them.
VARIABLES = {"$__rate_interval": "5m", "$model": ".*", "${datasource}": "prometheus"}

AGGREGATIONS = {
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "group",
}
FUNCTIONS = {
    "rate", "irate", "increase", "histogram_quantile", "abs", "clamp_min", "clamp_max", "avg_over_time",
    "max_over_time", "min_over_time", "sum_over_time", "delta", "deriv", "time", "vector", "scalar",
    "label_replace", "absent", "round", "ceil", "floor", "sort", "sort_desc", "timestamp",
}  # fmt: skip
BINARY = {"+", "-", "*", "/", "%", "^", "==", "!=", ">", "<", ">=", "<=", "and", "or", "unless"}
TOKEN = re.compile(
    r"\s*(?:(?P<number>\d+(?:\.\d+)?(?:e[+-]?\d+)?)(?![a-zA-Z_])|(?P<duration>\[\d+[smhdwy]\])"
    r'|(?P<string>"(?:[^"\\]|\\.)*")|(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)'
    r"|(?P<op>==|!=|>=|<=|=~|!~|[-+*/%^(){},=<>]))"
)


@dataclass
class Query:
    """What one expression names: metrics with the labels their matchers use, and the grouping labels."""

    metrics: dict[str, set[str]] = field(default_factory=dict)
    grouping: set[str] = field(default_factory=set)


class Parser:
    """A recursive-descent parser for the PromQL the dashboard uses; anything else is a syntax error."""

    def __init__(self, text: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        position = 0
        text = text.rstrip()
        while position < len(text):
            match = TOKEN.match(text, position)
            assert match is not None, f"cannot read {text[position:]!r}"
            assert match.end() > position, f"cannot read {text[position:]!r}"
            kind = match.lastgroup
            assert kind is not None
            self.tokens.append((kind, match[kind]))
            position = match.end()
        self.at = 0
        self.query = Query()

    def parse(self) -> Query:
        self.expression()
        assert self.at == len(self.tokens), f"unexpected {self.tokens[self.at :]}"
        return self.query

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.at] if self.at < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None, kind: str | None = None) -> str:
        got_kind, got = self.peek()
        assert value is None or got == value, f"expected {value}, found {got!r}"
        assert kind is None or got_kind == kind, f"expected a {kind}, found {got!r}"
        self.at += 1
        return got

    def expression(self) -> None:
        self.unary()
        while self.peek()[1] in BINARY:
            self.take()
            if self.peek()[1] == "bool":
                self.take()
            if self.peek()[1] in ("on", "ignoring"):
                self.take()
                self.labels()
            if self.peek()[1] in ("group_left", "group_right"):
                self.take()
                if self.peek()[1] == "(":
                    self.labels()
            self.unary()

    def unary(self) -> None:
        if self.peek()[1] in ("-", "+"):
            self.take()
        self.primary()

    def primary(self) -> None:
        kind, value = self.peek()
        if kind in ("number", "string"):
            self.take()
        elif value == "(":
            self.take("(")
            self.expression()
            self.take(")")
        elif kind == "name" and value in AGGREGATIONS:
            self.aggregation()
        elif kind == "name" and value in FUNCTIONS:
            self.take()
            self.arguments()
        elif kind == "name" or value == "{":
            self.selector()
        else:
            raise AssertionError(f"unexpected {value!r}")

    def aggregation(self) -> None:
        self.take(kind="name")
        if self.peek()[1] in ("by", "without"):
            self.take()
            self.query.grouping |= self.labels()
        self.arguments()
        if self.peek()[1] in ("by", "without"):
            self.take()
            self.query.grouping |= self.labels()

    def arguments(self) -> None:
        self.take("(")
        if self.peek()[1] != ")":
            self.expression()
            while self.peek()[1] == ",":
                self.take(",")
                self.expression()
        self.take(")")

    def labels(self) -> set[str]:
        names = set()
        self.take("(")
        while self.peek()[1] != ")":
            names.add(self.take(kind="name"))
            if self.peek()[1] == ",":
                self.take(",")
        self.take(")")
        return names

    def selector(self) -> None:
        name = self.take(kind="name") if self.peek()[0] == "name" else None
        matched: set[str] = set()
        if self.peek()[1] == "{":
            self.take("{")
            while self.peek()[1] != "}":
                label = self.take(kind="name")
                assert self.take() in ("=", "!=", "=~", "!~")
                self.take(kind="string")
                matched.add(label)
                if self.peek()[1] == ",":
                    self.take(",")
            self.take("}")
        assert name is not None, "a selector without a metric name"
        self.query.metrics.setdefault(name, set()).update(matched)
        if self.peek()[0] == "duration":
            self.take()


def substitute(text: str) -> str:
    for variable, value in VARIABLES.items():
        text = text.replace(variable, value)
    assert "$" not in text, f"a Grafana variable this test does not know: {text}"
    return text


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    found = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert len(found) >= 8
    return found


def dashboard_label_values() -> list[tuple[str, str]]:
    """``label_values(metric, label)`` of the dashboard's variables."""
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    pairs = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((\w+), *(\w+)\)", variable["definition"])
            assert match, variable["definition"]
            pairs.append((match[1], match[2]))
    return pairs


@pytest.fixture(scope="module")
def exposed() -> dict[str, set[str]]:
    """/metrics after every /v1 model's worked example and a /v2 infer: sample name -> its label names;
    and under the key ``model`` the models seen."""
    client: FlaskClient = create_app({"TESTING": True}).test_client()
    contract = yaml.safe_load((ROOT / "openapi.yaml").read_text(encoding="utf-8"))
    models = set()
    for path, operations in contract["paths"].items():
        if path.startswith("/v1/") and "post" in operations:
            example = operations["post"]["requestBody"]["content"]["application/json"]["example"]
            assert client.post(path, json=example).status_code == 200, path
            models.add(path.removeprefix("/v1/"))
    infer = {"inputs": [{"name": "logits", "shape": [1, 2], "datatype": "FP64", "data": [0, 1]}]}
    assert client.post("/v2/models/softmax/infer", json=infer).status_code == 200
    assert client.post("/v1/softmax", json={"logits": "x"}).status_code == 422
    labels: dict[str, set[str]] = {}
    seen_models = set()
    for family in text_string_to_metric_families(client.get("/metrics").get_data(as_text=True)):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
            if sample.name == "attention_inference_requests_total":
                seen_models.add(sample.labels["model"])
    assert models <= seen_models
    return labels


def test_the_parser_refuses_what_is_not_promql() -> None:
    for text in (
        "sum by (model (rate(x[5m]))",
        "rate(x[5m]",
        "x{a=}",
        "histogram_quantile(0.9, x) +",
        "x[5q]",
    ):
        with pytest.raises(AssertionError):
            Parser(text).parse()
    query = Parser('sum by (model) (rate(a_total{outcome!="success"}[5m])) / sum(b)').parse()
    assert query.metrics == {"a_total": {"outcome"}, "b": set()}
    assert query.grouping == {"model"}


@pytest.mark.parametrize("expression", dashboard_expressions())
def test_every_expression_parses_and_names_exposed_metrics(
    expression: str, exposed: dict[str, set[str]]
) -> None:
    query = Parser(substitute(expression)).parse()
    assert query.metrics, expression
    for metric, matched in query.metrics.items():
        assert metric in exposed, f"{metric} is not on /metrics"
        assert matched <= exposed[metric], f"{metric} has no label {matched - exposed[metric]}"
    available = set().union(*(exposed[metric] for metric in query.metrics))
    assert query.grouping <= available, f"grouped by {query.grouping - available}, which the metrics lack"


def test_the_variables_name_exposed_labels(exposed: dict[str, set[str]]) -> None:
    pairs = dashboard_label_values()
    assert pairs
    for metric, label in pairs:
        assert label in exposed[metric], (metric, label)


def test_dashboard_is_grafana_json() -> None:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert dashboard["uid"] == "attention-service"
    assert dashboard["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        refs = [target["refId"] for target in panel["targets"]]
        assert len(refs) == len(set(refs))
