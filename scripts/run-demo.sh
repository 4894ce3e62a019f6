#!/usr/bin/env bash
# Set up the virtualenv and run the main job (the local demo).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
exec .venv/bin/python -m hoodie_stream demo "$@"
