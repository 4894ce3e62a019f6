#!/usr/bin/env bash
# Create .venv (if missing) and install hoodie-stream with its pinned dependencies (constraints.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v java >/dev/null 2>&1 || echo "warning: java not found; PySpark needs Java 17 (apt-get install openjdk-17-jre-headless)" >&2
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -c constraints.txt -e ".[test]"
