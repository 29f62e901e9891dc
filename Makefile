# tilecraft: two commands on a fresh machine — `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PLUGINS := $(sort $(dir $(wildcard plugins/*/pyproject.toml)))
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-slow bench lint schemas clean

$(STAMP): pyproject.toml setup.py $(wildcard plugins/*/pyproject.toml)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[test]" $(foreach p,$(PLUGINS),-e $(p))
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

test: $(STAMP)
	$(BIN)/python -m pytest

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

bench: $(STAMP)
	$(BIN)/python -m pip install -q torch==2.13.0 || echo "torch not installable here: benchmarks run without it"
	$(BIN)/python bench/run_all.py

lint: $(STAMP)
	$(BIN)/ruff check core tests plugins bench examples

schemas: $(STAMP)
	$(BIN)/tilecraft schemas export schemas

clean:
	rm -rf $(VENV) build *.egg-info
