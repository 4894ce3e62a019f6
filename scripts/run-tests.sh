#!/usr/bin/env bash
# Set up the virtualenv and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
exec .venv/bin/python -m pytest -q "$@"
