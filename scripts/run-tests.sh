#!/usr/bin/env bash
# Set up the virtualenv, then the fast checks (lint, format, types, import layers: they fail first), then the whole
# test suite. Arguments go to pytest, e.g. `scripts/run-tests.sh -m "not spark"` for the Spark-free tests only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
bash scripts/setup-hudi-oracle.sh  # Apache Hudi itself, the oracle of the `java_hudi` tests (.venv-hudi)
bash scripts/cdc-env.sh install  # PostgreSQL, Kafka, Kafka Connect, Debezium, Spark's Kafka source (`cdc_real` tests)
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python scripts/check_imports.py
# Two pytest-xdist workers (HOODIE_TEST_WORKERS; 0 runs in this process): each has its SparkSession and runs whole
# modules (--dist loadfile); the java_hudi modules all go to one worker, which starts the Hudi oracles once
# (tests/conftest.py, pytest_xdist_make_scheduler).
exec .venv/bin/python -m pytest -q --durations=30 -n "${HOODIE_TEST_WORKERS:-2}" --dist loadfile "$@"
