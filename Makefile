# Everything a newcomer needs: `make demo` runs the product, `make test` runs the tests,
# `make services` installs and starts PostgreSQL, Redis and OpenSearch for them (deploy/services.sh),
# `make production` every Procfile process against them (deploy/production.sh), `make browser` Debian's Chromium for the web page tests.
# Each target creates .venv and installs the project into it on first use
# (and again whenever pyproject.toml changes).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test services browser production clean

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

# Every Procfile process (after `ki init`) against the services of `make services`; Ctrl-C stops them all.
production: $(STAMP)
	VENV=$(VENV) bash deploy/production.sh

# Debian's headless Chromium for the web page tests (tests/ki_query/web); idempotent, no browser download.
browser:
	@test -x /usr/bin/chromium || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@echo "chromium: /usr/bin/chromium"

clean:
	rm -rf $(VENV) .ki .ki-demo .ki-production .pytest_cache .hypothesis
