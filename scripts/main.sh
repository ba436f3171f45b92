#!/usr/bin/env bash
# Provision from nothing, check the lab, then run the main job: the standard ZCube vs ROFT
# comparison (ZCube(4,2) vs a 16-GPU two-segment ROFT, Azure code trace); prints the report path.
#   sudo bash scripts/main.sh [extra zlab run arguments, e.g. --set deployment.mapping=rank-shifted]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/provision.sh
.venv/bin/zlab doctor
exec .venv/bin/zlab run "$@"
