#!/usr/bin/env bash
# The project's test command (README: `npx -y deno@2 task test`).
# 1. Makes sure the third-party peers of scripts/peers.txt are installed (scripts/peers.sh: as
#    root on Debian it installs the missing packages; elsewhere it fails naming them). No suite
#    skips silently.
# 2. Builds the WASM kernels when missing or stale.
# 3. Runs every test and ends with a plain "N passed, N failed" line.
#
# With no arguments the tests run as two `deno test` processes side by side, as most of the
# suite waits on media played in real time rather than computing:
#   - most files of tests/ (hostTests below), on this host, their output shown as it comes;
#   - then, one after the other: every other test but tests/e2e/ (the units and interop suites
#     beside their modules, the first files of tests/) in a network namespace of their own
#     (netnsSetup), so no port of theirs (fixed ones included) can meet one of the host's; then
#     the browser suites of tests/e2e/, which put their servers, peers and Chromium in namespaces
#     of their own (tests/e2e/netns.ts). Their output follows that of the host's.
# Every test writes in temp dirs of its own; the WASM kernels are replaced by rename
# (wasm/build.ts), so a reader never sees half of one. The last line counts all the groups.
# With arguments (files, flags), or where that namespace cannot be made (not root, no veth), it is
# one `deno test -A "$@"`, as before.
set -uo pipefail
cd "$(dirname "$0")/.."

bash scripts/peers.sh scripts/peers.txt || exit 1

deno run -A wasm/build.ts --if-stale || exit 1

tmp=$(mktemp -d)
# Clips made by tests/helpers/media_fixtures.ts makeClip are encoded once per run, then copied.
export MEDIASERVER_TEST_CLIP_CACHE="$tmp/clips"
# Set while the background group runs (cleared once waited for: the pid may be reused).
bgPid=""
bgShown=1
# An interrupted run still ends the background group, with all it started, and shows its output.
cleanup() {
  if [[ -n "$bgPid" ]]; then
    kill -- -"$bgPid" 2>/dev/null
    wait "$bgPid" 2>/dev/null
  fi
  if [[ "$bgShown" == 0 ]]; then cat "$tmp/units.log" "$tmp/e2e.log" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# "passed failed" of the last `ok | N passed ... | N failed` line of a deno test log, or nothing.
counts() {
  sed 's/\x1b\[[0-9;]*m//g' "$1" 2>/dev/null | grep -E '^(ok|FAILED) \| [0-9]+ passed' |
    tail -n 1 | sed -E 's/.*\| ([0-9]+) passed.*\| ([0-9]+) failed.*/\1 \2/'
}

# Sets up a new network namespace: loopback, and a veth pair with an address of its own that
# reaches nothing outside. ICE (werift's peers in media/protocols/webrtc) gathers host candidates
# on interfaces other than loopback only: the pair stands in for the host's interface.
netnsSetup='ip link set lo up && ip link add v0 type veth peer name v1 &&
  ip addr add 10.200.0.1/24 dev v0 && ip link set v0 up && ip link set v1 up'

# The files of tests/ run on the host; those named a-f run in the background group instead, to
# even out the two sides (of the 2026-11-25 run's 843 s in tests/ and 589 s elsewhere, 79 s move).
hostTests=()
for file in tests/*_test.ts; do
  [[ "$file" == tests/[a-f]* ]] || hostTests+=("$file")
done
# The background's `deno test` finds every test file but those and tests/e2e/.
unitsIgnore="tests/e2e/$(printf ',%s' "${hostTests[@]}")"

# The background group: every test but tests/e2e/ and hostTests, in a network namespace of their
# own (above), then tests/e2e/. Each writes its log and exit status under $tmp.
background() {
  # Packages are fetched and types checked here: the namespace has no route to any registry.
  deno test -A --no-run --ignore="$unitsIgnore" >"$tmp/units.log" 2>&1 &&
    unshare -n -- sh -c "$netnsSetup"' && exec "$0" test -A --ignore="$1"' \
      "$(command -v deno)" "$unitsIgnore" >>"$tmp/units.log" 2>&1
  echo $? >"$tmp/units.status"
  deno test -A tests/e2e/ >"$tmp/e2e.log" 2>&1
  echo $? >"$tmp/e2e.status"
}

if [[ $# -eq 0 ]] && unshare -n -- sh -c "$netnsSetup" 2>/dev/null; then
  echo "The tests outside tests/ and tests/[a-f]*, then tests/e2e/, run beside the rest of tests/;" \
    "their output follows."
  export -f background
  export tmp netnsSetup unitsIgnore
  # A process group of its own, so an interrupted run can end it with everything it started.
  setsid bash -c background &
  bgPid=$!
  bgShown=0
  deno test -A "${hostTests[@]}" 2>&1 | tee "$tmp/tests.log"
  status=${PIPESTATUS[0]}
  wait "$bgPid"
  bgPid=""
  for group in units e2e; do
    echo
    echo "----- $([[ $group == units ]] && echo "the tests outside tests/ and tests/[a-f]*" ||
      echo tests/e2e/) (ran beside the rest of tests/) -----"
    cat "$tmp/$group.log"
  done
  bgShown=1
  passed=0
  failed=0
  for group in tests units e2e; do
    read -r groupPassed groupFailed <<<"$(counts "$tmp/$group.log")"
    if [[ -z "$groupPassed" ]]; then
      echo "error: no test summary found for the group '$group'" >&2
      exit 1
    fi
    passed=$((passed + groupPassed))
    failed=$((failed + groupFailed))
    groupStatus=$(cat "$tmp/$group.status" 2>/dev/null || echo "$status")
    if [[ "$status" == 0 ]]; then status=$groupStatus; fi
  done
else
  deno test -A "$@" 2>&1 | tee "$tmp/tests.log"
  status=${PIPESTATUS[0]}
  read -r passed failed <<<"$(counts "$tmp/tests.log")"
  if [[ -z "$passed" ]]; then
    echo "error: no test summary found" >&2
    exit 1
  fi
fi
echo "${passed} passed, ${failed} failed"
exit "$status"
