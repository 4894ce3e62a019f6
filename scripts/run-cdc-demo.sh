#!/usr/bin/env bash
# The real CDC pipeline end to end (examples/cdc_demo.py): sets up the virtualenv, starts PostgreSQL, Kafka and
# Kafka Connect with Debezium (scripts/cdc-env.sh, state in .cdc-env/demo), streams a workload's changes into Hudi
# tables and compares them with PostgreSQL, then stops the environment. Arguments go to the demo (--lake DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
DIR=.cdc-env/demo
trap 'bash scripts/cdc-env.sh stop "$DIR"' EXIT
echo "starting PostgreSQL, Kafka and Kafka Connect with Debezium (first time: downloads from Maven Central)" >&2
eval "$(bash scripts/cdc-env.sh start "$DIR")"
.venv/bin/python examples/cdc_demo.py "$@"
