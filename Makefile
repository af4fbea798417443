# Two commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q
# the CPU build of torch (a plain `torch` requirement could pull a multi-GB CUDA build)
TORCH ?= torch==2.13.0
TEST_EXTRAS ?= dev,rg,math,mcp,train,ray,gem,textarena,docs
# verl and OpenRLHF as tests/train/test_adapters.py runs them: the packages without their heavy
# dependencies (CUDA, vLLM, deepspeed, pinned torch/transformers), plus the light ones their
# agent APIs import. tensordict and pyvers go --no-deps too: pyvers pins packaging<26.
TRAINERS ?= verl==0.9.1 openrlhf==0.11.2 tensordict==0.10.0 pyvers==0.1.0
TRAINER_DEPS ?= orjson cachetools pylatexenc codetiming hydra-core fastapi cloudpickle importlib_metadata

.PHONY: demo test lint bench clean trainers docs

$(VENV)/.demo-installed: pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) -e .
	touch $@

$(VENV)/.test-installed: pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) "$(TORCH)"
	$(PIP) -e ".[$(TEST_EXTRAS)]"
	$(PIP) --no-deps $(TRAINERS)
	$(PIP) $(TRAINER_DEPS)
	touch $@

trainers: $(VENV)/.test-installed
	$(PIP) --no-deps $(TRAINERS)
	$(PIP) $(TRAINER_DEPS)

demo: $(VENV)/.demo-installed
	$(PY) -m gemkit demo --out demo-out

test: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .
	$(PY) -m pytest

# the documentation site with its API reference, into build/site (warnings are errors)
docs: $(VENV)/.test-installed
	$(PY) -m mkdocs build --strict

lint: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .

bench: $(VENV)/.test-installed
	$(PIP) gem-llm
	$(PY) bench/envs.py

clean:
	rm -rf $(VENV) demo-out build *.egg-info
