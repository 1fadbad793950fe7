#!/usr/bin/env bash
# The test command (README): set up with test extras, lint, then every test that needs no GPU.
# Three xdist workers on two cores: with two, the cores idled 13% of a run (both waiting on
# deadlines at once); a third fills it (bench/RESULTS.md, "Test time on 2 cores,
# 2026-11-27 04:17-06:04 UTC").
set -euo pipefail
cd "$(dirname "$0")/.."
# Bytecode caches on, whatever the machine says: without them every pytest worker rewrites and
# compiles each test module again (a third of its collection), and every `fleetval` process and
# rank actor the tests start compiles fleetval's modules again.
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup.sh test
python3 -m ruff check fleetval api reports tests bench
python3 -m pytest -q -p no:cacheprovider --durations=25 -n 3 --dist loadgroup --no-loadscope-reorder "$@"
