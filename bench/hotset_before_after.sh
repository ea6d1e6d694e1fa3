#!/usr/bin/env bash
# BM_Acquire1MHotSet (bench/core_bench.cc) of this tree against one or more older
# commits, in one run (docs/benchmarks.md, "Core library: before and after"): each
# older commit's sluice_core_bench is built in a scratch worktree, then all binaries run
# in alternation, ROUNDS times each, and the median ns per decision of each is printed
# per algorithm, with its ratio to the first commit named.
#
# Usage: [ROUNDS=5] [FILTER=BM_Acquire1M/] bench/hotset_before_after.sh [--instructions]
#   [COMMIT ...]   (default bbc139b; FILTER, timing only, picks other benchmarks of
#   core_bench, e.g. BM_Acquire1M/ for random keys of the 1M)
# --instructions: instead of timing, counts the instructions of one decision under
#   callgrind, which no load on the machine changes: collection is on inside
#   BM_Acquire1MHotSet and off inside its setup (Populated), and the instructions of
#   the benchmark loop's calls to Limiter::Acquire are divided by their number.
# Needs: python3 (and valgrind for --instructions).
set -euo pipefail
cd "$(dirname "$0")/.."
instructions=false
if [ "${1:-}" = --instructions ]; then
  instructions=true
  shift
fi
[ $# -gt 0 ] || set -- bbc139b
rounds=${ROUNDS:-5}
sides=() bins=()
for rev in "$@"; do
  scratch=/tmp/sluice-core-before-$rev
  if [ ! -d "$scratch" ]; then git worktree add -q "$scratch" "$rev"; fi
  (cd "$scratch" && { [ -d build/release ] || cmake --preset release >/dev/null; } &&
    cmake --build build/release --target sluice_core_bench >/dev/null)
  sides+=("$rev") bins+=("$scratch/build/release/bench/sluice_core_bench")
done
cmake --build build/release --target sluice_core_bench >/dev/null
sides+=("after") bins+=("build/release/bench/sluice_core_bench")
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if $instructions; then
  names=(fixed_window sliding_window_log sliding_window_counter token_bucket gcra)
  echo "after: $(git rev-parse --short HEAD); before: $*; instructions per decision (callgrind)"
  printf '\n| algorithm |'
  for s in "${sides[@]}"; do printf ' %s |' "$s"; done
  for s in "${sides[@]:1}"; do printf ' %s / %s |' "$s" "${sides[0]}"; done
  printf '\n|---'
  for _ in "${sides[@]}" "${sides[@]:1}"; do printf '|---'; done
  printf '|\n'
  for a in 0 1 2 3 4; do
    per=()
    for i in "${!sides[@]}"; do
      valgrind --tool=callgrind --collect-atstart=no '--toggle-collect=*BM_Acquire1MHotSet*' \
        '--toggle-collect=*Populated*' --callgrind-out-file="$out/cg.$i.$a" "${bins[$i]}" \
        "--benchmark_filter=BM_Acquire1MHotSet/algorithm:$a/" --benchmark_min_time=0.2 \
        >/dev/null 2>&1 &
    done
    wait
    for i in "${!sides[@]}"; do
      # "<inclusive Ir> (..%)  < ...BM_Acquire1MHotSet(benchmark::State&) (<calls>x)"
      per+=("$(callgrind_annotate --inclusive=yes --tree=caller "$out/cg.$i.$a" |
        awk '/< .*BM_Acquire1MHotSet.*x\)/ && !found { print; found = 1 }' |
        sed -E 's/^ *([0-9,]+) .*\(([0-9,]+)x\).*/\1 \2/; s/,//g' |
        awk '{printf "%.0f", $1 / $2}')")
    done
    printf '| %s |' "${names[$a]}"
    for v in "${per[@]}"; do printf ' %s |' "$v"; done
    for v in "${per[@]:1}"; do awk -v a="$v" -v b="${per[0]}" 'BEGIN{printf " %.3f |", a / b}'; done
    printf '\n'
  done
  exit 0
fi
echo "after: $(git rev-parse --short HEAD); before: $*; $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$rounds"); do
  for i in "${!sides[@]}"; do
    "${bins[$i]}" --benchmark_filter="${FILTER:-BM_Acquire1MHotSet}" --benchmark_format=csv 2>/dev/null |
      grep '^"BM_' | sed "s/^/${sides[$i]},/" >>"$out/rows.csv"
  done
done
python3 - "$out/rows.csv" "${sides[@]}" <<'PY'
import csv, statistics, sys
order = sys.argv[2:]
rows = {}
for r in csv.reader(open(sys.argv[1])):
    side, name, cpu = r[0], r[1], float(r[4])  # name,iterations,real_time,cpu_time
    rows.setdefault(name, {}).setdefault(side, []).append(cpu)
names = {"0": "fixed_window", "1": "sliding_window_log", "2": "sliding_window_counter",
         "3": "token_bucket", "4": "gcra"}
print("\n| algorithm | " + " | ".join(f"{s} (ns, median)" for s in order) + " | " +
      " | ".join(f"{s} / {order[0]}" for s in order[1:]) + " |")
print("|---" * (2 * len(order)) + "|")
for name, sides in rows.items():
    alg = names.get(name.split("algorithm:")[1].split("/")[0], name)
    med = [statistics.median(sides[s]) for s in order]
    print(f"| {alg} | " + " | ".join(f"{m:.1f}" for m in med) + " | " +
          " | ".join(f"{m / med[0]:.3f}" for m in med[1:]) + " |")
PY
echo
echo "CPU ns per decision, $rounds runs of each binary in alternation; load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
