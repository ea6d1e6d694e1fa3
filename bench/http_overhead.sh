#!/usr/bin/env bash
# HTTP middleware overhead: wrk against examples/http_api with and without the sluice
# middleware (in-process store), side by side in one run, plus the 429 path.
#
#   bench/http_overhead.sh [seconds-per-run] [rounds]     (default: 10 s, 3 rounds)
#
# Three servers run at once on loopback:
#   off      --no-ratelimit                      (the baseline: plain cpp-httplib)
#   allowed  --limit 1000000000/min              (every request checked and allowed)
#   quiet    --limit 1000000000/min --headers-on-deny-only
#                                                (checked and allowed, no header fields sent)
#   denied   --limit 1/h                         (every request but the first is a 429)
# Each round runs wrk once against each server in turn (the order rotates per round);
# the table reports the median requests/s of the rounds, and the server's CPU time per
# request (utime+stime from /proc, summed over the rounds), which other load on a shared
# machine disturbs far less than throughput. Prints a Markdown table.
# 8 connections by default: cpp-httplib serves each keep-alive connection on one of its
# 8 pool threads, so more connections would measure queueing, not the middleware.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${1:-10}
rounds=${2:-3}
threads=${WRK_THREADS:-2}
connections=${WRK_CONNECTIONS:-8}

command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk" >&2; exit 1; }
cmake --preset release >/dev/null
cmake --build --preset release -j2 --target sluice_http_api sluice_http_middleware_bench >/dev/null
app=build/release/examples/http_api/sluice_http_api

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

declare -A port pid_of
start() {  # name, flags...
  local name=$1; shift
  port[$name]=$(free_port)
  "$app" --listen "127.0.0.1:${port[$name]}" "$@" >/dev/null 2>&1 &
  pids+=($!)
  pid_of[$name]=$!
  for _ in $(seq 1 100); do
    curl -s -o /dev/null "http://127.0.0.1:${port[$name]}/healthz" && return 0
    sleep 0.05
  done
  echo "server '$name' did not start" >&2
  exit 1
}
start off --no-ratelimit
start allowed --limit 1000000000/min
start quiet --limit 1000000000/min --headers-on-deny-only
start denied --limit 1/h

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
declare -A results ticks requests
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
names=(off allowed quiet denied)
for r in $(seq 1 "$rounds"); do
  for i in 0 1 2 3; do
    name=${names[$(((i + r) % 4))]}
    before=$(cpu_ticks "${pid_of[$name]}")
    out=$(wrk -t"$threads" -c"$connections" -d"${duration}s" "http://127.0.0.1:${port[$name]}/api/hello")
    after=$(cpu_ticks "${pid_of[$name]}")
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out")
    total=$(awk '/requests in/ {print $1}' <<<"$out")
    results[$name]+="$rps "
    ticks[$name]=$((${ticks[$name]:-0} + after - before))
    requests[$name]=$((${requests[$name]:-0} + total))
    echo "round $r $name: $rps req/s, $total requests, ${non2xx:-0} non-2xx" >&2
  done
done

median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
off=$(median "${results[off]}")
allowed=$(median "${results[allowed]}")
quiet=$(median "${results[quiet]}")
denied=$(median "${results[denied]}")

echo
echo "wrk -t$threads -c$connections -d${duration}s, $rounds rounds, median requests/s; $(nproc) cores, $(date -u +%Y-%m-%d);"
echo "load average before: $load_before, after: $(cut -d' ' -f1-3 /proc/loadavg) (other processes share the cores)"
echo
cpu_us() { awk -v t="${ticks[$1]}" -v n="${requests[$1]}" -v hz="$hz" 'BEGIN {printf "%.2f", t / hz * 1e6 / n}'; }
c_off=$(cpu_us off)
c_allowed=$(cpu_us allowed)
c_quiet=$(cpu_us quiet)
c_denied=$(cpu_us denied)
echo "| server | requests/s (median) | vs. no middleware | server CPU per request | vs. no middleware |"
echo "| --- | ---: | ---: | ---: | ---: |"
awk -v off="$off" -v a="$allowed" -v q="$quiet" -v d="$denied" -v coff="$c_off" -v ca="$c_allowed" -v cq="$c_quiet" -v cd="$c_denied" 'BEGIN {
  printf "| no middleware (`--no-ratelimit`) | %.0f | - | %.2f us | - |\n", off, coff
  printf "| middleware, allowed (`--limit 1000000000/min`) | %.0f | %+.1f%% | %.2f us | %+.1f%% |\n", a, (a/off-1)*100, ca, (ca/coff-1)*100
  printf "| middleware, allowed, no header fields (`--headers-on-deny-only`) | %.0f | %+.1f%% | %.2f us | %+.1f%% |\n", q, (q/off-1)*100, cq, (cq/coff-1)*100
  printf "| middleware, 429 path (`--limit 1/h`) | %.0f | %+.1f%% | %.2f us | %+.1f%% |\n", d, (d/off-1)*100, cd, (cd/coff-1)*100
}'
echo
echo "raw requests/s: off=[${results[off]}] allowed=[${results[allowed]}] quiet=[${results[quiet]}] denied=[${results[denied]}]"

echo
echo "Middleware::Check alone beside the bare Limiter::Acquire it wraps (in-process store):"
echo
echo '```'
build/release/bench/sluice_http_middleware_bench --benchmark_min_time=0.5 2>/dev/null | grep -E '^(BM_|Benchmark|-)'
echo '```'
