# Everything a newcomer needs: `make demo` runs the product, `make test` runs the tests,
# `make services` installs and starts PostgreSQL, Redis and OpenSearch for them (deploy/services.sh).
# Each target creates .venv and installs the project into it on first use
# (and again whenever pyproject.toml changes).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test services clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/ki demo

test: $(STAMP)
	$(PY) -m pytest -q

services:
	bash deploy/services.sh

clean:
	rm -rf $(VENV) .ki .ki-demo .pytest_cache .hypothesis
