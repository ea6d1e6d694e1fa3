#!/usr/bin/env bash
# sluiced soak (a benchmark, not a test): wrk on GET /v1/check for SOAK_SECONDS (default
# 600) in 10 s slices, while SLOW_CLIENTS (default 500) slow clients each send a header
# byte every 1.5 s (reconnecting when sluiced closes them at the request timeout) and the
# config is rewritten and reloaded (SIGHUP) every 10 s. One row per slice: requests/s,
# p99, failed requests (socket errors + non-2xx), reloads so far, sluiced's RSS.
# Usage: bench/sluiced/soak.sh [memory|redis]   (builds the release preset first)
# Settings: SOAK_SECONDS, SLOW_CLIENTS, CONNECTIONS (wrk, default 32), THREADS (default 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
store=${1:-memory}
total=${SOAK_SECONDS:-600}
slow=${SLOW_CLIENTS:-500}
conns=${CONNECTIONS:-32}
threads=${THREADS:-2}
cmake --preset release >/dev/null
cmake --build --preset release -j2 --target sluiced >/dev/null
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_init sluiced-soak

redis_flag=()
if [[ $store == redis ]]; then
  rport=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    >"$work/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done
  redis_flag=(--redis "redis://127.0.0.1:$rport")
fi

config() {  # generation -> a config whose second rule changes every reload
  cat <<YAML
sluiced:
  reload_poll: 0
  log_level: warn
domain: soak
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 4000000000}
  - key: generation
    rate_limit: {unit: minute, requests_per_unit: $((100 + $1))}
YAML
}
config 0 >"$work/sluiced.yaml"
hport=$(free_port)
build/release/src/service/sluiced --config "$work/sluiced.yaml" --http "127.0.0.1:$hport" \
  --grpc 127.0.0.1:0 "${redis_flag[@]}" >"$work/sluiced.log" 2>&1 &
spid=$!
pids+=($spid)
for _ in $(seq 200); do curl -sf "http://127.0.0.1:$hport/readyz" >/dev/null 2>&1 && break; sleep 0.05; done

# Slow clients: a byte every 1.5 s, never a whole request; reconnect when closed.
python3 - "$hport" "$slow" "$total" "$work/slow.log" <<'PY' &
import socket, sys, time
port, n, total, log = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
def connect():
    s = socket.socket()
    s.settimeout(2)
    s.connect(("127.0.0.1", port))
    s.sendall(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
    return s
socks = [connect() for _ in range(n)]
reconnects = 0
end = time.time() + total + 5
while time.time() < end:
    time.sleep(1.5)
    for i, s in enumerate(socks):
        try:
            s.sendall(b"x")
        except OSError:
            s.close()
            socks[i] = connect()
            reconnects += 1
    with open(log, "w") as f:
        f.write("%d slow clients connected; %d reconnects after sluiced closed them\n"
                % (n, reconnects))
PY
pids+=($!)

# Reloads every 10 s.
(
  g=0
  while sleep 10; do
    g=$((g + 1))
    config "$g" >"$work/sluiced.yaml.new" && mv "$work/sluiced.yaml.new" "$work/sluiced.yaml"
    kill -HUP "$spid"
  done
) &
pids+=($!)

echo "store=$store soak ${total}s: wrk -t$threads -c$conns in 10 s slices on GET /v1/check," \
  "$slow slow clients (a byte / 1.5 s), reload every 10 s; cores=$(nproc); $(date -u +%FT%TZ)"
echo
echo '| t (s) | requests/s | p99 | failed requests | reloads | RSS |'
echo '| ---: | ---: | ---: | ---: | ---: | ---: |'
t=0
failed_total=0
while ((t < total)); do
  out=$(wrk -t"$threads" -c"$conns" -d10s --latency \
    "http://127.0.0.1:$hport/v1/check?domain=soak&key=remote_address&value=10.0.0.1")
  t=$((t + 10))
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out")
  sockerr=$(awk -F'[ ,]+' '/Socket errors/ {print $4+$6+$8+$10}' <<<"$out")
  failed=$((${non2xx:-0} + ${sockerr:-0}))
  failed_total=$((failed_total + failed))
  reloads=$(curl -s "http://127.0.0.1:$hport/metrics" |
    awk '/^sluiced_config_reloads_total\{result="ok"\}/ {print $2}')
  rss=$(awk '/VmRSS/ {print $2 " " $3}' "/proc/$spid/status")
  echo "| $t | ${rps%.*} | $p99 | $failed | $reloads | $rss |"
done
echo
echo "failed requests in total: $failed_total; $(cat "$work/slow.log" 2>/dev/null || true)"
echo "config reloads: $(curl -s "http://127.0.0.1:$hport/metrics" | grep 'sluiced_config_reloads_total' | tr '\n' ' ')"
