#!/usr/bin/env bash
# Concurrency limits (docs/benchmarks.md, "Concurrency limits"): acquire+release pairs
# per second against plain rate decisions, side by side in one run on one redis-server
# of its own (free loopback port, no persistence).
#
# Usage: bench/permit_bench.sh [flags of sluice_permit_bench: --seconds S --threads T
#                               --rounds R]
# Needs: redis-server, redis-cli, python3. Builds build/release/bench/sluice_permit_bench.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in redis-server redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "permit_bench.sh: $tool is missing" >&2; exit 1; }
done
cmake --build build/release --target sluice_permit_bench >/dev/null
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  >/dev/null 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'); $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
build/release/bench/sluice_permit_bench "redis://127.0.0.1:$port" "$@"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
