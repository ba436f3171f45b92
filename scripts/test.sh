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
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
