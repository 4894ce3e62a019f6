#!/usr/bin/env bash
# The benchmarks' peers beyond this project's own environment: delta-rs and delta-spark 4.4.0 (the `bench` extra,
# pinned in constraints.txt) in .venv, delta-spark's jars from Maven Central (benchmarks/peers/pom.xml, checked
# against benchmarks/peers/jars.sha256) in .bench-peers/, and Apache Hudi 0.15.0 for its own Spark writer (the
# oracle's .venv-hudi: scripts/setup-hudi-oracle.sh). Downloads are cached by pip and Maven.
set -euo pipefail
cd "$(dirname "$0")/.."
need() { command -v "$1" >/dev/null 2>&1 || { echo "setup-bench-peers: $1 not found: $2" >&2; exit 1; }; }
need mvn "delta-spark's jars come from Maven Central through Maven (apt-get install maven)"
bash scripts/setup-venv.sh
.venv/bin/python -m pip install -q -c constraints.txt -e ".[bench]"
bash scripts/setup-hudi-oracle.sh
mvn -q -B -f benchmarks/peers/pom.xml dependency:copy@peer-jars -Dpeer.jars="$PWD/.bench-peers"
(cd .bench-peers && sha256sum --quiet -c ../benchmarks/peers/jars.sha256) || {
    echo "setup-bench-peers: a jar in .bench-peers does not match benchmarks/peers/jars.sha256" >&2
    exit 1
}
