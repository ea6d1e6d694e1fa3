#!/bin/sh
# Recovery of `sluice bench` (async callers that re-submit from their callbacks) after a
# Redis outage (issue #11 item 2). Starts its own redis-server on a free loopback port.
#
#   bench/redis_outage.sh SLUICE_BINARY stop|kill [CONNECTIONS]
#
# stop: SIGSTOP Redis at t=3 s for 3 s, then SIGCONT. kill: kill -9 at t=3 s, restart
# on the same port at t=6 s. Prints bench's per-second progress lines (cumulative
# errors; the interval rate) and the event times, relative to the bench's start.
set -eu
SLUICE=$1
MODE=$2
CONNS=${3:-1}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start_redis() {
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" \
    >/dev/null 2>&1 &
  echo $! > "$dir/pid"
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && return; sleep 0.05; done
  echo "redis-server did not start" >&2; exit 1
}
start_redis
t0=$(date +%s.%N)
"$SLUICE" bench --redis "redis://127.0.0.1:$port" -c 64 -d 12s --connections "$CONNS" \
  2> "$dir/progress" > "$dir/summary" &
bench=$!
rel() { echo "$(date +%s.%N) - $t0" | bc; }
sleep 3
if [ "$MODE" = stop ]; then
  kill -STOP "$(cat "$dir/pid")"; echo "SIGSTOP at $(rel) s"
  sleep 3
  kill -CONT "$(cat "$dir/pid")"; echo "SIGCONT at $(rel) s"
else
  kill -9 "$(cat "$dir/pid")"; echo "kill -9 at $(rel) s"
  sleep 3
  start_redis; echo "restarted (answering PING) at $(rel) s"
fi
wait "$bench" || true
cat "$dir/progress"
cat "$dir/summary"
kill -9 "$(cat "$dir/pid")" 2>/dev/null || true
rm -rf "$dir"
