# Two commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install -q
# the CPU build of torch (a plain `torch` requirement could pull a multi-GB CUDA build)
TORCH ?= torch==2.13.0
TEST_EXTRAS ?= dev,rg,math,mcp,train,ray

.PHONY: demo test lint bench clean

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
	touch $@

demo: $(VENV)/.demo-installed
	$(PY) -m gemkit demo --out demo-out

test: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .
	$(PY) -m pytest

lint: $(VENV)/.test-installed
	$(VENV)/bin/ruff check .

bench: $(VENV)/.test-installed
	$(PIP) gem-llm
	$(PY) bench/envs.py

clean:
	rm -rf $(VENV) demo-out build *.egg-info
