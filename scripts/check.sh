#!/usr/bin/env bash
# The fast loop: lint, format check, the import contracts and the unit tier without its slow tests.
# No root, no network, installs nothing (run scripts/provision.sh once first); about 45 s on 2 cores.
#   bash scripts/check.sh [pytest args]      (or: make check)
# Every step runs even when an earlier one fails, so one run shows everything to fix; the exit
# status is 1 when any step failed. CI runs the whole suite instead (scripts/test.sh).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=.venv/bin
for tool in ruff lint-imports python; do
  [ -x "$BIN/$tool" ] || { echo "check.sh: $BIN/$tool missing: run bash scripts/provision.sh first" >&2; exit 2; }
done
"$BIN/python" -c 'import xdist' 2>/dev/null \
  || { echo "check.sh: pytest-xdist missing from .venv: run bash scripts/provision.sh (pyproject.toml changed)" >&2; exit 2; }

FAILED=()
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f s", b - a }'; }
T0=$EPOCHREALTIME
step() {  # step NAME COMMAND...: run it, time it, remember a failure
  local name=$1; shift
  local t0=$EPOCHREALTIME
  printf '[check] %s\n' "$name"
  "$@" || FAILED+=("$name")
  printf '[check] %s: %s\n' "$name" "$(since "$t0")"
}
step "ruff check" "$BIN/ruff" check .
step "ruff format --check" "$BIN/ruff" format --check .
step "lint-imports" "$BIN/lint-imports" --no-cache
# -n 2: the unit tier on both cores (pytest-xdist); slow tests (> 10 s each) only in the full suite
step "unit tier, not slow" "$BIN/python" -m pytest -q -p no:cacheprovider -m "not slow" -n 2 tests/unit "$@"
printf '[check] total %s\n' "$(since "$T0")"
if [ ${#FAILED[@]} -gt 0 ]; then
  printf '[check] FAILED: %s\n' "$(IFS=,; echo "${FAILED[*]}")" >&2
  exit 1
fi
echo "[check] all passed"
