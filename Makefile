# The two README commands: `make demo` (main job, embedded default) and `make test` (whole suite).
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "needs $(PYTHON)"; exit 1; }
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade "pip==25.3"
	$(VENV)/bin/pip install -q -c constraints.txt -e ".[spark,demo,test]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/klake demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python tests/oracles/fetch_kafka_clients.py
	$(VENV)/bin/python -m pytest -q

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/codec_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
