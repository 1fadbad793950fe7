#!/usr/bin/env bash
# The test command (README): set up with test extras, lint, then every test that needs no GPU.
# Three xdist workers on two cores: the suite waits on deadlines and other processes a third of
# the time, so a third worker fills it (bench/RESULTS.md, "Test time, sixth session").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
python3 -m ruff check fleetval api reports tests bench
python3 -m pytest -q -p no:cacheprovider --durations=25 -n 3 --dist loadgroup --no-loadscope-reorder "$@"
