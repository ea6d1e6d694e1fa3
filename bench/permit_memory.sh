#!/usr/bin/env bash
# Permit operations on the embedded store against the number held (docs/benchmarks.md,
# "Permits on the embedded store"; issue #20 item 4): this tree and an older commit
# side by side in one run. The older commit is built in a scratch worktree with this
# tree's bench/permit_bench.cc (it uses only the public Store API), so both binaries
# time the same calls; the rows alternate per count so both see the same machine.
#
# Usage: bench/permit_memory.sh [BEFORE_COMMIT (default bbc139b)] [--seconds S]
#          [--held N,N,...]
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:-bbc139b}
[ $# -gt 0 ] && shift
held=0,1000,10000,100000
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --held) held=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
scratch=/tmp/sluice-permit-before-$before
if [ ! -d "$scratch" ]; then git worktree add -q "$scratch" "$before"; fi
cp bench/permit_bench.cc "$scratch/bench/permit_bench.cc"
(cd "$scratch" && { [ -d build/release ] || cmake --preset release >/dev/null; } &&
  cmake --build build/release --target sluice_permit_bench >/dev/null)
cmake --build build/release --target sluice_permit_bench >/dev/null
echo "after: $(git rev-parse --short HEAD); before: $before; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| code | held | acquire | release | release (not held) | extend | acquire trimming one expired |"
echo "|---|---|---|---|---|---|---|"
for n in ${held//,/ }; do
  for side in after before; do
    bin=build/release/bench/sluice_permit_bench
    [ "$side" = before ] && bin=$scratch/build/release/bench/sluice_permit_bench
    "$bin" memory --held "$n" "${args[@]}" | grep '^| [0-9]' | sed "s/^|/| $side |/"
  done
done
echo
echo "median ns per call, one thread, one key, max_in_flight 10^6; load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
