#!/usr/bin/env bash
# Provision from nothing, check the lab, then run the main job: the standard ZCube vs ROFT
# comparison (ZCube(4,2) vs a 16-GPU two-segment ROFT, Azure code trace); prints the report path.
#   bash scripts/main.sh [extra zlab run arguments, e.g. --set deployment.mapping=rank-shifted]
set -euo pipefail
# Root is needed (Mininet, OVS, apt). As a sudo user, re-run through sudo; as root (a fresh Debian
# machine has no sudo), just run.
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "$0: run as root (no sudo on this machine)" >&2; exit 1; }
  exec sudo -E bash "$0" "$@"
fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/provision.sh
.venv/bin/zlab doctor
exec .venv/bin/zlab run "$@"
