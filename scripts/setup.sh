#!/usr/bin/env bash
# Set up fleetval on a fresh machine: torch first (only when absent, so a CPU machine takes the
# local CPU wheel instead of resolving a multi-GB CUDA build), then the package.
# Usage: bash scripts/setup.sh [test]     ("test" adds the test extras, chromium, slurm and munge)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install -q "torch==2.13.0"
fi
extra=""
if [ "${1:-}" = "test" ]; then
  extra="[test]"
  # Debian's packages: the sign-off report test opens the HTML in a real headless browser; the
  # Slurm test (tests/deploy) starts a one-node Slurm cluster with munge.
  apt=()
  { command -v chromium && command -v chromedriver; } >/dev/null || apt+=(chromium chromium-driver)
  { [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && command -v sbatch; } >/dev/null \
    || apt+=(slurmctld slurmd slurm-client)
  [ -x /usr/sbin/munged ] || apt+=(munge)
  if [ ${#apt[@]} -gt 0 ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo -n"
    $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${apt[@]}" >/dev/null
  fi
fi
"$PY" -m pip install -q -e ".${extra}" 2>&1 | grep -v -e '^WARNING' -e 'is ignored' || true
"$PY" -c "import fleetval, ray, torch; print(f'fleetval ready: torch {torch.__version__}, ray {ray.__version__}')"
