# pyspark-gazette developer commands. `make help` lists them.
# Everything installs itself into .venv on first use (a fresh machine needs Python 3.10+, Java 17).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: help quickstart test test-unit lint format protocol protocol-check docs docs-gen docs-serve bench clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

quickstart: $(STAMP)  ## run the quickstart on an embedded broker (the main job)
	PYSPARK_PYTHON=$(abspath $(PY)) $(VENV)/bin/pyspark-gazette quickstart

test: $(STAMP)  ## run every test tier (unit, integration, spark)
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest

test-unit: $(STAMP)  ## only the unit tests
	$(PY) -m pytest tests/unit

lint: $(STAMP)  ## ruff lint + format check, mypy on the package
	$(VENV)/bin/ruff check connector tests tools bench notebooks
	$(VENV)/bin/ruff format --check connector tests tools bench notebooks
	$(VENV)/bin/mypy connector/pyspark_gazette

format: $(STAMP)  ## apply ruff fixes and formatting
	$(VENV)/bin/ruff check --fix connector tests tools bench notebooks
	$(VENV)/bin/ruff format connector tests tools bench notebooks

protocol: $(STAMP)  ## regenerate the protocol stubs from protocol.proto
	$(PY) tools/gen_protocol.py

protocol-check: $(STAMP)  ## fail if the stubs drift from the .proto or from Gazette's wire facts
	$(PY) tools/gen_protocol.py --check
	$(PY) ../shared/tools/check_protocol_descriptors.py

docs-gen: $(STAMP)  ## regenerate docs/options.md and the CLI reference from the code
	$(PY) tools/gen_docs.py

docs: $(STAMP)  ## build the MkDocs site into site/ (strict: warnings fail); checks generated pages
	$(PY) tools/gen_docs.py --check
	$(PY) -m mkdocs build --strict -d site

docs-serve: $(STAMP)  ## serve the docs with live reload on http://127.0.0.1:8000
	$(PY) -m mkdocs serve

clean:  ## remove the virtualenv and caches
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache .gazette
