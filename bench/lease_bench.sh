#!/usr/bin/env bash
# Hot-key leases (docs/benchmarks.md, "Hot-key leases"): one key offered traffic at 1x and
# 2x its limit's rate from 4 limiters x 2 threads, with and without leases, side by side
# in one run on one redis-server of its own (free loopback port, no persistence).
#
# Usage: bench/lease_bench.sh [flags of sluice_lease_bench: --seconds S --processes P
#                              --threads T --limit L --lease N]
# Needs: redis-server, redis-cli, python3. Builds build/release/bench/sluice_lease_bench.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in redis-server redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "lease_bench.sh: $tool is missing" >&2; exit 1; }
done
cmake --build build/release --target sluice_lease_bench >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  >/dev/null 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'); $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
build/release/bench/sluice_lease_bench "redis://127.0.0.1:$port" "$@"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
