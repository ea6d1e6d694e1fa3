#!/usr/bin/env bash
# Instructions the native module's command costs Redis per decision, counted by
# callgrind, for two builds of the module side by side in one run (issue #18): CPU time
# on a shared machine moves by more than a small change saves, an instruction count
# does not. For each module (--module-before, then --module) a redis-server runs under
# `valgrind --tool=callgrind --toggle-collect=call`, so only the execution of commands is
# counted (Redis's call(): the command with everything it calls inside Redis, key
# lookups, writes, expiries, replication's argument objects, and the call's own
# bookkeeping); reading and parsing the request off the socket and writing the reply
# are not. Each algorithm: FLUSHALL, counters zeroed, then --decisions decisions from
# bench/redis_pipe.py's module mode (ONE SLUICE.DECIDE of 16 one-check groups per call,
# over --keys random keys, --callers connections), then the counters are dumped: the
# instructions (Ir) over the decisions. The server of --module also runs the same
# decisions as plain INCR and as envoyproxy/ratelimit's INCRBY + EXPIRE (16 pipelined),
# counted the same way, as the reference. The keys each caller
# draws are seeded, but the callers' interleaving is the scheduler's, so two runs differ
# by a little (the table gives the spread over --rounds).
#
# Usage: bench/module_instructions.sh --module-before PATH [--module PATH]
#          [--decisions N] [--keys K] [--callers C] [--rounds R] [--algorithms a,b,...]
set -euo pipefail
cd "$(dirname "$0")/.."
module=build/release/src/redis/module/sluice_redis_module.so
module_before=""
decisions=32000
keys=10000
callers=8
rounds=2
algorithms=fixed_window,gcra,token_bucket,sliding_window_counter
while [[ $# -gt 0 ]]; do
  case "$1" in
    --algorithms) algorithms=$2; shift 2 ;;
    --callers) callers=$2; shift 2 ;;
    --decisions) decisions=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --module) module=$2; shift 2 ;;
    --module-before) module_before=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "module_instructions.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
(( decisions >= 16 && decisions <= 1000000 )) || { echo "module_instructions.sh: --decisions must be 16..1000000" >&2; exit 2; }
(( callers >= 1 && callers <= 64 )) || { echo "module_instructions.sh: --callers must be 1..64" >&2; exit 2; }
(( rounds >= 1 && rounds <= 10 )) || { echo "module_instructions.sh: --rounds must be 1..10" >&2; exit 2; }
for tool in redis-server redis-cli python3 valgrind callgrind_control; do
  command -v "$tool" >/dev/null || { echo "module_instructions.sh: '$tool' is missing (scripts/deps.sh)" >&2; exit 1; }
done
[[ -n $module_before ]] || { echo "module_instructions.sh: --module-before PATH is required" >&2; exit 2; }
for m in "$module_before" "$module"; do
  [[ -f $m ]] || { echo "module_instructions.sh: no module at '$m'" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/sluice-minstr.XXXXXX)
redis_pid=""
stop_server() {
  if [[ -n "$redis_pid" ]]; then
    kill "$redis_pid" 2>/dev/null || true
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=""
  fi
}
trap 'stop_server; rm -rf "$tmp"' EXIT

results="$tmp/results.txt"
: > "$results"
measure() {  # NAME MODULE: one server under callgrind, every algorithm once
  local name=$1 path
  path=$(realpath "$2")
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  valgrind --tool=callgrind --toggle-collect=call \
    --callgrind-out-file="$tmp/cg.$name.%p" \
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --dir "$tmp" --logfile "$tmp/redis.$name.log" --loadmodule "$path" \
    > "$tmp/valgrind.$name.log" 2>&1 &
  redis_pid=$!
  local rcli=(redis-cli -h 127.0.0.1 -p "$port")
  for _ in $(seq 600); do "${rcli[@]}" ping >/dev/null 2>&1 && break; sleep 0.1; done
  "${rcli[@]}" ping >/dev/null || { echo "module_instructions.sh: redis-server under valgrind did not start" >&2; cat "$tmp/valgrind.$name.log" >&2; exit 1; }
  local loads=""
  for a in ${algorithms//,/ }; do loads+=" module:$a"; done
  [[ $name == after ]] && loads+=" incr envoy"
  for load in $loads; do
    local a=${load#module:} mode=$load
    "${rcli[@]}" flushall >/dev/null
    callgrind_control -z "$redis_pid" >/dev/null 2>&1
    nice -n 5 python3 bench/redis_pipe.py "$mode" "$port" "$decisions" "$keys" "$callers" - \
      || { echo "module_instructions.sh: the load failed ($name, $a)" >&2; exit 1; }
    local before_dump
    before_dump=$(ls "$tmp"/cg."$name".* 2>/dev/null | wc -l)
    callgrind_control -d "$redis_pid" >/dev/null 2>&1
    local dump=""
    for _ in $(seq 600); do
      if (( $(ls "$tmp"/cg."$name".* 2>/dev/null | wc -l) > before_dump )); then
        dump=$(ls -t "$tmp"/cg."$name".* | head -1)
        grep -q '^totals:' "$dump" && break
      fi
      sleep 0.1
    done
    [[ -n $dump ]] || { echo "module_instructions.sh: callgrind wrote no dump ($name, $a)" >&2; exit 1; }
    local ir
    ir=$(awk '/^totals:/ {print $2}' "$dump")
    echo "$a|$name|$ir" >> "$results"
    echo "== round $round: $name $a: $ir instructions" >&2
  done
  stop_server
}

echo "== redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $(valgrind --version)" >&2
for round in $(seq "$rounds"); do
  measure before "$module_before"
  measure after "$module"
done

python3 - "$results" "$decisions" "$keys" "$callers" "$rounds" <<'EOF'
import collections, statistics, sys
path, decisions, keys, callers, rounds = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
runs = collections.OrderedDict()
for line in open(path):
    a, name, ir = line.rstrip("\n").split("|")
    runs.setdefault(a, {}).setdefault(name, []).append(int(ir) / decisions)
incr = runs.pop("incr", {}).get("after", [])
envoy = runs.pop("envoy", {}).get("after", [])
print(f"{decisions} decisions per algorithm, 16 per SLUICE.DECIDE, {callers} callers, {keys} random keys; "
      f"{rounds} round(s): median (min-max)\n")
print("| algorithm | instructions per decision, before | after | after / before | after / envoy's way |")
print("|---|---|---|---|---|")
def cell(v):
    return f"{statistics.median(v):,.0f} ({min(v):,.0f}-{max(v):,.0f})"
for a, r in runs.items():
    b, f = r.get("before", []), r.get("after", [])
    ratio = f"{statistics.median(f) / statistics.median(b):.2f}" if b and f else "-"
    vs = f"{statistics.median(f) / statistics.median(envoy):.2f}x" if f and envoy else "-"
    print(f"| {a} | {cell(b)} | {cell(f)} | {ratio} | {vs} |")
print()
print(f"plain INCR: {cell(incr)}; envoyproxy/ratelimit's INCRBY + EXPIRE: {cell(envoy)} instructions per decision")
EOF
