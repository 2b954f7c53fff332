# `make demo` sets up .venv and runs the main job; `make test` runs the test suite.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test bench setup clean

demo: $(VENV)/.installed
	$(BIN)/onnxport demo

test: $(VENV)/.installed
	$(BIN)/python -m pytest

bench: $(VENV)/.installed-bench
	$(BIN)/python bench/run.py --out bench/results.md

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[test]"
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[test,bench]"
	touch $@

clean:
	rm -rf $(VENV) onnxport-demo build *.egg-info src/*.egg-info
