#!/usr/bin/env bash
# The Redis store benchmark, side by side in one run on one redis-server (docs/benchmarks.md):
#  (a) the ceiling: redis-benchmark running the SAME EVALSHA a one-check decision sends
#      (captured with MONITOR from `sluice check`), 64 clients, pipeline 16; plain INCR
#      (and an empty script) at pipeline 16 for scale;
#  (b) `sluice bench`: 64 concurrent callers in one process (RedisStore::EvaluateAsync),
#      on the Lua scripts (module=off in its URL) with coalesced calls (the default,
#      --coalesce 32) and without (--coalesce 1: one script call per decision, as before
#      coalescing existed), and on the native module (src/redis/module, loaded into the
#      same server; --module none leaves it out), coalesced;
#  (c) rate-limiter-flexible@11 + ioredis@5 (RateLimiterRedis, the same limit, 64 concurrent
#      callers, the same duration), installed from npm into a temporary folder;
#  (d) Redis calls saved by the local deny cache: one key flooded at 100x its limit
#      through sluice::Limiter, deny cache on vs off;
#  (e) latency at one fixed offered load: 64 threads through sluice::Limiter, paced to
#      --paced-rate decisions/s in all, coalescing on vs off (p50/p99 at the same load).
#
# Usage: bench/redis_bench.sh [--seconds S] [--algorithms "fixed_window token_bucket ..."]
#                             [--keys K] [--paced-rate R] [--rounds N] [--out FILE.md]
#                             [--sluice PATH] [--module PATH|none]
# --rounds N repeats (b), (c) and (e) N times, interleaved (a shared machine's load
# changes during a run); the report shows each case's median round.
# Needs: redis-server, redis-benchmark, redis-cli, python3; node + npm for (c) (skipped
# with a note when missing). Builds build/release/src/cli/sluice (incrementally) unless --sluice is given.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

seconds=3
algorithms="fixed_window token_bucket gcra sliding_window_counter sliding_window_log"
keys=100000
paced_rate=20000    # (e): decisions/s offered in all
rounds=1
out=""
sluice="$root/build/release/src/cli/sluice"
module="$root/build/release/src/redis/module/sluice_redis_module.so"
rate="1000/s"       # per key: with 10000 keys nearly every decision is allowed
flood_rate=100      # (d): limit per second of the flooded key ...
flood_factor=100    # ... and the flood, as a multiple of it
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --algorithms) algorithms=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --paced-rate) paced_rate=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --sluice) sluice=$2; shift 2 ;;
    --module) module=$2; shift 2 ;;
    -h|--help) sed -n 2,27p "$0"; exit 0 ;;
    *) echo "redis_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

for tool in redis-server redis-benchmark redis-cli python3 /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "redis_bench.sh: '$tool' is missing (scripts/deps.sh installs it)" >&2; exit 1; }
done
if [[ "$sluice" == "$root/build/release/src/cli/sluice" ]]; then
  # The default binary is brought up to date with the sources (a no-op when it is).
  echo "== building $sluice (release preset, incremental)" >&2
  [[ -f build/release/CMakeCache.txt ]] || cmake --preset release >/dev/null
  cmake --build --preset release -j2 --target sluice_cli >&2
fi
[[ -x "$sluice" ]] || { echo "redis_bench.sh: no sluice binary at $sluice" >&2; exit 1; }
if [[ "$module" == "$root/build/release/src/redis/module/sluice_redis_module.so" ]]; then
  cmake --build --preset release -j2 --target sluice_redis_module >&2
fi
[[ $module == none || -f $module ]] || { echo "redis_bench.sh: no module at '$module' (--module none leaves it out)" >&2; exit 1; }
loadmodule=()
[[ $module != none ]] && loadmodule=(--loadmodule "$(realpath "$module")")

