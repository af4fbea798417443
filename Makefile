# Two commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q
# the CPU build of torch (a plain `torch` requirement could pull a multi-GB CUDA build)
TORCH ?= torch==2.13.0
TEST_EXTRAS ?= dev,rg,math,mcp,train,ray,gem,textarena
# verl and OpenRLHF as tests/train/test_adapters.py runs them: the packages without their heavy
# dependencies (CUDA, vLLM, deepspeed, pinned torch/transformers), plus the light ones their
# agent APIs import. tensordict and pyvers go --no-deps too: pyvers pins packaging<26.
TRAINERS ?= verl==0.9.1 openrlhf==0.11.2 tensordict==0.10.0 pyvers==0.1.0
TRAINER_DEPS ?= orjson cachetools pylatexenc codetiming hydra-core fastapi cloudpickle importlib_metadata

.PHONY: demo test live lint bench clean trainers

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

# The live suite: gemkit against a real vLLM and a real llama.cpp serving a real model
# (tests/live/conftest.py). LIVE_KEEP=1 leaves the servers running afterwards.
LIVE_VLLM_PORT ?= 8097
LIVE_LLAMA_PORT ?= 8087
live: $(VENV)/.test-installed
	LIVE_VLLM_PORT=$(LIVE_VLLM_PORT) LIVE_LLAMA_PORT=$(LIVE_LLAMA_PORT) bash tests/live/servers/start.sh
	GEMKIT_LIVE_VLLM=http://127.0.0.1:$(LIVE_VLLM_PORT)/v1 \
	GEMKIT_LIVE_LLAMA=http://127.0.0.1:$(LIVE_LLAMA_PORT)/v1 \
	$(PY) -m pytest -m live tests/live; status=$$?; \
	[ -n "$(LIVE_KEEP)" ] || LIVE_VLLM_PORT=$(LIVE_VLLM_PORT) LIVE_LLAMA_PORT=$(LIVE_LLAMA_PORT) bash tests/live/servers/start.sh stop; \
	exit $$status

lint: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .

bench: $(VENV)/.test-installed
	$(PIP) gem-llm
	$(PY) bench/envs.py

clean:
	rm -rf $(VENV) demo-out build *.egg-info
