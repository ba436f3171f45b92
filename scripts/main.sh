#!/usr/bin/env bash
# Provision from nothing, check the lab, then run the main job.
#   sudo bash scripts/main.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/provision.sh
.venv/bin/zlab doctor
exec .venv/bin/zlab up zcube:n=4,gpus_per_server=4 --no-cli --duration 10 --wiring-check
