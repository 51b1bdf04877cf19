"""``make scale-check``: the compose ``scale`` profile on this host: replicas behind deploy/nginx.conf.

Three replicas (one worker each, started as in the image) on loopback ports, Debian's nginx running
deploy/nginx.conf in front of them (deploy/proxy.py rewrites only the listen address, the upstreams and the
paths). Checks, through the proxy: the worked example, X-Request-ID passed through and logged by both
nginx and the service, requests spread over every replica, nginx's own 413 as problem+json, and the slow
clients (deploy/slow_clients.py) with their probe bounds. Fails on any miss.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import httpx

from deploy import proxy, slow_clients
from deploy.launch import start

REPLICAS = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.scale", description=__doc__)
    parser.add_argument("--slow-seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    failures: list[str] = []
    with contextlib.ExitStack() as stack:
        replicas = []
        for _ in range(REPLICAS):
            replica = start(workers=1)
            stack.callback(replica.terminate)
            replicas.append(replica)
        front = stack.enter_context(proxy.nginx([replica.port for replica in replicas]))
        print(f"scale: nginx on 127.0.0.1:{front.port} in front of {[r.port for r in replicas]}", flush=True)
        with httpx.Client(base_url=front.base_url, timeout=30) as client:
            for n in range(30):
                answer = client.post(
                    "/v1/attention",
                    json=json.loads(slow_clients.SEED_BODY),
                    headers={"X-Request-ID": f"scale-{n}"},
                )
                weights = answer.json().get("weights") if answer.status_code == 200 else None
                if (
                    weights != list(slow_clients.SEED_WEIGHTS)
                    or answer.headers.get("x-request-id") != f"scale-{n}"
                ):
                    failures.append(f"seed example through nginx: {answer.status_code} {answer.text[:200]}")
                    break
            # nginx's own 413, for a request id the service would not keep either: it was spliced into the
            # problem as sent (a quote in it rewrote the problem's type), and logged where the service
            # logged its own id instead.
            hostile_id = 'x","type":"https://evil.example'
            too_large = client.post(
                "/v1/softmax",
                content=b" " * (18 * 1024 * 1024),
                headers={"Content-Type": "application/json", "X-Request-ID": hostile_id},
            )
            try:
                problem = too_large.json()
            except ValueError:
                problem = {}
            if (
                too_large.status_code != 413
                or too_large.headers.get("content-type") != "application/problem+json"
                or problem.get("type") != "urn:attention-service:problem:body-too-large"
                or problem.get("request_id") in (None, hostile_id)
            ):
                failures.append(
                    f"an 18 MiB body through nginx: {too_large.status_code} {too_large.text[:200]}"
                )
            spaced = client.get("/livez", headers={"X-Request-ID": "a b c"})
            replaced_id = spaced.headers.get("x-request-id", "")
            if replaced_id in ("", "a b c"):
                failures.append(f"an id with spaces through nginx came back as {replaced_id!r}")
        time.sleep(0.5)  # the log lines are written
        served_by = {
            replica.port
            for replica in replicas
            for line in replica.stdout
            if line.startswith("{") and json.loads(line).get("request_id", "").startswith("scale-")
        }
        print(f"  the worked example: 30 requests, served by {len(served_by)} of {REPLICAS} replicas")
        if len(served_by) != REPLICAS:
            failures.append(f"only {len(served_by)} of {REPLICAS} replicas served the 30 requests")
        nginx_lines = (front.log_dir / "access.log").read_text().splitlines()
        if not any('"request_id":"scale-0"' in line for line in nginx_lines):
            failures.append("nginx's access log has no line for request scale-0")
        if not any(f'"request_id":"{replaced_id}"' in line for line in nginx_lines):
            failures.append(f"nginx's access log does not have the id the service answered, {replaced_id!r}")
        for label, idle, slowloris in (("idle", 64, 0), ("slowloris", 0, 64)):
            probes = slow_clients.run(front.port, seconds=args.slow_seconds, idle=idle, slowloris=slowloris)
            print(
                f"  {label} + 4 slow readers through nginx for {args.slow_seconds:.0f} s: /livez at most "
                f"{probes.worst('livez'):.2f} s, the worked example at most {probes.worst('seed'):.2f} s",
                flush=True,
            )
            failures.extend(f"slow clients ({label}) through nginx: {failure}" for failure in probes.failures)
        for replica in replicas:
            if len(replica.worker_pids()) != 1:
                failures.append(f"replica {replica.port} lost its worker")
    if failures:
        print("SCALE CHECK FAILED")
        for failure in failures[:20]:
            print(f"  - {failure}")
        return 1
    print("SCALE CHECK OK")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