tmp=$(mktemp -d /tmp/sluice-redis-bench.XXXXXX)
redis_pid=""
cleanup() {
  [[ -n "$redis_pid" ]] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# A free loopback port, and a redis-server of our own on it (no persistence).
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  --dir "$tmp" --logfile "$tmp/redis.log" "${loadmodule[@]}" &
redis_pid=$!
url="redis://127.0.0.1:$port"
# Every case but the module's runs the Lua scripts, with the module loaded or not.
lua_url="$url?module=off"
rcli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
for _ in $(seq 100); do rcli ping >/dev/null 2>&1 && break; sleep 0.1; done
rcli ping >/dev/null || { echo "redis_bench.sh: redis-server did not start" >&2; exit 1; }

results="$tmp/results.jsonl"
: > "$results"
note() { echo "== $*" >&2; }

# Each measurement also records the Redis side (from INFO commandstats: Redis's own
# microseconds per call of the command, and the server's CPU time) and the client's CPU
# time: throughput on a shared 2-core machine depends on what else runs, these less.
clk=$(getconf CLK_TCK)
redis_ticks() { awk '{print $14+$15}' "/proc/$redis_pid/stat"; }
begin() { rcli config resetstat >/dev/null; ticks0=$(redis_ticks); rm -f "$tmp/time.txt"; }
timed() { /usr/bin/time -o "$tmp/time.txt" -f "%U %S" "$@"; }
record() {  # record CASE JSON REDIS_COMMAND
  python3 - "$1" "$2" "$3" "$(rcli info commandstats)" "$ticks0" "$(redis_ticks)" "$clk" \
    "$tmp/time.txt" >> "$results" <<'EOF'
import json, os, re, sys
case, js, cmd, stats, t0, t1, clk, timefile = sys.argv[1:9]
r = json.loads(js)
r["case"] = case
# (every command the pattern matches: the module's SLUICE.DECIDE and SLUICE.DECIDE1)
m = re.findall(r"cmdstat_%s:calls=(\d+),usec=(\d+)," % cmd, stats)
if m:
    r["redis_calls"] = sum(int(c) for c, _ in m)
    r["redis_usec_per_call"] = sum(int(u) for _, u in m) / max(1, r["redis_calls"])
r["redis_cpu_s"] = (int(t1) - int(t0)) / int(clk)
if os.path.exists(timefile):
    u, s = open(timefile).read().split()[-2:]
    r["client_cpu_s"] = float(u) + float(s)
print(json.dumps(r))
EOF
}

# redis-benchmark for $seconds (stopped with SIGINT; its progress line carries the overall
# requests/s and mean latency so far).
rb() {  # rb CASE REDIS_COMMAND ARGS...
  local name=$1 cmd=$2; shift 2
  begin
  timed timeout -s INT "$seconds" redis-benchmark -h 127.0.0.1 -p "$port" -c 64 -P 16 \
    -n 1000000000 -r "$keys" -q "$@" > "$tmp/rb.txt" 2>&1 || true
  local json
  json=$(python3 - "$tmp/rb.txt" <<'EOF'
import json, re, sys
text = open(sys.argv[1]).read().replace("\r", "\n")
m = re.findall(r"overall: ([0-9.]+)\) avg_msec=[0-9.]+ \(overall: ([0-9.]+)\)", text)
if not m:
    sys.exit("redis-benchmark printed no progress: " + text[-500:])
print(json.dumps({"decisions_per_s": float(m[-1][0]), "latency_us": {"mean": float(m[-1][1]) * 1000}}))
EOF
)
  record "$name" "$json" "$cmd"
}

# The exact EVALSHA that one `sluice check` sends for ALG, read back with MONITOR.
capture_evalsha() {  # capture_evalsha ALG -> prints the arguments, one per line
  local alg=$1
  # (redis-cli itself in the background, not a shell function, so that kill stops it: a
  # MONITOR left running would slow every later measurement)
  redis-cli -h 127.0.0.1 -p "$port" monitor > "$tmp/monitor.txt" &
  local mon=$!
  sleep 0.3
  "$sluice" check --redis "$lua_url" --key bench:000000000001 -a "$alg" --rate "$rate" \
    --policy-name bench >/dev/null || true
  sleep 0.3
  kill "$mon"; wait "$mon" 2>/dev/null || true
  python3 - "$tmp/monitor.txt" <<'EOF'
import re, sys
for line in open(sys.argv[1]):
    # (not Create's permission probe: EVALSHA of forty zeros with no keys)
    if '"EVALSHA"' in line and '"' + "0" * 40 + '"' not in line:
        args = re.findall(r'"((?:[^"\\]|\\.)*)"', line.split("]", 1)[1])
        for a in args[1:]:  # drop the command name
            print(a.replace("bench%3A000000000001", "bench%3A__rand_int__"))
        break
else:
    sys.exit("no EVALSHA seen in MONITOR output")
EOF
}

note "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on $url; $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load average $(cut -d' ' -f1-3 /proc/loadavg)"

# Scale: plain INCR and an empty script at pipeline 16.
note "(a) INCR, pipeline 16"
rb incr incr INCR 'bench:__rand_int__'
empty_sha=$(rcli script load "return 1")
note "(a) EVALSHA of 'return 1', pipeline 16"
rb empty_script evalsha EVALSHA "$empty_sha" 1 'sluice:{bench:__rand_int__}:bench'

for alg in $algorithms; do
  mapfile -t args < <(capture_evalsha "$alg")
  note "(a) redis-benchmark: ${args[*]}"
  rb "ceiling:$alg" evalsha EVALSHA "${args[@]}"
  rcli flushall >/dev/null
done

# (c) needs rate-limiter-flexible: its RateLimiterRedis counts per fixed window (SET NX +
# INCRBY + PTTL in one Lua script), the same limit: 1000 points per 1 s.
rlf_ok=""
if command -v node >/dev/null && command -v npm >/dev/null; then
  note "(c) npm install rate-limiter-flexible@11 ioredis@5 into $tmp/npm"
  if npm install --silent --no-audit --no-fund --prefix "$tmp/npm" rate-limiter-flexible@11 ioredis@5 >&2; then
    rlf_ok=1
  else
    note "(c) skipped: npm install failed"
  fi
else
  note "(c) skipped: node/npm not installed"
fi

for round in $(seq "$rounds"); do
  for alg in $algorithms; do
    for co in 32 1; do
      note "(b) round $round: sluice bench -a $alg --coalesce $co"
      begin
      json=$(timed "$sluice" bench --redis "$lua_url" -a "$alg" --rate "$rate" -c 64 -d "${seconds}s" \
        --keys "$keys" --timeout 1s --coalesce "$co" --json -q)
      record "sluice$([[ $co == 1 ]] && echo -nc):$alg" "$json" evalsha
      rcli flushall >/dev/null
    done
    if [[ $module != none ]]; then
      note "(b) round $round: sluice bench -a $alg on the native module"
      begin
      json=$(timed "$sluice" bench --redis "$url" -a "$alg" --rate "$rate" -c 64 -d "${seconds}s" \
        --keys "$keys" --timeout 1s --json -q)
      record "sluice-module:$alg" "$json" "sluice\\.decide1?"
      rcli flushall >/dev/null
    fi
  done
  if [[ -n "$rlf_ok" ]]; then
    for ap in "" --auto-pipelining; do
      note "(c) round $round: rate-limiter-flexible ${ap:-(ioredis defaults)}"
      begin
      json=$(NODE_PATH="$tmp/npm/node_modules" timed node bench/redis_rlf.js --port "$port" \
        --points 1000 --duration-s 1 --concurrency 64 --seconds "$seconds" --keys "$keys" $ap)
      record "rlf${ap:+:autopipelining}" "$json" evalsha
      rcli flushall >/dev/null
    done
  fi
  # (e) The same offered load with and without coalescing: latency, not throughput.
  for co in 32 1; do
    note "(e) round $round: paced fixed_window, $paced_rate/s offered by 64 threads, --coalesce $co"
    begin
    json=$("$sluice" bench --redis "$lua_url" --api limiter -a fixed_window --rate "$rate" \
      --keys "$keys" -c 64 --target-rate "$paced_rate" -d "${seconds}s" --timeout 1s \
      --coalesce "$co" --no-deny-cache --json -q)
    record "paced:$co" "$json" evalsha
    rcli flushall >/dev/null
  done
done

# (d) One key at 100x its limit through sluice::Limiter (8 threads, paced), deny cache
# off vs on: Redis calls = EVALSHA sent (RedisStoreStats.calls).
for alg in fixed_window token_bucket; do
  for cache in off on; do
    note "(d) flood, $alg, deny cache $cache"
    flag=""; [[ $cache == off ]] && flag=--no-deny-cache
    begin
    json=$("$sluice" bench --redis "$lua_url" --api limiter -a "$alg" --rate "${flood_rate}/s" \
      --hot-key -c 8 --target-rate $((flood_rate * flood_factor)) -d "${seconds}s" \
      --timeout 1s --json -q $flag)
    record "flood:$alg:$cache" "$json" evalsha
    rcli flushall >/dev/null
  done
done

python3 bench/redis_bench_report.py "$results" "$seconds" "$keys" "$rate" "$flood_rate" "$flood_factor" "$rounds" \
  > "$tmp/report.md"
cat "$tmp/report.md"
if [[ -n "$out" ]]; then
  cp "$tmp/report.md" "$out"
  cp "$results" "${out%.md}.jsonl"
fi
