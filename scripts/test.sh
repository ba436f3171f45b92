#!/usr/bin/env bash
# Provision from nothing, then run the whole test suite (offline, fake-datapath and root tiers).
#   bash scripts/test.sh [pytest args]      (as root, or as a sudo user: it re-runs itself with sudo)
set -euo pipefail
# Root is needed (Mininet, OVS, apt). As a sudo user, re-run through sudo; as root (a fresh Debian
# machine has no sudo), just run.
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "$0: run as root (no sudo on this machine)" >&2; exit 1; }
  exec sudo -E bash "$0" "$@"
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# --referee: the suite includes the ns-3 referee's tests, so CI installs the optional referee too
bash scripts/provision.sh --referee
# Lint and format first (pyproject.toml [tool.ruff]; the fast loop, scripts/check.sh, runs the same).
.venv/bin/ruff check .
.venv/bin/ruff format --check .
# The architecture's import contracts (pyproject.toml [tool.importlinter]): a wrong arrow fails here.
.venv/bin/lint-imports --no-cache
# With arguments: one pytest run with them. Without: the offline and fake-datapath tier on both
# cores (pytest-xdist: 3 min against 5.5 serially), then the root tier one test at a time (its
# tests time the machine, so they must not share it); --durations keeps CI's cost visible.
if [ "$#" -gt 0 ]; then
  exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
fi
# Both tiers run whatever the first gives; the script fails if either failed.
rc=0
.venv/bin/python -m pytest -p no:cacheprovider -n 2 --durations=15 tests/unit || rc=$?
.venv/bin/python -m pytest -p no:cacheprovider --durations=30 tests/root || rc=$?
exit "$rc"
