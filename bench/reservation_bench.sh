#!/usr/bin/env bash
# Reservations (issue #12 item 2; docs/benchmarks.md, "Reservations"): reservation
# throughput on Redis against plain decisions, side by side in one run on one
# redis-server of its own (free loopback port, no persistence).
#
# For token_bucket and gcra, `sluice bench` (64 concurrent RedisStore::EvaluateAsync
# callers, 2 connections) runs, interleaved round by round:
#   plain      : plain decisions (the lean one-check script);
#   reserve    : the same with --max-wait 1s (StoreCheck::max_wait: the check carries the
#                ext item w=, so it runs the batch script and is never coalesced);
# over 10000 keys at 1000/s each (nearly every decision allowed, no wait), and over one
# hot key at 1000/s (reservations queue up to 1 s ahead, then are denied).
# Besides decisions/s it records Redis's own time per EVALSHA (INFO commandstats) and the
# redis-server's CPU per decision (/proc), which move much less on a shared machine.
#
# Usage: bench/reservation_bench.sh [--seconds S] [--rounds N] [--sluice PATH]
# Needs: redis-server, redis-cli, python3. Builds build/release/src/cli/sluice unless
# --sluice is given.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
seconds=3
rounds=2
sluice="$root/build/release/src/cli/sluice"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --sluice) sluice=$2; shift 2 ;;
    -h|--help) sed -n 2,19p "$0"; exit 0 ;;
    *) echo "reservation_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for tool in redis-server redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "reservation_bench.sh: $tool is missing" >&2; exit 1; }
done
if [[ "$sluice" == "$root/build/release/src/cli/sluice" ]]; then
  cmake --build --preset release -j2 --target sluice_cli >&2
fi
tmp=$(mktemp -d /tmp/sluice-reservation-bench.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  --dir "$tmp" --logfile "$tmp/redis.log" &
server=$!
trap 'kill "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; rm -rf "$tmp"' EXIT
rcli() { redis-cli -h 127.0.0.1 -p "$port" "$@"; }
for _ in $(seq 100); do rcli ping >/dev/null 2>&1 && break; sleep 0.1; done
url="redis://127.0.0.1:$port"
clk=$(getconf CLK_TCK)
redis_ticks() { awk '{print $14+$15}' "/proc/$server/stat"; }
results="$tmp/results.jsonl"
: > "$results"
echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'); $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"

for round in $(seq "$rounds"); do
  for alg in token_bucket gcra; do
    for keys in 10000 1; do
      for mode in plain reserve; do
        flags=""; [[ $mode == reserve ]] && flags="--max-wait 1s"
        echo "== round $round: $alg, $keys key(s), $mode" >&2
        rcli config resetstat >/dev/null
        t0=$(redis_ticks)
        json=$("$sluice" bench --redis "$url" -a "$alg" --rate 1000/s -c 64 -d "${seconds}s" \
          --keys "$keys" --timeout 1s --json -q $flags)
        python3 - "$round" "$alg" "$keys" "$mode" "$json" "$(rcli info commandstats)" "$t0" \
          "$(redis_ticks)" "$clk" >> "$results" <<'EOF'
import json, re, sys
rnd, alg, keys, mode, js, stats, t0, t1, clk = sys.argv[1:10]
r = json.loads(js)
m = re.search(r"cmdstat_evalsha:calls=(\d+),usec=(\d+),usec_per_call=([0-9.]+)", stats)
r.update(round=int(rnd), alg=alg, nkeys=int(keys), mode=mode,
         redis_usec_per_call=float(m.group(3)) if m else None,
         redis_cpu_us_per_decision=(int(t1) - int(t0)) / int(clk) * 1e6 / max(1, r["decisions"]))
print(json.dumps(r))
EOF
        rcli flushall >/dev/null
      done
    done
  done
done

python3 - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| algorithm | keys | mode | decisions/s (median) | allowed % | p50 us | p99 us | Redis us/EVALSHA | Redis CPU us/decision |")
print("|---|---|---|---|---|---|---|---|---|")
groups = {}
for r in rows:
    groups.setdefault((r["alg"], r["nkeys"], r["mode"]), []).append(r)
for (alg, keys, mode), rs in groups.items():
    rs.sort(key=lambda r: r["decisions_per_s"])
    m = rs[len(rs) // 2]
    allowed = 100.0 * m["allowed"] / max(1, m["decisions"])
    print(f"| {alg} | {keys} | {mode} | {m['decisions_per_s']:.0f} ({', '.join('%.0f' % r['decisions_per_s'] for r in rs)}) "
          f"| {allowed:.1f} | {m['latency_us']['p50']:.0f} | {m['latency_us']['p99']:.0f} "
          f"| {m['redis_usec_per_call'] or 0:.2f} | {m['redis_cpu_us_per_decision']:.2f} |")
EOF
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
