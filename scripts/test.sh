#!/usr/bin/env bash
# The project's test command (README: `npx -y deno@2 task test`).
# 1. Makes sure the third-party peers of scripts/peers.txt are installed: as root on Debian it
#    installs the missing packages; elsewhere it fails naming them. No suite skips silently.
# 2. Builds the WASM kernels when missing or stale.
# 3. Runs every test and ends with a plain "N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."

missing_pkgs=()
missing_cmds=()
while read -r cmd pkg; do
  [[ -z "$cmd" || "$cmd" == \#* ]] && continue
  # "- <package>": a package without a command of its own, checked with dpkg.
  if [[ "$cmd" == "-" ]] && dpkg -s "$pkg" >/dev/null 2>&1; then continue; fi
  if [[ "$cmd" == "-" ]] || ! command -v "$cmd" >/dev/null 2>&1; then
    missing_cmds+=("${cmd/#-/$pkg}")
    [[ " ${missing_pkgs[*]} " == *" $pkg "* ]] || missing_pkgs+=("$pkg")
  fi
done < scripts/peers.txt

if ((${#missing_pkgs[@]})); then
  if [[ $(id -u) -eq 0 && -f /etc/debian_version ]] && command -v apt-get >/dev/null; then
    echo "installing Debian packages: ${missing_pkgs[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${missing_pkgs[@]}" >/dev/null || {
      echo "error: apt-get install ${missing_pkgs[*]} failed" >&2
      exit 1
    }
  else
    echo "error: missing programs: ${missing_cmds[*]}; install the Debian packages: ${missing_pkgs[*]}" >&2
    exit 1
  fi
fi

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
