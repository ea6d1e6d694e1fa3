#!/usr/bin/env bash
# Policy features the native module decides since issue #18's later steps (block_for,
# on_change), on one redis-server that loads it: `sluice bench` with --flags (default
# "--block-for 1m") through the module (the default URL), through the scripts
# (module=off), and, with --before PATH, another build's `sluice` with the default URL
# (e.g. one from before the module decided the feature, which then sent it to the
# scripts). Per row: decisions/s, Redis CPU per decision (INFO cpu, user + system, over
# the row), script calls and module calls per decision (INFO commandstats), p50 / p99.
# Rows alternate within each round (a --before pair in alternating order); every
# round's rows are printed, then the median of each.
#
# Usage: bench/redis_module_features.sh [--flags "..."] [--before PATH] [--rounds R]
#          [--keys K] [--requests N] [--algorithms a,b,...]
set -euo pipefail
cd "$(dirname "$0")/.."
before="" rounds=3 keys=100000 requests=200000 algorithms=fixed_window,gcra flags="--block-for 1m"
while [[ $# -gt 0 ]]; do
  case $1 in
    --flags) flags=$2; shift 2 ;;
    --before) before=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --requests) requests=$2; shift 2 ;;
    --algorithms) algorithms=$2; shift 2 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "redis_module_features.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -z $before || -x $before ]] || { echo "redis_module_features.sh: no sluice at '$before'" >&2; exit 1; }
read -r -a extra <<<"$flags"
cmake --preset release >/dev/null
cmake --build --preset release -j2 --target sluice_cli sluice_redis_module >/dev/null
sluice=build/release/src/cli/sluice
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_init redis-module-features
start_redis --loadmodule "$(realpath build/release/src/redis/module/sluice_redis_module.so)"

cpu() { redis-cli -p "$rport" info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'; }
row() {  # name binary url-query algorithm
  redis-cli -p "$rport" flushall >/dev/null
  redis-cli -p "$rport" config resetstat >/dev/null
  local c0 out c1 stats
  c0=$(cpu)
  out=$("$2" bench --store "redis://127.0.0.1:$rport$3" --algorithm "$4" "${extra[@]}" \
    --keys "$keys" --requests "$requests" -c 64 --quiet --json)
  c1=$(cpu)
  stats=$(redis-cli -p "$rport" info commandstats | tr -d '\r')
  python3 - "$out" "$c0" "$c1" "$stats" >>"$work/$1.$4.rows" <<'EOF'
import json, re, sys
o = json.loads(sys.argv[1])
d = o["decisions"]
calls = lambda c: sum(int(n) for n in re.findall(r"cmdstat_%s:calls=(\d+)" % c, sys.argv[4]))
print("%.0f %.2f %.3f %.3f %.3f %.3f" % (o["decisions_per_s"], 1e6 * (float(sys.argv[3]) - float(sys.argv[2])) / d,
      calls("evalsha") / d, calls(r"sluice\.decide1?") / d, o["latency_us"]["p50"] / 1000, o["latency_us"]["p99"] / 1000))
EOF
}
echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $(nproc) cores," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg); $requests decisions per row, 64 callers," \
  "$keys keys, sluice bench $flags; $(date -u +%FT%TZ)"
names=(module lua)
[[ -z $before ]] || names=(module before lua)
for round in $(seq "$rounds"); do
  for a in ${algorithms//,/ }; do
    if [[ -n $before && $((round % 2)) -eq 0 ]]; then
      row before "$before" "" "$a"
      row module "$sluice" "" "$a"
    else
      row module "$sluice" "" "$a"
      [[ -z $before ]] || row before "$before" "" "$a"
    fi
    row lua "$sluice" "?module=off" "$a"
  done
done
echo
echo '| algorithm | sluice | decisions/s | Redis CPU µs/decision | script calls/decision | module calls/decision | p50 / p99 ms |'
echo '|---|---|---:|---:|---:|---:|---:|'
for a in ${algorithms//,/ }; do
  for n in "${names[@]}"; do
    label=$n
    [[ $n == module ]] && label="this build, module"
    [[ $n == lua ]] && label="this build, module=off"
    [[ $n == before ]] && label="$before, module"
    sort -n -k2 "$work/$n.$a.rows" | awk -v a="$a" -v l="$label" '{ r[NR] = $0 } END {
      split(r[int((NR + 1) / 2)], f, " ")
      printf "| %s | %s | %s | %s | %s | %s | %s / %s |\n", a, l, f[1], f[2], f[3], f[4], f[5], f[6] }'
  done
done
echo
echo "every round (rate cpu_us scripts/dec module/dec p50 p99):"
for a in ${algorithms//,/ }; do
  for n in "${names[@]}"; do echo "  $a $n: $(paste -sd';' "$work/$n.$a.rows")"; done
done
