#!/usr/bin/env bash
# BM_Acquire1MHotSet (bench/core_bench.cc) of this tree against an older commit, in one
# run (docs/benchmarks.md, "Core library: before and after"): the older commit's
# sluice_core_bench is built in a scratch worktree, then the two binaries run in
# alternation, ROUNDS times each, and the median ns per decision of each side is
# printed per algorithm.
#
# Usage: [ROUNDS=5] bench/hotset_before_after.sh [BEFORE_COMMIT (default bbc139b)]
# Needs: python3.
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:-bbc139b}
rounds=${ROUNDS:-5}
scratch=/tmp/sluice-core-before-$before
if [ ! -d "$scratch" ]; then git worktree add -q "$scratch" "$before"; fi
(cd "$scratch" && { [ -d build/release ] || cmake --preset release >/dev/null; } &&
  cmake --build build/release --target sluice_core_bench >/dev/null)
cmake --build build/release --target sluice_core_bench >/dev/null
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "after: $(git rev-parse --short HEAD); before: $before; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for side in before after; do
    bin=build/release/bench/sluice_core_bench
    [ "$side" = before ] && bin=$scratch/build/release/bench/sluice_core_bench
    "$bin" --benchmark_filter='BM_Acquire1MHotSet' --benchmark_format=csv 2>/dev/null |
      grep '^"BM_' | sed "s/^/$side,/" >>"$out/rows.csv"
  done
done
python3 - "$out/rows.csv" <<'PY'
import csv, statistics, sys
rows = {}
for r in csv.reader(open(sys.argv[1])):
    side, name, cpu = r[0], r[1], float(r[4])  # name,iterations,real_time,cpu_time
    rows.setdefault(name, {}).setdefault(side, []).append(cpu)
names = {"0": "fixed_window", "1": "sliding_window_log", "2": "sliding_window_counter",
         "3": "token_bucket", "4": "gcra"}
print("\n| algorithm | before (ns, median) | after (ns, median) | after / before |")
print("|---|---|---|---|")
for name, sides in rows.items():
    alg = names.get(name.split("algorithm:")[1].split("/")[0], name)
    b, a = statistics.median(sides["before"]), statistics.median(sides["after"])
    print(f"| {alg} | {b:.1f} | {a:.1f} | {a / b:.3f} |")
PY
echo
echo "CPU ns per decision, $rounds runs of each binary in alternation; load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
