#!/usr/bin/env bash
# The test command (README): set up with test extras, lint, then every test that needs no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
python3 -m ruff check fleetval api reports tests bench
python3 -m pytest -q -p no:cacheprovider --durations=25 -n 2 --dist loadgroup "$@"
