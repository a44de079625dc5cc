#!/usr/bin/env bash
# The project's test command (README: `npx -y deno@2 task test`).
# 1. Makes sure the third-party peers of scripts/peers.txt are installed (scripts/peers.sh: as
#    root on Debian it installs the missing packages; elsewhere it fails naming them). No suite
#    skips silently.
# 2. Builds the WASM kernels when missing or stale.
# 3. Runs every test and ends with a plain "N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."

bash scripts/peers.sh scripts/peers.txt || exit 1

deno run -A wasm/build.ts --if-stale || exit 1

log=$(mktemp)
trap 'rm -f "$log"' EXIT
deno test -A "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

summary=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '^(ok|FAILED) \| [0-9]+ passed' | tail -n 1)
passed=$(sed -E 's/.*\| ([0-9]+) passed.*/\1/' <<<"$summary")
failed=$(sed -E 's/.*\| ([0-9]+) failed.*/\1/' <<<"$summary")
if [[ -z "$summary" ]]; then
  echo "error: no test summary found" >&2
  exit 1
fi
echo "${passed} passed, ${failed} failed"
exit "$status"
