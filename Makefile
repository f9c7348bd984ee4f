# The two README commands: `make demo` (main job, embedded default) and `make test` (whole suite).
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench bench-spark bench-kafka bench-archive dist clean crash-sweep cluster-test

$(STAMP): pyproject.toml constraints.txt setup.py engine/format/_codec.pyx
	@command -v $(PYTHON) >/dev/null || { echo "needs $(PYTHON)"; exit 1; }
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade "pip==25.3"
	$(VENV)/bin/pip install -q -c constraints.txt -e ".[spark,demo,test]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/klake demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/python tests/oracles/fetch_jvm.py
	$(VENV)/bin/python -m pytest -q --durations=25
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

# Every job killed at every storage mutation, local and on S3, each re-run checked against a clean run
# (CI runs a sample of the points as part of `make test`). About an hour on 2 cores.
crash-sweep: $(STAMP)
	KLAKE_CRASH_SWEEP=full $(VENV)/bin/python -m pytest -q tests/crash/test_crash_injection.py

bench: $(STAMP)
	$(VENV)/bin/python tests/oracles/fetch_jvm.py kafka
	$(VENV)/bin/python benchmarks/codec_bench.py

bench-spark: $(STAMP)
	$(VENV)/bin/python benchmarks/append_bench.py
	$(VENV)/bin/python benchmarks/read_bench.py

# klake beside a real broker: Spark's Kafka source reading it, kafka-clients' producer writing into it.
bench-kafka: $(STAMP)
	$(VENV)/bin/python tests/oracles/fetch_jvm.py kafka spark-kafka
	$(VENV)/bin/python benchmarks/kafka_bench.py

# `klake archive` of a live topic (>= 1 GiB) beside Spark's Kafka source writing it as Parquet (issue 30).
bench-archive: $(STAMP)
	$(VENV)/bin/python tests/oracles/fetch_jvm.py kafka spark-kafka
	$(VENV)/bin/python benchmarks/archive_bench.py --rounds 5

# What a cluster needs: the wheel (pip install it, with its pinned dependencies, into the executors'
# Python) or, where the dependencies are already there, the code alone for `spark-submit --py-files`.
# A platform wheel with the compiled codec, built from source (Cython): install it on the executors.
dist: $(STAMP)
	rm -rf dist build && mkdir -p dist
	$(VENV)/bin/pip wheel -q --no-deps -w dist .
	@ls -l dist

# A Spark standalone master and worker on loopback, and a job submitted with the wheel alone (also in `make test`).
cluster-test: $(STAMP)
	$(VENV)/bin/python -m pytest -q tests/jobs/test_cluster.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
