#!/usr/bin/env bash
# sluiced's memory with the Redis store: RSS (VmRSS) after start with 1000 configured
# rules, and after 10k requests that each carry a distinct `limit` override
# (defect 6 of issue #10). Every binary given is measured in the same run, one after
# the other, against one redis-server on loopback.
# Usage: bench/sluiced/memory.sh [SLUICED_BINARY...]
#   default: this tree's build/release/src/service/sluiced (built first).
#   A reference: build another revision's sluiced and pass both, e.g.
#     git worktree add /tmp/sluice-ref main && (cd /tmp/sluice-ref && cmake --preset release \
#       && cmake --build build/release -j2 --target sluiced)
#     bench/sluiced/memory.sh /tmp/sluice-ref/build/release/src/service/sluiced \
#       build/release/src/service/sluiced
# Settings: RULES (default 1000), OVERRIDES (default 10000).
set -euo pipefail
cd "$(dirname "$0")/../.."
rules=${RULES:-1000}
overrides=${OVERRIDES:-10000}
bins=("$@")
if [[ ${#bins[@]} -eq 0 ]]; then
  cmake --preset release >/dev/null
  cmake --build build/release -j2 --target sluiced >/dev/null
  bins=(build/release/src/service/sluiced)
fi
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_init sluiced-mem
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  >"$work/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done

{
  echo "sluiced:"
  echo "  reload_poll: 0"
  echo "  log_level: warn"
  echo "domain: mem"
  echo "descriptors:"
  for i in $(seq 1 "$rules"); do
    echo "  - key: k$i"
    echo "    rate_limit: {unit: minute, requests_per_unit: $((100 + i))}"
  done
} >"$work/sluiced.yaml"

printf '%-60s %8s %14s %18s\n' binary rules "RSS start MB" "RSS +overrides MB"
for bin in "${bins[@]}"; do
  hport=$(free_port)
  gport=$(free_port)
  "$bin" --config "$work/sluiced.yaml" --http "127.0.0.1:$hport" --grpc "127.0.0.1:$gport" \
    --redis "redis://127.0.0.1:$rport" >"$work/sluiced.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 400); do
    curl -fs "http://127.0.0.1:$hport/healthz" >/dev/null 2>&1 && break
    sleep 0.05
  done
  # One decision per rule first, so that every rule's path has been used once.
  python3 - "$hport" "$rules" 0 <<'PY'
import http.client, json, sys
port, rules, overrides = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
def post(body):
    c.request("POST", "/json", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    if r.status != 200: sys.exit(f"POST /json answered {r.status}")
for i in range(1, rules + 1):
    post({"domain": "mem", "descriptors": [{"entries": [{"key": f"k{i}", "value": "v"}]}]})
PY
  start=$(rss_kb "$pid")
  python3 - "$hport" "$overrides" <<'PY'
import http.client, json, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
bad = 0
for i in range(n):
    body = {"domain": "mem", "descriptors": [{"entries": [{"key": "k1", "value": "v"}],
            "limit": {"requestsPerUnit": 1000 + i, "unit": "MINUTE"}}]}
    c.request("POST", "/json", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    bad += r.status != 200
if bad: print(f"  ({bad} of {n} override requests were refused)", file=sys.stderr)
PY
  after=$(rss_kb "$pid")
  printf '%-60s %8d %14.1f %18.1f\n' "$bin" "$rules" "$(echo "$start/1024" | bc -l)" \
    "$(echo "$after/1024" | bc -l)"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
done
