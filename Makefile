# One command each for a fresh machine: `make run` serves the API, `make test` runs the tests.
# Both build .venv from the lock files by themselves; a lock file change rebuilds it.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000

RUNTIME_STAMP := $(VENV)/.runtime-installed
DEV_STAMP     := $(VENV)/.dev-installed
# The JS tooling (Biome: lint and format of service/static), from package-lock.json; nothing ships from it.
NODE_STAMP    := node_modules/.installed
BIOME         := node_modules/.bin/biome

.PHONY: run test test-other-arithmetic lint format typecheck check openapi clients clean soak kubernetes-validate \
	container-smoke screenshots bench bench-smoke bench-tune bench-workers attack scale-check dist

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"

$(RUNTIME_STAMP): requirements.lock | $(BIN)/python
	$(BIN)/python -m pip install --quiet -r requirements.lock
	touch $@

$(DEV_STAMP): requirements-dev.lock $(RUNTIME_STAMP)
	$(BIN)/python -m pip install --quiet -r requirements-dev.lock
	touch $@

# `python -m service serve` is the `attention-service serve` console script, run from this clone.
run: $(RUNTIME_STAMP)  ## serve the API with gunicorn on $(HOST):$(PORT)
	$(BIN)/python -m service serve --host $(HOST) --port $(PORT)

test: $(DEV_STAMP)  ## the test suite
	$(BIN)/python -m pytest

# The numeric and contract tests again on two other arithmetic paths of this x86-64 CPU: NumPy's SIMD dispatch
# narrowed (NPY_DISABLE_CPU_FEATURES takes NumPy's group names only) and OpenBLAS pinned to an older core,
# as on an AVX2 machine without AVX-512 (e.g. AMD EPYC), then on SSE4.2 only. Results move in their last
# bits; the tests, the contract's bytes and the README's examples must not. Only this target sets these.
NUMERIC_TESTS := tests/test_arithmetic_path.py tests/kernels tests/api tests/test_contract.py tests/test_readme.py
test-other-arithmetic: $(DEV_STAMP)  ## the numeric and contract tests on AVX2-only and SSE-only arithmetic
	NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR" OPENBLAS_CORETYPE=Haswell \
		$(BIN)/python -m pytest -p no:cacheprovider $(NUMERIC_TESTS)
	NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR" OPENBLAS_CORETYPE=Nehalem \
		$(BIN)/python -m pytest -p no:cacheprovider $(NUMERIC_TESTS)

$(NODE_STAMP): package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

# lint-imports checks the layering contracts in pyproject.toml ([tool.importlinter]): what the kernels and
# the typed requests may import, and no import cycles in service. No cache: the graph takes a second.
lint: $(DEV_STAMP) $(NODE_STAMP)  ## ruff and import-linter (Python), Biome (the widgets' JS and CSS)
	$(BIN)/ruff check service tests bench deploy client
	$(BIN)/ruff format --check service tests bench deploy client
	$(BIN)/lint-imports --no-cache --no-logo
	$(BIOME) ci --colors=off .

format: $(DEV_STAMP) $(NODE_STAMP)  ## rewrite Python, JS and CSS in the formatters' style (and apply safe lint fixes to JS)
	$(BIN)/ruff format service tests bench deploy client
	$(BIOME) check --write .

typecheck: $(DEV_STAMP)
	$(BIN)/mypy

check: lint typecheck test

# PYTHONDONTWRITEBYTECODE (set in some shells and images) makes setuptools warn that it skips byte-compiling.
dist: $(DEV_STAMP)  ## the sdist and the wheel in dist/ (python -m build); any packaging warning fails it
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m build --outdir dist . > build.log 2>&1 || { cat build.log; exit 1; }
	! grep -E "Warning|warning:" build.log

openapi: $(DEV_STAMP)  ## regenerate openapi.yaml from the schemas, then the Python client's methods from it
	$(BIN)/python -m service.contract > openapi.yaml
	$(BIN)/python -m service.site.javascript > service/static/models.js
	$(MAKE) --no-print-directory clients

# Run as a file: importing the package would import the module it writes.
clients: $(DEV_STAMP)  ## regenerate the Python client's model methods (client/…/_models.py) from openapi.yaml
	$(BIN)/python client/src/attention_client/_generate.py openapi.yaml > client/src/attention_client/_models.py.new
	mv client/src/attention_client/_models.py.new client/src/attention_client/_models.py

screenshots: $(DEV_STAMP)  ## refresh the README's screenshots in docs/ (headless Chromium)
	UPDATE_SCREENSHOTS=1 $(BIN)/python -m pytest tests/browser -k "screenshot or docs_render"

clean:
	rm -rf $(VENV) .venv-3.13 dist build.log node_modules .pytest_cache .mypy_cache .ruff_cache .hypothesis

bench: $(DEV_STAMP)  ## the benchmark suite: the service against the in-process and bare-Flask floors
	PYTHONPATH=client/src $(BIN)/python -m bench

bench-smoke: $(DEV_STAMP)  ## every benchmark, a few repetitions each (CI; no timing is asserted)
	PYTHONPATH=client/src $(BIN)/python -m bench --smoke

bench-tune: $(DEV_STAMP)  ## compare gunicorn settings (workers, threads, BLAS threads) on tiny and 512 requests
	PYTHONPATH=client/src $(BIN)/python -m bench.tune

# --- deployment (docs/operations.md) ---
SOAK_SECONDS ?= 60

soak: $(DEV_STAMP)  ## 64 keep-alive connections against gunicorn for SOAK_SECONDS; fails on 5xx, drops, leaks
	SOAK_SECONDS=$(SOAK_SECONDS) $(BIN)/python -m deploy.soak

ATTACK_ARGS ?=
SCALE_SLOW_SECONDS ?= 60

attack: $(DEV_STAMP)  ## hostile clients against gunicorn under a 1 GiB address-space limit (deploy/attack.py)
	$(BIN)/python -m deploy.attack $(ATTACK_ARGS)

scale-check: $(DEV_STAMP)  ## deploy/nginx.conf (Debian's nginx) before 3 replicas; slow clients through it
	$(BIN)/python -m deploy.scale --slow-seconds $(SCALE_SLOW_SECONDS)

bench-workers: $(DEV_STAMP)  ## worker models side by side: slow clients, the soak, tiny requests
	PYTHONPATH=client/src $(BIN)/python -m bench.workers

kubernetes-validate: $(DEV_STAMP)  ## the manifests in deploy/kubernetes against the Kubernetes schemas, offline
	$(BIN)/kubernetes-validate --strict --quiet deploy/kubernetes/*.yaml

container-smoke:  ## build the image with podman, run it, check /readyz, the seed example, compose (root)
	bash deploy/container-check.sh
