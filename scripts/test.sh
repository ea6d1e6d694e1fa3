#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test with ctest,
# and ends with the time each of the three took.
# Usage: scripts/test.sh [preset]   (release by default; "asan" for the sanitizers)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:-release}
names=() secs=()
timed() {
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  names+=("$name")
  secs+=($((SECONDS - start)))
  return $rc
}
report() {
  local rc=$? total=0
  echo "=== test.sh ($preset): step times"
  for i in "${!names[@]}"; do
    printf '%6ss  %s\n' "${secs[$i]}" "${names[$i]}"
    total=$((total + secs[i]))
  done
  printf '%6ss  total%s\n' "$total" "$( ((rc == 0)) || echo " (FAILED, exit $rc)")"
}
trap report EXIT
timed "install missing packages (scripts/deps.sh)" scripts/deps.sh
timed "build ($preset, -j$(nproc))" scripts/build.sh "$preset"
timed "ctest ($preset, -j$(nproc))" ctest --preset "$preset" -j "$(nproc)" --timeout 600
