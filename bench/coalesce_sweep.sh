#!/usr/bin/env bash
# How RedisStoreOptions::coalesce was chosen (docs/benchmarks.md, "Coalesced calls"):
# `sluice bench` (64 callers, 2 connections, 100k random keys) at several bounds, in
# interleaved rounds on one redis-server of its own, with Redis calls per decision and
# the redis-server's CPU time per decision (from /proc).
# Usage: bench/coalesce_sweep.sh [SLUICE] [ALGORITHM] [ROUNDS] [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
sluice=${1:-build/release/src/cli/sluice}
alg=${2:-fixed_window}
rounds=${3:-2}
seconds=${4:-3}
tmp=$(mktemp -d /tmp/sluice-coalesce-sweep.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
  --daemonize no --logfile "$tmp/redis.log" &
rp=$!
trap 'kill $rp 2>/dev/null; wait $rp 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
echo "load average $(cut -d' ' -f1-3 /proc/loadavg); $alg, ${seconds}s per run"
echo "round coalesce decisions/s p50_us p99_us redis_calls/decision redis_cpu_us/decision"
for round in $(seq "$rounds"); do
  for co in 1 4 8 16 32 64; do
    t0=$(awk '{print $14+$15}' "/proc/$rp/stat")
    json=$("$sluice" bench --redis "redis://127.0.0.1:$port" -a "$alg" --rate 1000/s -c 64 \
      -d "${seconds}s" --keys 100000 --timeout 1s --coalesce "$co" --json -q)
    t1=$(awk '{print $14+$15}' "/proc/$rp/stat")
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); d=r["decisions"]; l=r["latency_us"]
print(sys.argv[2], sys.argv[3], int(r["decisions_per_s"]), l["p50"], l["p99"],
      "%.3f" % (r["store_calls"] / d), "%.2f" % (int(sys.argv[4]) * 1e6 / int(sys.argv[5]) / d))' \
      "$json" "$round" "$co" "$((t1 - t0))" "$(getconf CLK_TCK)"
    redis-cli -p "$port" flushall >/dev/null
  done
done
