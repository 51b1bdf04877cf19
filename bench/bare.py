"""A Flask app that does no work: the HTTP floor, served by gunicorn with the service's settings."""

from __future__ import annotations

from flask import Flask, Response, request

APP = "bench.bare:app"  # what gunicorn serves
app = Flask(__name__)
ANSWER = b'{"output":[1.9814307040400587,2.0092846479799706]}'


@app.post("/v1/<path:name>")
def no_work(name: str) -> Response:
    request.get_data()  # receive the body, as the service must, but do nothing with it
    return Response(ANSWER, mimetype="application/json")


@app.get("/readyz")  # the launcher's readiness rule
def readyz() -> Response:
    return Response(b'{"status":"ok"}', mimetype="application/json")
