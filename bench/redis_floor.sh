#!/usr/bin/env bash
# Redis CPU per decision, side by side on ONE fresh redis-server in one run (issue #18):
#   - plain INCR, 16 per pipeline: the floor for any write;
#   - envoyproxy/ratelimit's way: INCRBY + EXPIRE per decision, 16 decisions pipelined;
#   - the article's INCR+EXPIRE Lua script, one EVALSHA per decision, 16 pipelined;
#   - sluice, each algorithm: `sluice bench` (RedisStore::EvaluateAsync, coalesced as
#     configured by default) of --sluice with the Lua scripts (module=off), and of
#     --before when given (an older build, also module=off, so that before and after run
#     against the same server in the same run; a build older than the module's URL
#     option refuses it), the sliding log through the group runner's scripts (with a
#     block_for), and the fixed window uncoalesced (--coalesce 1: one script call per
#     decision);
#   - sluice with the native module (src/redis/module, loaded into the same server with
#     --loadmodule; --module PATH, or none to leave it out): each algorithm, and the
#     fixed window uncoalesced; and each O(1) algorithm sent straight to the module at
#     16 decisions per call (below), which no client coalescing varies, the fixed
#     window also at 64 and 256 per call, and at one decision per call (as SLUICE.DECIDE,
#     and as SLUICE.DECIDE1 where the module has it), 16 pipelined as the article's
#     script is;
#   - with --module-before PATH (an older build of the module, e.g. of another commit):
#     the same module rows with it, in the same server (MODULE UNLOAD, then MODULE LOAD
#     of the other one), so that the module's before and after run in one run.
# Each row: FLUSHALL, CONFIG RESETSTAT, then --decisions decisions from --callers
# callers over --keys random keys; Redis CPU per decision is the growth of INFO cpu
# (used_cpu_user + used_cpu_sys of the server) over the row divided by its decisions.
# INFO commandstats gives the calls per decision and the script time per decision.
# Rows are interleaved over --rounds rounds (a --before pair in alternating order: an
# even number of rounds balances it) and the median is reported (a shared
# machine). Load generators run under `nice`.
# With --distribution, each sluice row also records its EVALSHAs with MONITOR (which
# costs Redis CPU: read the CPU column of a run without it) and reports how many
# decisions each script call carried (issue #18 item 2), as shares of all decisions.
#
# Usage: bench/redis_floor.sh [--sluice PATH] [--before PATH] [--module PATH|none]
#          [--module-before PATH] [--decisions N] [--keys K] [--callers C] [--rounds R] [--algorithms a,b,...]
#          [--distribution]
set -euo pipefail
cd "$(dirname "$0")/.."
sluice=build/release/src/cli/sluice
before=""
module_before=""
module=build/release/src/redis/module/sluice_redis_module.so
decisions=300000
keys=100000
callers=64
rounds=1
algorithms=fixed_window,gcra,token_bucket,sliding_window_counter,sliding_window_log
distribution=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --sluice) sluice=$2; shift 2 ;;
    --before) before=$2; shift 2 ;;
    --module) module=$2; shift 2 ;;
    --module-before) module_before=$2; shift 2 ;;
    --decisions) decisions=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --callers) callers=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --algorithms) algorithms=$2; shift 2 ;;
    --distribution) distribution=1; shift ;;
    -h|--help) sed -n 2,33p "$0"; exit 0 ;;
    *) echo "redis_floor.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
(( decisions >= 1 && decisions <= 2000000 )) || { echo "redis_floor.sh: --decisions must be 1..2000000" >&2; exit 2; }
(( callers >= 1 && callers <= 64 )) || { echo "redis_floor.sh: --callers must be 1..64" >&2; exit 2; }
for tool in redis-server redis-cli python3 "$sluice" ${before:+"$before"}; do
  command -v "$tool" >/dev/null || { echo "redis_floor.sh: '$tool' is missing" >&2; exit 1; }
