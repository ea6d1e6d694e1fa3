#!/bin/sh
# Calls that fail per CLIENT KILL (issue #11 item 5): `sluice bench --api limiter` with 8
# threads against its own redis-server, `CLIENT KILL TYPE normal` KILLS times (every
# 300 ms), then the bench's error count / KILLS. Each error is a decision the failure
# mode made (fail-open by default) instead of Redis.
#
#   bench/redis_client_kill.sh SLUICE_BINARY [KILLS] [CONNECTIONS]
set -eu
SLUICE=$1
KILLS=${2:-20}
CONNS=${3:-2}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
dur=$(( KILLS * 3 / 10 + 3 ))
"$SLUICE" bench --redis "redis://127.0.0.1:$port" --api limiter -c 8 -d "${dur}s" \
  --connections "$CONNS" -q > "$dir/summary" &
bench=$!
sleep 1
killed=0
for _ in $(seq "$KILLS"); do
  n=$(redis-cli -p "$port" CLIENT KILL TYPE normal)
  killed=$((killed + n))
  sleep 0.3
done
wait "$bench" || true
cat "$dir/summary"
errors=$(sed -n 's/^errors *\([0-9]*\).*/\1/p' "$dir/summary")
echo "kills $KILLS (connections killed: $killed), errors ${errors:-0}, per kill: $(echo "scale=1; ${errors:-0} / $KILLS" | bc)"
kill -9 "$pid" 2>/dev/null || true
rm -rf "$dir"
