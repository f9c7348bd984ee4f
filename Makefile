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
	$(MAKE) test-airflow

# Airflow gets its own virtualenv: its Spark provider pulls `pyspark-client`, which clashes with `pyspark`.
# The tests submit jobs with the project venv's `spark-submit`, so both environments must exist.
AIRFLOW_VENV := .venv-airflow
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed

.PHONY: test-airflow

$(AIRFLOW_STAMP): constraints-airflow.txt
	@command -v $(PYTHON) >/dev/null || { echo "needs $(PYTHON)"; exit 1; }
	test -x $(AIRFLOW_VENV)/bin/python || $(PYTHON) -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/pip install -q --upgrade "pip==25.3"
	$(AIRFLOW_VENV)/bin/pip install -q -c constraints-airflow.txt \
		"apache-airflow==3.3.2" "apache-airflow-providers-apache-spark==6.3.4" "pytest==9.2.0"
	touch $(AIRFLOW_STAMP)

test-airflow: $(STAMP) $(AIRFLOW_STAMP)
	$(AIRFLOW_VENV)/bin/python -m pytest tests/airflow -q

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/codec_bench.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
