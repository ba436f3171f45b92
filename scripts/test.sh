#!/usr/bin/env bash
# Provision from nothing, then run the whole test suite (offline, fake-datapath and root tiers).
#   sudo bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/provision.sh
# The architecture's import contracts (pyproject.toml [tool.importlinter]): a wrong arrow fails here.
.venv/bin/lint-imports --no-cache
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
