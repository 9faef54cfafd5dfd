# The two commands of README.md: `make demo` and `make test`. Both set up
# everything they need on a fresh machine with Python 3.11.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: install demo test test-fast bench clean

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $@

install: $(VENV)/.installed

demo: install
	$(PY) -m distscraper.sandbox.demo

test: install
	$(PY) -m pytest -q

test-fast: install
	$(PY) -m pytest -q -m "not slow and not browser"

bench: install
	$(PY) -m benchmarks.run

clean:
	rm -rf $(VENV) .pytest_cache