done
[[ $module == none || -f $module ]] || { echo "redis_floor.sh: no module at '$module' (--module none leaves it out)" >&2; exit 1; }
[[ -z $module_before || ($module != none && -f $module_before) ]] || { echo "redis_floor.sh: --module-before needs a module at '$module_before' and --module" >&2; exit 1; }
loadmodule=()
[[ $module != none ]] && loadmodule=(--loadmodule "$(realpath "$module")")
# (MODULE LOAD and UNLOAD swap the two modules: Redis 7 refuses them unless enabled)
[[ -n $module_before ]] && loadmodule+=(--enable-module-command yes)

tmp=$(mktemp -d /tmp/sluice-floor.XXXXXX)
redis_pid=""
cleanup() {
  [[ -n "$redis_pid" ]] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  --dir "$tmp" --logfile "$tmp/redis.log" "${loadmodule[@]}" &
redis_pid=$!
rcli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
for _ in $(seq 100); do rcli ping >/dev/null 2>&1 && break; sleep 0.1; done
rcli ping >/dev/null || { echo "redis_floor.sh: redis-server did not start" >&2; exit 1; }

# The article's script: INCR, and EXPIRE when the INCR created the key.
article_sha=$(rcli script load "local c = redis.call('INCR', KEYS[1])
if c == 1 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end
return c")

# The rows that are not sluice's client run bench/redis_pipe.py (16 decisions per
# pipeline; its module mode sends them as ONE SLUICE.DECIDE of 16 one-check groups, a
# coalesced call's shape: the module's cost at 16 decisions per call, whatever the
# client's coalescing does).

cpu() { rcli info cpu | awk -F: '/^used_cpu_(user|sys):/ {s += $2} END {printf "%.6f", s}'; }
results="$tmp/results.txt"
: > "$results"
# row NAME COMMAND...: runs the command as one row's load and records its figures.
row() {
  local name=$1
  shift
  rcli flushall >/dev/null
  rcli config resetstat >/dev/null
  local c0 c1 monitor=""
  if [[ $distribution == 1 && $name == sluice* ]]; then
    redis-cli -h 127.0.0.1 -p "$port" monitor > "$tmp/monitor.txt" 2>/dev/null &
    monitor=$!
    sleep 0.2
  fi
  c0=$(cpu)
  nice -n 5 "$@" > "$tmp/row.out" 2> "$tmp/row.err" || {
    echo "redis_floor.sh: '$name' failed:" >&2
    cat "$tmp/row.err" "$tmp/row.out" >&2
    exit 1
  }
  c1=$(cpu)
  if [[ -n $monitor ]]; then
    kill "$monitor" 2>/dev/null; wait "$monitor" 2>/dev/null || true
    # decisions per EVALSHA: its KEYS count (two per sliding log check)
    local per=1
    [[ $name == *sliding_window_log* ]] && per=2
    awk -v per="$per" -v name="$name" '$4 == "\"EVALSHA\"" { gsub(/"/, "", $6); print name "|" int($6 / per) }' \
      "$tmp/monitor.txt" >> "$tmp/dist.txt"
  fi
  local stats calls usec errs
  stats=$(rcli info commandstats)
  calls=$(echo "$stats" | awk -F'[:=,]' '/^cmdstat_(evalsha|incr|incrby|expire):/ {s += $3} END {print s + 0}')
  local scalls
  # (the script's calls, or the module command's)
  scalls=$(echo "$stats" | awk -F'[:=,]' '/^cmdstat_(evalsha|sluice.decide1?):/ {s += $3} END {print s + 0}')
  usec=$(echo "$stats" | awk -F'[:=,]' '/^cmdstat_(evalsha|sluice.decide1?):/ {s += $5} END {print s + 0}')
  errs=$(rcli info errorstats | grep errorstat_ | grep -vc "^errorstat_NOSCRIPT:" || true)
  # (NOSCRIPT: a client loading a script it has not sent on this server yet)
  [[ $errs -eq 0 ]] || { echo "redis_floor.sh: '$name' made Redis errors: $(rcli info errorstats)" >&2; exit 1; }
  echo "$name|$c0|$c1|${scalls:-0}|${usec:-0}|$calls" >> "$results"
  echo "== round $round: $name done" >&2
}
# The module layout this build's sluice sends (a module answering another one gets the
# scripts from it instead: src/redis/module/wire.h).
layout=$(sed -n 's/.*kModuleWireVersion = \([0-9]*\);.*/\1/p' src/redis/module/wire.h)
module_rows() {  # SUFFIX: the rows of the module loaded now, named "... SUFFIX"
  local a same=1
  if [[ $(rcli sluice.version) != "$layout" ]]; then
    # (bench/redis_pipe.py sends layout 1, which every module reads: its rows stay)
    echo "== the module loaded now answers layout $(rcli sluice.version), this sluice sends $layout:" \
      "its sluice rows would run the scripts, left out" >&2
    same=""
  fi
  for a in ${algorithms//,/ }; do
    # shellcheck disable=SC2046 # (bench_args prints plain words)
    [[ -n $same ]] && row "sluice $a, module$1" "$sluice" $(bench_args "$a")
    # (redis_pipe.py's own calls give each check one key: not a sliding log's two)
    [[ $a == sliding_window_log ]] && continue
    row "module $a, 16 per call$1" python3 bench/redis_pipe.py "module:$a" "$port" "$decisions" "$keys" "$callers" -
  done
  # The fixed window at 64 and 256 decisions per call: what a decision costs Redis once
  # the call's own cost is spread thin (issue #18's 0.35x of envoy's way).
  if [[ ,$algorithms, == *,fixed_window,* ]]; then
    for n in 64 256; do
      row "module fixed_window, $n per call$1" python3 bench/redis_pipe.py "module:fixed_window:$n" \
        "$port" "$decisions" "$keys" "$callers" -
    done
  fi
  # shellcheck disable=SC2046
  [[ -z $same ]] || row "sluice fixed_window, module, uncoalesced$1" "$sluice" $(bench_args fixed_window) --coalesce 1
  # One-check calls pipelined 16 at a time, as the article's script row is: as
  # SLUICE.DECIDE (every module), and as SLUICE.DECIDE1 (layout 4 on).
  row "module fixed_window, one SLUICE.DECIDE per decision, pipeline 16$1" python3 bench/redis_pipe.py \
    full:fixed_window "$port" "$decisions" "$keys" "$callers" -
  if (( $(rcli sluice.version) >= 4 )); then
    row "module fixed_window, one SLUICE.DECIDE1 per decision, pipeline 16$1" python3 bench/redis_pipe.py \
      single:fixed_window "$port" "$decisions" "$keys" "$callers" -
  fi
}
swap_module() {  # PATH: the loaded sluice module becomes the one at PATH
  rcli module unload sluice | grep -qx OK || { echo "redis_floor.sh: MODULE UNLOAD sluice failed" >&2; exit 1; }
  rcli module load "$(realpath "$1")" | grep -qx OK || { echo "redis_floor.sh: MODULE LOAD $1 failed" >&2; exit 1; }
}
# pair NAME ARGS...: the row of --sluice with ARGS and, with --before, the row of
# --before: the older build first in odd rounds, second in even ones (the second row of
# two on one server measured a few percent more in the same round, whichever build it
# was: alternating keeps that out of the comparison).
pair() {
  local name=$1
  shift
  if [[ -z "$before" ]]; then
    row "$name" "$sluice" "$@"
  elif (( round % 2 == 1 )); then
    row "$name (before)" "$before" "$@"
    row "$name" "$sluice" "$@"
  else
    row "$name" "$sluice" "$@"
    row "$name (before)" "$before" "$@"
  fi
}
bench_args() {  # ALGORITHM [URL QUERY]: the flags of one sluice row
  echo bench --store "redis://127.0.0.1:$port${2:-}" --algorithm "$1" --requests "$decisions" \
    -c "$callers" --keys "$keys" --quiet --json
}

echo "== redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for round in $(seq "$rounds"); do
  row "plain INCR, pipeline 16 (floor)" python3 bench/redis_pipe.py incr "$port" "$decisions" "$keys" "$callers" -
  row "envoyproxy/ratelimit: INCRBY + EXPIRE, pipelined" python3 bench/redis_pipe.py envoy "$port" "$decisions" "$keys" "$callers" -
  row "article: INCR+EXPIRE script, pipeline 16" python3 bench/redis_pipe.py script "$port" "$decisions" "$keys" "$callers" "$article_sha"
  for a in ${algorithms//,/ }; do
    # shellcheck disable=SC2046 # (bench_args prints plain words)
    pair "sluice $a" $(bench_args "$a" "?module=off")
  done
  if [[ ,$algorithms, == *,sliding_window_log,* ]]; then
    # The group runner's scripts, which decide batches with other algorithms, blocks,
    # penalties and reservations: a block_for sends every call there (and with this many
    # keys never blocks one).
    # shellcheck disable=SC2046
    pair "sluice sliding_window_log, group runner (block_for)" \
      $(bench_args sliding_window_log "?module=off") --block-for 1m
  fi
  if [[ -n $module_before ]]; then
    swap_module "$module_before"
    module_rows " (before)"
    swap_module "$module"
  fi
  [[ $module != none ]] && module_rows ""
  # A single uncoalesced decision (one script call each), beside the article's script.
  # shellcheck disable=SC2046
  pair "sluice fixed_window, uncoalesced" $(bench_args fixed_window "?module=off") --coalesce 1
done

if [[ $distribution == 1 ]]; then
  python3 - "$tmp/dist.txt" <<'EOF'
import collections, sys
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    name, n = line.rstrip("\n").rsplit("|", 1)
    rows.setdefault(name, collections.Counter())[int(n)] += 1
edges = [(1, 1), (2, 7), (8, 15), (16, 31), (32, 10**9)]
print("Decisions per script call (share of all decisions; MONITOR):\n")
print("| row | calls | mean | " + " | ".join(f"{a}" if a == b else (f"{a}-{b}" if b < 10**9 else f"{a}+") for a, b in edges) + " |")
print("|---|---|---|" + "---|" * len(edges))
for name, c in rows.items():
    total = sum(n * k for n, k in c.items())
    calls = sum(c.values())
    shares = [sum(n * k for n, k in c.items() if a <= n <= b) / total for a, b in edges]
    print(f"| {name} | {calls} | {total / calls:.1f} | " + " | ".join(f"{x:.0%}" for x in shares) + " |")
print()
EOF
fi
python3 - "$results" "$decisions" "$keys" "$callers" "$rounds" <<'EOF'
import statistics, sys
path, decisions, keys, callers, rounds = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
rows = {}
for line in open(path):
    name, c0, c1, scalls, usec, calls = line.rstrip("\n").split("|")
    rows.setdefault(name, []).append((float(c1) - float(c0), int(scalls), int(usec), int(calls)))
print(f"{decisions} decisions per row, {callers} callers, {keys} random keys; median of {rounds} round(s)\n")
print("| what runs on Redis | Redis CPU us/decision | x envoy's way | decisions per call | script (module) us/decision |")
print("|---|---|---|---|---|")
per = {n: statistics.median(r[0] * 1e6 / decisions for r in runs) for n, runs in rows.items()}
envoy = next((v for n, v in per.items() if n.startswith("envoyproxy")), None)
for name, runs in rows.items():
    sc = statistics.median(r[1] for r in runs)
    us = statistics.median(r[2] for r in runs)
    dpc = f"{decisions / sc:.1f}" if sc else "-"
    spd = f"{us / decisions:.2f}" if sc else "-"
    ratio = f"{per[name] / envoy:.2f}x" if envoy else "-"
    print(f"| {name} | {per[name]:.2f} | {ratio} | {dpc} | {spd} |")
EOF
