#!/usr/bin/env bash
# Builds the release preset and runs the core library benchmarks, then prints a
# summary (medians over repetitions, two-thread scaling, memory per key).
#
#   bench/run_core.sh                 # 5 repetitions of every core benchmark
#   REPS=10 bench/run_core.sh         # more repetitions
#   bench/run_core.sh --benchmark_filter=Acquire1M   # extra flags go to the benchmark
#
# The figures in docs/benchmarks.md ("Core library") come from this script.
set -euo pipefail
cd "$(dirname "$0")/.."

reps="${REPS:-5}"
cmake --preset release >/dev/null
cmake --build --preset release -j2 --target sluice_core_bench sluice_memory_per_key
out=build/release/bench

echo "== machine: $(nproc) cores; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "== load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
"$out/sluice_core_bench" --benchmark_repetitions="$reps" --benchmark_report_aggregates_only=true \
  --benchmark_out="$out/core_bench.csv" --benchmark_out_format=csv "$@"
echo "== load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)"

echo
echo "== memory per live key (1M keys, 16-byte caller keys)"
for a in fixed_window sliding_window_log sliding_window_counter token_bucket gcra; do
  "$out/sluice_memory_per_key" "$a" 1000000
done

echo
echo "== summary (medians of $reps repetitions, per decision: wall-clock time, CPU time)"
# Google Benchmark CSV: name,iterations,real_time,cpu_time,time_unit,bytes_per_second,
# items_per_second,label,...
awk -F, '
  /_median"?,/ {
    name = $1; gsub(/"/, "", name); sub(/_median$/, "", name)
    printf "  %-56s %8.1f ns wall %8.1f ns cpu\n", name, $3, $4
    rate[name] = $7
    wall[name] = $3
    cpu[name] = $4
  }
  END {
    # Issue #9 item 5 goals, from this one run (wall-clock ratio; CPU-time ratio).
    hs = "BM_Acquire1MHotSet/algorithm:4/hot_keys:4096"; nh = "BM_Naive1MHotSet/hot_keys:4096"
    r1 = "BM_Acquire1M/algorithm:4"; ml = "BM_RandomLoad64MiB"
    k1 = "BM_HotKey/algorithm:4/real_time/threads:1"; nk1 = "BM_NaiveHotKey/real_time/threads:1"
    if (wall[hs] > 0 && wall[nh] > 0)
      printf "  cache-resident GCRA decision / naive reference (goal <= 0.6): %.2f wall, %.2f cpu\n", wall[hs] / wall[nh], cpu[hs] / cpu[nh]
    if (wall[k1] > 0 && wall[nk1] > 0)
      printf "  one hot key, one thread, sluice / naive reference:           %.2f wall, %.2f cpu\n", wall[k1] / wall[nk1], cpu[k1] / cpu[nk1]
    if (wall[r1] > 0 && wall[ml] > 0)
      printf "  random GCRA key of 1M / one main-memory miss (goal <= 1.5):  %.2f wall, %.2f cpu\n", wall[r1] / wall[ml], cpu[r1] / cpu[ml]
    n1 = rate["BM_NaiveHotKey/real_time/threads:1"]; n2 = rate["BM_NaiveHotKey/real_time/threads:2"]
    if (n1 > 0 && n2 > 0) printf "  naive reference, two threads on one hot key: %.2fx one thread\n", n2 / n1
    d1 = rate["BM_DistinctKeys1M/algorithm:4/real_time/threads:1"]
    d2 = rate["BM_DistinctKeys1M/algorithm:4/real_time/threads:2"]
    h1 = rate["BM_HotKey/algorithm:4/real_time/threads:1"]
    h2 = rate["BM_HotKey/algorithm:4/real_time/threads:2"]
    if (d1 > 0 && d2 > 0) printf "  two threads on distinct keys: %.2fx one thread\n", d2 / d1
    if (h1 > 0 && h2 > 0) printf "  two threads on one hot key:   %.2fx one thread (goal >= 1.5)\n", h2 / h1
  }' "$out/core_bench.csv"
