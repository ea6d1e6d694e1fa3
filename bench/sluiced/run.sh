#!/usr/bin/env bash
# sluiced throughput and latency, side by side with nginx answering `return 200`, in one
# run on this machine, all on loopback:
#   - HTTP (wrk): nginx return 200 | sluiced GET /v1/check | sluiced POST /json
#   - gRPC (sluiced_grpc_load, async stubs): ShouldRateLimit against sluice.bench.v1.Empty
#     (the same messages answered at once, on the same server: what gRPC itself costs)
# Usage: bench/sluiced/run.sh [memory|redis]   (builds the release preset first)
# Settings: DURATION (s per run, default 5), ROUNDS (default 3), CONNECTIONS (default 32),
# THREADS (wrk, default 2). SLUICED_BEFORE=/path/to/another/sluiced adds its HTTP rows to
# the same rounds (e.g. a build of an older commit, for a before/after in one run).
set -euo pipefail
cd "$(dirname "$0")/../.."
store=${1:-memory}
duration=${DURATION:-5}
conns=${CONNECTIONS:-32}
threads=${THREADS:-2}
cmake --preset release >/dev/null
cmake --build --preset release -j2 --target sluiced sluiced_grpc_load >/dev/null
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_init sluiced-bench

redis_flag=()
if [[ $store == redis ]]; then
  rport=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    >"$work/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done
  redis_flag=(--redis "redis://127.0.0.1:$rport")
fi

bench_sluiced_config "$work/sluiced.yaml"
hport=$(free_port)
gport=$(free_port)
build/release/src/service/sluiced --config "$work/sluiced.yaml" --http "127.0.0.1:$hport" \
  --grpc "127.0.0.1:$gport" --bench-empty-grpc "${redis_flag[@]}" >"$work/sluiced.log" 2>&1 &
spid=$!
pids+=($!)
bport=
if [[ -n ${SLUICED_BEFORE:-} ]]; then
  bport=$(free_port)
  "$SLUICED_BEFORE" --config "$work/sluiced.yaml" --http "127.0.0.1:$bport" \
    --grpc "127.0.0.1:$(free_port)" "${redis_flag[@]}" >"$work/before.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 200); do curl -sf "http://127.0.0.1:$bport/readyz" >/dev/null 2>&1 && break; sleep 0.05; done
fi

start_nginx_200 2
for _ in $(seq 200); do
  curl -sf "http://127.0.0.1:$hport/readyz" >/dev/null 2>&1 &&
    curl -sf "http://127.0.0.1:$nport/" >/dev/null 2>&1 && break
  sleep 0.05
done

cat >"$work/json.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"domain":"bench","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}'
LUA

# One wrk run; prints "requests/s p50 p99 non2xx".
wrk_once() {  # url, [lua]
  local url=$1 lua=${2:-} out
  if [[ -n $lua ]]; then
    out=$(wrk -t"$threads" -c"$conns" -d"${duration}s" --latency -s "$lua" "$url")
  else
    out=$(wrk -t"$threads" -c"$conns" -d"${duration}s" --latency "$url")
  fi
  local rps p50 p99 non2xx
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out")
  echo "${rps%.*} $p50 $p99 ${non2xx:-0}"
}
# The machine is shared: targets take turns for $rounds rounds; the median round counts.
median_row() {  # name, file of rows
  sort -n "$2" | awk -v name="$1" '{ r[NR]=$0 } END { split(r[int((NR+1)/2)], f, " ");
    printf "| %s | %s | %s | %s | %s |\n", name, f[1], f[2], f[3], f[4] }'
}

rounds=${ROUNDS:-3}
echo "store=$store wrk -t$threads -c$conns -d${duration}s, median of $rounds alternating rounds;" \
  "cores=$(nproc); $(date -u +%FT%TZ)"
: >"$work/nginx.rows"; : >"$work/check.rows"; : >"$work/json.rows"
: >"$work/bcheck.rows"; : >"$work/bjson.rows"
for _ in $(seq "$rounds"); do
  if [[ -n $bport ]]; then
    wrk_once "http://127.0.0.1:$bport/v1/check?domain=bench&key=remote_address&value=10.0.0.1" \
      >>"$work/bcheck.rows"
    wrk_once "http://127.0.0.1:$bport/json" "$work/json.lua" >>"$work/bjson.rows"
  fi
  wrk_once "http://127.0.0.1:$nport/" >>"$work/nginx.rows"
  wrk_once "http://127.0.0.1:$hport/v1/check?domain=bench&key=remote_address&value=10.0.0.1" \
    >>"$work/check.rows"
  wrk_once "http://127.0.0.1:$hport/json" "$work/json.lua" >>"$work/json.rows"
done
echo
echo '| HTTP target | requests/s | p50 | p99 | non-2xx |'
echo '| --- | ---: | ---: | ---: | ---: |'
median_row 'nginx `return 200` (reference)' "$work/nginx.rows"
median_row 'sluiced GET /v1/check' "$work/check.rows"
median_row 'sluiced POST /json' "$work/json.rows"
if [[ -n $bport ]]; then
  median_row "before ($SLUICED_BEFORE) GET /v1/check" "$work/bcheck.rows"
  median_row "before ($SLUICED_BEFORE) POST /json" "$work/bjson.rows"
fi
echo
echo "all rounds (requests/s p50 p99 non-2xx): nginx: $(paste -sd';' "$work/nginx.rows")"
echo "  check: $(paste -sd';' "$work/check.rows")"
echo "  json: $(paste -sd';' "$work/json.rows")"
[[ -z $bport ]] || echo "  before: check: $(paste -sd';' "$work/bcheck.rows"); json: $(paste -sd';' "$work/bjson.rows")"
echo
echo "gRPC: sluiced_grpc_load --concurrency $conns --threads $threads --values 1000" \
  "--duration $duration, alternating rounds, median"
grpc_once() {  # extra flags; prints "rate p50 p99 errors"
  build/release/bench/sluiced/sluiced_grpc_load --target "127.0.0.1:$gport" --domain bench \
    --key remote_address --values 1000 --concurrency "$conns" --threads "$threads" \
    --duration "$duration" "$@" |
    sed -E 's/.*rate=([0-9]+) p50_ms=([0-9.]+) p99_ms=([0-9.]+) .*errors=([0-9]+).*/\1 \2ms \3ms \4/'
}
: >"$work/gempty.rows"; : >"$work/gdecide.rows"
for _ in $(seq "$rounds"); do
  grpc_once --empty >>"$work/gempty.rows" || true
  grpc_once >>"$work/gdecide.rows" || true
done
echo
echo '| gRPC target | calls/s | p50 | p99 | errors |'
echo '| --- | ---: | ---: | ---: | ---: |'
median_row 'empty handler, same server (reference)' "$work/gempty.rows"
median_row 'ShouldRateLimit (decision)' "$work/gdecide.rows"
echo "all rounds: empty: $(paste -sd';' "$work/gempty.rows"); decision: $(paste -sd';' "$work/gdecide.rows")"
echo "sluiced RSS after the run: $(awk '/VmRSS/ {print $2, $3}' "/proc/$spid/status" 2>/dev/null || echo n/a)"
