#!/usr/bin/env bash
# `sluice bench` on a local 3-primary Redis Cluster against a single redis-server, side by
# side in one run (docs/benchmarks.md, "Redis Cluster"). For each algorithm and target:
#   decisions/s and p99 (from sluice bench --json),
#   client CPU per decision (/usr/bin/time of the sluice process),
#   Redis CPU per decision on each primary (/proc/PID/stat utime+stime deltas),
#   the spread of calls over the primaries (INFO commandstats evalsha calls per primary).
#
# Usage: bench/redis_cluster_bench.sh [--seconds S] [--algorithms "fixed_window gcra ..."]
#                                     [--keys K] [--concurrency C] [--connections N]
#                                     [--cluster-connections M]
#                                     [--out FILE.md] [--sluice PATH]
# --connections is per server: the single server gets N, each cluster primary gets N too,
# unless --cluster-connections M gives the cluster's primaries M each.
# Needs redis-server, redis-cli, python3, /usr/bin/time. Builds build/release/src/cli/sluice
# (incrementally) unless --sluice is given.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

seconds=5
algorithms="fixed_window gcra"
keys=100000
concurrency=64
connections=2
cluster_connections=""
out=""
sluice="$root/build/release/src/cli/sluice"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --algorithms) algorithms=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --cluster-connections) cluster_connections=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --sluice) sluice=$2; shift 2 ;;
    -h|--help) sed -n 2,14p "$0"; exit 0 ;;
    *) echo "redis_cluster_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for tool in redis-server redis-cli python3 /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "redis_cluster_bench.sh: '$tool' is missing" >&2; exit 1; }
done
if [[ "$sluice" == "$root/build/release/src/cli/sluice" ]]; then
  echo "== building $sluice (release preset, incremental)" >&2
  [[ -f build/release/CMakeCache.txt ]] || cmake --preset release >/dev/null
  cmake --build --preset release -j2 --target sluice_cli >&2
fi
[[ -x "$sluice" ]] || { echo "redis_cluster_bench.sh: no sluice binary at $sluice" >&2; exit 1; }

