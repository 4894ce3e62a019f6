#!/usr/bin/env bash
# Set up the Java Hudi oracle the tests compare with (marker `java_hudi`): .venv-hudi/ with the pinned pyspark 3.5
# (tests/hudi_oracle/requirements.txt, hash-checked) and Apache Hudi's Spark bundles 0.15.0 and 1.2.0 plus hadoop-aws
# for s3a, copied from Maven Central by tests/hudi_oracle/pom.xml into .venv-hudi/jars/ and checked against
# tests/hudi_oracle/jars.sha256. Downloads are cached by pip and Maven (~/.cache/pip, ~/.m2); a set-up oracle whose
# pins did not change is left as it is, so tests never reach the network.
set -euo pipefail
cd "$(dirname "$0")/.."
ORACLE=tests/hudi_oracle
VENV=.venv-hudi
need() { command -v "$1" >/dev/null 2>&1 || { echo "setup-hudi-oracle: $1 not found: $2" >&2; exit 1; }; }
need java "the Java Hudi oracle runs on Java 17 (apt-get install openjdk-17-jdk-headless)"
need mvn "the Java Hudi oracle's jars come from Maven Central through Maven (apt-get install maven)"
stamp=$(cat "$ORACLE/requirements.txt" "$ORACLE/pom.xml" "$ORACLE/jars.sha256" | sha256sum | cut -d' ' -f1)
if [ -f "$VENV/.stamp" ] && [ "$(cat "$VENV/.stamp")" = "$stamp" ]; then
    exit 0
fi
PY=${PYTHON:-python3}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --require-hashes -r "$ORACLE/requirements.txt"
mvn -q -B -f "$ORACLE/pom.xml" dependency:copy@oracle-jars -Doracle.jars="$PWD/$VENV/jars"
(cd "$VENV/jars" && sha256sum --quiet -c "$PWD/../../$ORACLE/jars.sha256") || {
    echo "setup-hudi-oracle: a jar in $VENV/jars does not match $ORACLE/jars.sha256" >&2
    exit 1
}
echo "$stamp" > "$VENV/.stamp"
