# Two commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q
# the CPU build of torch (a plain `torch` requirement could pull a multi-GB CUDA build)
TORCH ?= torch==2.13.0
TEST_EXTRAS ?= dev,rg,math,mcp,train,ray,gem,textarena,textworld,twx,scienceworld,openenv,skyrl,docs
# verl and OpenRLHF as tests/train/test_adapters.py runs them: the packages without their heavy
# dependencies (CUDA, vLLM, deepspeed, pinned torch/transformers), plus the light ones their
# agent APIs import. tensordict and pyvers go --no-deps too: pyvers pins packaging<26.
TRAINERS ?= verl==0.9.1 openrlhf==0.11.2 tensordict==0.10.0 pyvers==0.1.0
TRAINER_DEPS ?= orjson cachetools pylatexenc codetiming hydra-core fastapi cloudpickle importlib_metadata
# verifiers the same way: it pins mcp==2.0.0 and openai<3, older than the ones the rest of the
# suite runs on; these are the light packages verifiers.v1 imports (tests/integrations)
VERIFIERS ?= verifiers==0.4.0
VERIFIERS_DEPS ?= anthropic gepa httpx2 loguru msgpack 'prime-pydantic-config[toml]' prime-runs \
	prime-sandboxes prime-tunnel pyzmq 'renderers[multimodal]' tenacity tomli-w
# NeMo Gym needs Python >= 3.12 (and pins mcp<2): its own virtualenv, with gemkit, when a
# python3.12 is on the machine (tests/integrations/test_nemo_gym.py runs its server there)
NEMO_VENV ?= .venv-nemo
NEMO_GYM ?= nemo-gym==0.4.0

.PHONY: demo test live lint typecheck bench clean trainers nemo docs

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
	$(PIP) --no-deps $(VERIFIERS)
	$(PIP) $(VERIFIERS_DEPS)
	touch $@

# a Python 3.12 for NeMo Gym: $(NEMO_PYTHON), else pyenv's, else python3.12 on the PATH
# (the first that runs: a pyenv shim of a version not selected does not)
$(NEMO_VENV)/.installed: pyproject.toml setup.py
	py=""; for c in $${NEMO_PYTHON:-} /root/.pyenv/versions/3.12*/bin/python3.12 python3.12; do \
	  if "$$c" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then py=$$c; break; fi; \
	done; \
	if [ -z "$$py" ]; then echo "no Python 3.12 here: the NeMo Gym tests will skip"; exit 0; fi; \
	test -x $(NEMO_VENV)/bin/python || "$$py" -m venv $(NEMO_VENV); \
	$(NEMO_VENV)/bin/python -m pip install -q -e . "$(NEMO_GYM)" && touch $@

nemo: $(NEMO_VENV)/.installed

trainers: $(VENV)/.test-installed
	$(PIP) --no-deps $(TRAINERS)
	$(PIP) $(TRAINER_DEPS)

demo: $(VENV)/.demo-installed
	$(PY) -m gemkit demo --out demo-out

test: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(MAKE) --no-print-directory typecheck
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

# the documentation site with its API reference, into build/site (warnings are errors)
docs: $(VENV)/.test-installed
	$(PY) -m mkdocs build --strict

# mypy over gemkit/, envs/ and synth/ seen as the installed package sees them (gemkit.envs,
# gemkit.synth): a tree of links in build/typecheck, where its cache stays between runs. The
# level is in pyproject.toml ([tool.mypy]). Then the public API under --strict: every
# __init__.pyi and the modules its names come from (through a package's __init__, as
# gemkit.vector's), each module's own errors only (docs/architecture.md, Type checking).
TYPECHECK ?= build/typecheck
API_FROM = sed -n 's/^from \(gemkit[a-z_.]*\) import .*/\1/p'
typecheck: $(VENV)/.test-installed
	rm -rf $(TYPECHECK)/gemkit && mkdir -p $(TYPECHECK)/gemkit
	for f in gemkit/* envs synth; do ln -s "$(CURDIR)/$$f" $(TYPECHECK)/gemkit/; done
	cd $(TYPECHECK) && $(abspath $(PY)) -m mypy --config-file $(CURDIR)/pyproject.toml
	cd $(TYPECHECK) && stubs=$$(find -L gemkit -name __init__.pyi | sort) && \
	  mods="$$(dirname $$stubs | tr / .) $$($(API_FROM) $$stubs)" && \
	  for m in $$mods; do p=$$(echo $$m | tr . /)/__init__.py; \
	    if [ -f $$p ]; then mods="$$mods $$($(API_FROM) $$p)"; fi; done && \
	  $(abspath $(PY)) -m mypy --config-file $(CURDIR)/pyproject.toml --strict \
	    --follow-imports=silent --no-warn-unused-configs --cache-dir .mypy_cache_strict $$(printf -- '-m %s\n' $$mods | sort -u)

lint: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(VENV)/.test-installed
	$(PIP) gem-llm
	$(PY) bench/envs.py
	$(PY) bench/gem_family.py

clean:
	rm -rf $(VENV) $(NEMO_VENV) demo-out build *.egg-info
