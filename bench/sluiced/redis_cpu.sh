#!/usr/bin/env bash
# Redis CPU per decision through sluiced (gRPC ShouldRateLimit, sluiced_grpc_load with
# CONNECTIONS calls in flight) beside `sluice bench` (64 callers in one process) on the
# same redis-server, in one run (issue #18: through sluiced the Redis CPU per decision
# should match sluice bench's). Both on the Lua scripts (module=off in the URL) and, when
# the native module is built, on it (the server loads it). Per row: decisions/s, Redis
# CPU µs per decision (the server's user + system time from /proc over the decisions),
# decisions per Redis call (EVALSHA or SLUICE.DECIDE calls from INFO commandstats) and
# per Redis read (INFO stats total_reads_processed),
# p50 / p99; the library with as many callers as sluiced has calls in flight (the same
# concurrency); and the library paced to the rate sluiced reached (the same offered load).
# Usage: bench/sluiced/redis_cpu.sh   (builds the release preset's targets first)
# Settings: DURATION (s per row, default 5), ROUNDS (default 3), CONNECTIONS (sluiced's
# calls in flight, default 32), VALUES (distinct keys, default 1000).
# SLUICED_BEFORE=/path/to/another/sluiced adds its row on the module to the same rounds
# (e.g. a build of an older commit, for a before/after in one run); SLUICE_BEFORE=/path/to/
# another/sluice (the CLI) adds its `sluice bench` rows (64 callers and paced, on each
# store) in the same way. PACED_RATE=N paces the paced rows to N decisions/s instead of
# the rate sluiced just reached on the same store. SLUICED_ALT_ARGS="--flag value ..."
# adds rows of this sluiced started with those flags too (on each store), e.g.
# "--redis-connections 1" beside the default's rows.
set -euo pipefail
cd "$(dirname "$0")/../.."
duration=${DURATION:-5}
rounds=${ROUNDS:-3}
conns=${CONNECTIONS:-32}
values=${VALUES:-1000}
cmake --preset release >/dev/null
cmake --build --preset release -j2 --target sluiced sluiced_grpc_load sluice_cli \
  sluice_redis_module >/dev/null
module=build/release/src/redis/module/sluice_redis_module.so
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_init sluiced-redis-cpu

start_redis --loadmodule "$(realpath "$module")"
url="redis://127.0.0.1:$rport"

bench_sluiced_config "$work/sluiced.yaml"
modes=(lua module)
[[ -n ${SLUICED_BEFORE:-} ]] && modes+=(before)
alt_args=()
[[ -z ${SLUICED_ALT_ARGS:-} ]] || { read -r -a alt_args <<<"$SLUICED_ALT_ARGS" && modes+=(lua-alt module-alt); }
declare -A gport hport
for mode in "${modes[@]}"; do
  gport[$mode]=$(free_port)
  hport[$mode]=$(free_port)
  store=$url
  [[ $mode == lua* ]] && store="$url?module=off"
  binary=build/release/src/service/sluiced
  [[ $mode == before ]] && binary=$SLUICED_BEFORE
  extra=()
  [[ $mode != *-alt ]] || extra=("${alt_args[@]}")
  "$binary" --config "$work/sluiced.yaml" --http "127.0.0.1:${hport[$mode]}" \
    --grpc "127.0.0.1:${gport[$mode]}" --redis "$store" "${extra[@]}" \
    >"$work/sluiced-$mode.log" 2>&1 &
  pids+=($!)
done
for mode in "${modes[@]}"; do
  for _ in $(seq 200); do
    curl -sf "http://127.0.0.1:${hport[$mode]}/readyz" >/dev/null 2>&1 && break
    sleep 0.05
  done
done