tmp=$(mktemp -d /tmp/sluice-cluster-bench.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start_server NAME PORT [ARGS...]: a redis-server of our own (no persistence).
start_server() {
  local name=$1 port=$2; shift 2
  mkdir -p "$tmp/$name"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --dir "$tmp/$name" --logfile "$tmp/$name/redis.log" "$@" &
  pids+=($!)
  echo $! > "$tmp/$name/pid"
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "redis_cluster_bench.sh: redis-server $name did not start" >&2; exit 1
}

single_port=$(free_port)
start_server single "$single_port"
cluster_ports=()
for i in 1 2 3; do
  p=$(free_port); bus=$(free_port)
  start_server "node$i" "$p" --cluster-enabled yes --cluster-port "$bus" --cluster-node-timeout 1000
  cluster_ports+=("$p")
done
redis-cli --cluster create $(for p in "${cluster_ports[@]}"; do echo "127.0.0.1:$p"; done) \
  --cluster-yes >"$tmp/create.log" 2>&1 || { cat "$tmp/create.log" >&2; exit 1; }
for _ in $(seq 200); do
  ok=1
  for p in "${cluster_ports[@]}"; do
    redis-cli -p "$p" cluster info | grep -q 'cluster_state:ok' || ok=0
  done
  [[ $ok == 1 ]] && break
  sleep 0.1
done
[[ $ok == 1 ]] || { echo "redis_cluster_bench.sh: the cluster did not become ok" >&2; exit 1; }

results="$tmp/results.jsonl"
: > "$results"
# measure CASE URL PORTS...: one sluice bench run, with CPU and call counts per server.
measure() {
  local case=$1 url=$2; shift 2
  local ports=("$@") before=() calls conns=$connections
  [[ $case == cluster && -n $cluster_connections ]] && conns=$cluster_connections
  for p in "${ports[@]}"; do
    redis-cli -p "$p" flushall >/dev/null
    redis-cli -p "$p" config resetstat >/dev/null
  done
  for p in "${ports[@]}"; do
    pid=$(redis-cli -p "$p" info server | awk -F: '/^process_id/{print $2}' | tr -d '\r')
    before+=("$pid:$(awk '{print $14+$15}' /proc/$pid/stat)")
  done
  echo "== $case: sluice bench --redis $url -a $alg" >&2
  json=$(/usr/bin/time -o "$tmp/time.txt" -f "%U %S" "$sluice" bench --redis "$url" -a "$alg" \
    --rate 1000/s -c "$concurrency" --connections "$conns" -d "${seconds}s" \
    --keys "$keys" --timeout 1s --json -q)
  local servers="[]"
  for i in "${!ports[@]}"; do
    p=${ports[$i]}; pid=${before[$i]%%:*}; t0=${before[$i]#*:}
    t1=$(awk '{print $14+$15}' /proc/$pid/stat)
    calls=$(redis-cli -p "$p" info commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p' | tr -d '\r')
    servers=$(python3 -c 'import json,sys; s=json.loads(sys.argv[1]); s.append({"port":int(sys.argv[2]),"cpu_ticks":int(sys.argv[3])-int(sys.argv[4]),"evalsha":int(sys.argv[5] or 0)}); print(json.dumps(s))' \
      "$servers" "$p" "$t1" "$t0" "${calls:-0}")
  done
  python3 - "$case" "$alg" "$json" "$servers" "$(cat "$tmp/time.txt")" "$(getconf CLK_TCK)" >> "$results" <<'EOF'
import json, sys
case, alg, js, servers, cpu, clk = sys.argv[1:7]
r = json.loads(js)
u, s = cpu.split()[-2:]
print(json.dumps({"case": case, "algorithm": alg, "bench": r, "servers": json.loads(servers),
                  "client_cpu_s": float(u) + float(s), "clk": int(clk)}))
EOF
}

cluster_url="redis-cluster://127.0.0.1:${cluster_ports[0]}"
for alg in $algorithms; do
  measure single "redis://127.0.0.1:$single_port" "$single_port"
  measure cluster "$cluster_url" "${cluster_ports[@]}"
done

report=$(python3 - "$results" "$seconds" "$keys" "$concurrency" "$connections${cluster_connections:+ (cluster primaries: $cluster_connections each)}" "$(nproc)" "$(uptime)" <<'EOF'
import json, sys
path, seconds, keys, conc, conns, nproc, uptime = sys.argv[1:8]
rows = [json.loads(l) for l in open(path)]
print(f"{seconds} s per run, {keys} random keys, {conc} concurrent callers (--api store), "
      f"{conns} connections per server; {nproc} cores; load at the end: {uptime.split('load average:')[-1].strip()}")
print()
print("| algorithm | target | decisions/s | p99 ms | client CPU µs/decision | Redis CPU µs/decision (per primary) | Redis CPU µs/decision (total) | calls per primary (share) | errors |")
print("|---|---|---:|---:|---:|---|---:|---|---:|")
for r in rows:
    b = r["bench"]
    n = max(1, b["decisions"])
    clk = r["clk"]
    per = [s["cpu_ticks"] / clk * 1e6 / max(1, s["evalsha"]) for s in r["servers"]]
    total_cpu = sum(s["cpu_ticks"] for s in r["servers"]) / clk * 1e6 / n
    calls = [s["evalsha"] for s in r["servers"]]
    share = " / ".join(f"{c} ({100.0 * c / max(1, sum(calls)):.1f}%)" for c in calls)
    print(f"| {r['algorithm']} | {r['case']} | {b['decisions_per_s']:.0f} | {b['latency_us']['p99'] / 1000:.2f} | "
          f"{r['client_cpu_s'] * 1e6 / n:.2f} | {' / '.join(f'{p:.2f}' for p in per)} | {total_cpu:.2f} | {share} | {b['error_total']} |")
EOF
)
echo "$report"
if [[ -n "$out" ]]; then echo "$report" > "$out"; fi
