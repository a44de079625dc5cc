#!/usr/bin/env bash
# Makes sure the third-party programs of the given lists (scripts/peers.txt for the tests,
# scripts/bench_peers.txt for the benchmarks) are installed: as root on Debian it installs
# the missing packages; elsewhere it exits 1 naming them, before anything starts.
# List lines are "<command> <Debian package>"; "- <package>" is a package without a command
# of its own, checked with dpkg.
set -uo pipefail

missing_pkgs=()
missing_cmds=()
for list in "$@"; do
  while read -r cmd pkg; do
    [[ -z "$cmd" || "$cmd" == \#* ]] && continue
    if [[ "$cmd" == "-" ]] && dpkg -s "$pkg" >/dev/null 2>&1; then continue; fi
    if [[ "$cmd" == "-" ]] || ! command -v "$cmd" >/dev/null 2>&1; then
      missing_cmds+=("${cmd/#-/$pkg}")
      [[ " ${missing_pkgs[*]} " == *" $pkg "* ]] || missing_pkgs+=("$pkg")
    fi
  done <"$list"
done

((${#missing_pkgs[@]})) || exit 0
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