clk=$(getconf CLK_TCK)
ticks() { awk '{print $14+$15}' "/proc/$rpid/stat"; }
# "calls reads" so far: EVALSHA + SLUICE.DECIDE calls, and the reads of client sockets
# (INFO stats total_reads_processed: each is a wake-up's work for one connection).
counters() {
  redis-cli -p "$rport" info all | tr -d '\r' | awk -F'[=,:]' '
    /^cmdstat_(evalsha|sluice.decide1?):/ {n += $3} /^total_reads_processed:/ {r = $2}
    END {print n + 0, r + 0}'
}
# One row: runs "$@", which prints "decisions=N ... p50_ms=X p99_ms=Y"; appends
# "rate cpu_us_per_decision decisions_per_call p50 p99 decisions_per_read" to
# $work/<name>.rows.
row() {  # name, command...
  local name=$1 t0 c0 out
  shift
  redis-cli -p "$rport" flushall >/dev/null
  t0=$(ticks)
  c0=$(counters)
  out=$("$@")
  python3 - "$out" "$t0" "$(ticks)" "$c0" "$(counters)" "$clk" >>"$work/$name.rows" <<'EOF'
import re, sys
out, t0, t1, c0, c1, clk = sys.argv[1:7]
f = dict(re.findall(r"(\w+)=([0-9.]+)", out))
n = float(f["decisions"])
cpu_us = 1e6 * (int(t1) - int(t0)) / int(clk) / n
(calls0, reads0), (calls1, reads1) = (map(int, c.split()) for c in (c0, c1))
per_call = n / max(1, calls1 - calls0)
per_read = n / max(1, reads1 - reads0)
print(f"{float(f['rate']):.0f} {cpu_us:.2f} {per_call:.1f} {f['p50_ms']} {f['p99_ms']} {per_read:.1f}")
EOF
}
grpc() {  # mode
  build/release/bench/sluiced/sluiced_grpc_load --target "127.0.0.1:${gport[$1]}" --domain bench \
    --key remote_address --values "$values" --concurrency "$conns" --threads 2 \
    --duration "$duration"
}
# `sluice bench --json` of the CLI `binary` as "decisions=N rate=R p50_ms=X p99_ms=Y": 64
# callers; with "same", CONNECTIONS callers (sluiced's calls in flight); with a rate,
# through sluice::Limiter by CONNECTIONS threads paced to that many decisions/s.
bench() {  # binary url [same|rate]
  local pace=(-c 64)
  if [[ ${3:-} == same ]]; then
    pace=(-c "$conns")
  elif [[ -n ${3:-} ]]; then
    pace=(--api limiter -c "$conns" --target-rate "$3")
  fi
  "$1" bench --redis "$2" -a fixed_window --rate 1000000/s "${pace[@]}" \
    -d "${duration}s" --keys "$values" --timeout 1s --json -q |
    python3 -c 'import json, sys
r = json.load(sys.stdin)
l = r["latency_us"]
print("decisions=%d rate=%f p50_ms=%.3f p99_ms=%.3f" % (r["decisions"], r["decisions_per_s"], l["p50"] / 1000, l["p99"] / 1000))'
}
echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), fixed window," \
  "$values keys, ${duration} s per row, median of $rounds alternating rounds; $(nproc) cores;" \
  "load average $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)"
cli=build/release/src/cli/sluice
# The `sluice bench` rows `name` (and name-before) on `store` (bench's third argument).
benches() {  # name store [same|rate]
  row "$1" bench "$cli" "${@:2}"
  [[ -z ${SLUICE_BEFORE:-} ]] || row "$1-before" bench "$SLUICE_BEFORE" "${@:2}"
}
for _ in $(seq "$rounds"); do
  row sluiced-lua grpc lua
  [[ -z ${SLUICED_ALT_ARGS:-} ]] || row sluiced-lua-alt grpc lua-alt
  benches bench-lua "$url?module=off"
  benches same-lua "$url?module=off" same
  row sluiced-module grpc module
  [[ -z ${SLUICED_BEFORE:-} ]] || row sluiced-before grpc before
  [[ -z ${SLUICED_ALT_ARGS:-} ]] || row sluiced-module-alt grpc module-alt
  benches bench-module "$url"
  benches same-module "$url" same
  # The library at the rate sluiced just reached (or PACED_RATE): the same offered load.
  benches paced-lua "$url?module=off" "${PACED_RATE:-$(tail -1 "$work/sluiced-lua.rows" | cut -d' ' -f1)}"
  benches paced-module "$url" "${PACED_RATE:-$(tail -1 "$work/sluiced-module.rows" | cut -d' ' -f1)}"
done
echo
echo '| path | store | decisions/s | Redis CPU µs/decision | decisions per Redis call | decisions per Redis read | p50 / p99 ms |'
echo '| --- | --- | ---: | ---: | ---: | ---: | ---: |'
names=()
for name in sluiced-lua bench-lua same-lua paced-lua sluiced-module bench-module same-module \
  paced-module; do
  names+=("$name")
  if [[ $name == sluiced-* && -n ${SLUICED_ALT_ARGS:-} ]]; then names+=("$name-alt"); fi
  if [[ $name == sluiced-module && -n ${SLUICED_BEFORE:-} ]]; then names+=(sluiced-before); fi
  if [[ $name != sluiced-* && -n ${SLUICE_BEFORE:-} ]]; then names+=("$name-before"); fi
done
paced="sluiced's rate"
[[ -z ${PACED_RATE:-} ]] || paced="$PACED_RATE/s"
for name in "${names[@]}"; do
  path="sluiced, gRPC, $conns in flight"
  [[ $name == bench-* ]] && path='sluice bench, 64 callers'
  [[ $name == same-* ]] && path="sluice bench, $conns callers"
  [[ $name == paced-* ]] && path="sluice bench, $conns threads paced to $paced"
  [[ $name == *-before ]] && path="$SLUICE_BEFORE: $path"
  [[ $name == sluiced-before ]] && path="$SLUICED_BEFORE, gRPC, $conns in flight"
  [[ $name == *-alt ]] && path="sluiced $SLUICED_ALT_ARGS, gRPC, $conns in flight"
  sort -n -k2 "$work/$name.rows" | awk -v p="$path" -v s="$([[ $name == *lua* ]] && echo lua || echo module)" '{ r[NR]=$0 } END {
    split(r[int((NR+1)/2)], f, " "); printf "| %s | %s | %s | %s | %s | %s | %s / %s |\n", p, s, f[1], f[2], f[3], f[6], f[4], f[5] }'
done
echo
echo "every round (rate cpu_us per_call p50 p99 per_read):"
for name in "${names[@]}"; do
  echo "  $name: $(paste -sd';' "$work/$name.rows")"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
