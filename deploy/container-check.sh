#!/usr/bin/env bash
# The image, built and run: ../shared/tools/container-smoke (hadolint, build, run, /readyz, non-root,
# HEALTHCHECK, compose config + up), then our own checks on the same image, run as compose runs it
# (read-only root, tmpfs /tmp and /dev/shm): seconds to /readyz, the seed example answered from inside
# the container, one JSON access-log line, the size added to the base image, a clean exit on SIGTERM.
# Needs root (podman); the smoke tool installs podman itself. Usage: bash deploy/container-check.sh
# `--find-tool` only says where the smoke tool is, or fails: CI asks first, rather than 45 minutes in.
set -euo pipefail
cd "$(dirname "$0")/.."
# The smoke tool lies in ../shared beside the repository. A clone made elsewhere (`git clone . /tmp/fresh`)
# finds it beside the repository it was cloned from; CONTAINER_SMOKE overrides both.
find_smoke_tool() {
  local beside=../shared/tools/container-smoke origin
  if [ -n "${CONTAINER_SMOKE:-}" ]; then
    beside=$CONTAINER_SMOKE
  elif [ ! -x "$beside" ] && origin=$(git remote get-url origin 2>/dev/null) && [ -d "$origin" ]; then
    beside=$origin/../shared/tools/container-smoke
  fi
  [ -x "$beside" ] || {
    echo "FAIL: no container smoke tool at $beside (set CONTAINER_SMOKE to its path)" >&2
    return 1
  }
  echo "$(cd "$(dirname "$beside")" && pwd)/$(basename "$beside")"
}
SMOKE=$(find_smoke_tool)
if [ "${1:-}" = --find-tool ]; then
  echo "container smoke tool: $SMOKE"
  exit 0
fi
IMAGE=${IMAGE:-localhost/attention-service-smoke:latest}
BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm
MAX_ADDED_MB=${MAX_ADDED_MB:-120}
READY_TARGET_SECONDS=${READY_TARGET_SECONDS:-5}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# compose publishes on loopback ports nobody else is using (several engineers share a machine)
export PUBLISH_PORT=${PUBLISH_PORT:-$(free_port)} PROXY_PORT=${PROXY_PORT:-$(free_port)}
HOST_PORT=${HOST_PORT:-$(free_port)} IMAGE=$IMAGE HEALTH_PATH=/readyz COMPOSE_UP=1 HADOLINT_THRESHOLD=warning \
  bash "$SMOKE" .

echo
echo "== scale profile: docker-compose config (the nginx image cannot be pulled here: make scale-check runs"
echo "   deploy/nginx.conf with Debian's nginx on the host instead)"
docker-compose -f docker-compose.yml --profile scale config --services | tr '\n' ' '; echo
docker-compose -f docker-compose.yml --profile scale config -q && echo "scale profile: valid"

echo
echo "== our checks on $IMAGE"
export CONTAINERS_CONF=${WORK:-/tmp/ctest}/containers.conf  # the smoke tool's runtime settings
PORT_OUT=$(free_port)
CID=
cleanup() { [ -n "$CID" ] && podman rm -f -t 5 "$CID" >/dev/null 2>&1 || true; }
trap cleanup EXIT

start=$(date +%s.%N)
CID=$(podman run -d --read-only --tmpfs /tmp --tmpfs /dev/shm -e WEB_CONCURRENCY=2 \
  -p "127.0.0.1:$PORT_OUT:8000" "$IMAGE" 2>/dev/null)
ready=
for _ in $(seq 1 600); do
  if curl -sf -o /dev/null --max-time 1 "http://127.0.0.1:$PORT_OUT/readyz"; then ready=1; break; fi
  [ "$(podman inspect -f '{{.State.Running}}' "$CID")" = true ] || break
  sleep 0.05
done
ready_seconds=$(python3 -c "print(f'{$(date +%s.%N) - $start:.2f}')")
[ -n "$ready" ] || { podman logs "$CID" | tail -20; echo "FAIL: no /readyz answer (read-only root)"; exit 1; }
echo "time to /readyz (read-only root, 2 workers): ${ready_seconds} s (target < ${READY_TARGET_SECONDS} s)"

echo -n "inside the container: "; podman exec -i "$CID" python - < deploy/check_seed.py
echo -n "through 127.0.0.1:$PORT_OUT: "; python3 deploy/check_seed.py "http://127.0.0.1:$PORT_OUT"
podman logs "$CID" 2>/dev/null | grep '"request_id":"seed-check"' | head -1 | python3 -c \
  'import json, sys; line = json.loads(sys.stdin.readline()); assert line["status"] == 200, line; print("access log line:", line)'

# The default deployment must not stall under slow clients (README "Worker models"): 64 idle, then 64
# slowloris connections, each time with 4 slow readers of a 6 MB answer, while /livez (1 s) and the worked
# example (2 s) are probed every half second. Standard library only, so the host's python3 runs it.
SLOW_SECONDS=${SLOW_SECONDS:-60}
echo "slow clients against the image, ${SLOW_SECONDS} s each:"
python3 -m deploy.slow_clients --port "$PORT_OUT" --seconds "$SLOW_SECONDS"

podman stop -t 30 "$CID" >/dev/null
exit_code=$(podman inspect -f '{{.State.ExitCode}}' "$CID")
[ "$exit_code" = 0 ] || { podman logs "$CID" | tail -20; echo "FAIL: exit code $exit_code after SIGTERM"; exit 1; }
echo "SIGTERM: exited 0"

image_bytes=$(podman image inspect -f '{{.Size}}' "$IMAGE")
base_bytes=$(podman image inspect -f '{{.Size}}' "$BASE_IMAGE")
added_mb=$(( (image_bytes - base_bytes) / 1000000 ))
echo "image: $((image_bytes / 1000000)) MB, base $BASE_IMAGE $((base_bytes / 1000000)) MB, added ${added_mb} MB (limit ${MAX_ADDED_MB} MB)"
[ "$added_mb" -lt "$MAX_ADDED_MB" ] || { echo "FAIL: the image adds ${added_mb} MB"; exit 1; }
if python3 -c "import sys; sys.exit(0 if $ready_seconds < $READY_TARGET_SECONDS else 1)"; then
  echo "CONTAINER CHECKS OK"
else
  # reported, not failed: start-up time on a shared CI machine varies with its load
  echo "CONTAINER CHECKS OK (WARNING: /readyz took ${ready_seconds} s, over the ${READY_TARGET_SECONDS} s target)"
fi
