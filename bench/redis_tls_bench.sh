#!/bin/sh
# `sluice bench` with and without TLS against one redis-server that listens on a plain and
# a TLS port (certificates made here with openssl). Prints decisions/s and the client's
# CPU seconds (user+sys, /usr/bin/time) per million decisions for each.
#
#   bench/redis_tls_bench.sh SLUICE_BINARY [DURATION_S] [CONCURRENCY]
set -eu
SLUICE=$1
DUR=${2:-5}
CONC=${3:-64}
d=$(mktemp -d)
q=">/dev/null 2>&1"
openssl req -x509 -newkey rsa:2048 -nodes -keyout "$d/ca.key" -out "$d/ca.crt" -days 2 -subj /CN=bench-ca >/dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -keyout "$d/s.key" -out "$d/s.csr" -subj /CN=localhost >/dev/null 2>&1
echo "subjectAltName=DNS:localhost,IP:127.0.0.1" > "$d/ext"
openssl x509 -req -in "$d/s.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -out "$d/s.crt" -days 2 -extfile "$d/ext" >/dev/null 2>&1
free() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free); tport=$(free)
redis-server --port "$port" --tls-port "$tport" --tls-cert-file "$d/s.crt" --tls-key-file "$d/s.key" \
  --tls-ca-cert-file "$d/ca.crt" --tls-auth-clients no --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$d" >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
run() {
  /usr/bin/time -f "%U %S" -o "$d/time" "$SLUICE" bench --redis "$1" -c "$CONC" -d "${DUR}s" -q --json > "$d/out"
  dec=$(python3 -c "import json; print(json.load(open('$d/out'))['decisions'])")
  cpu=$(awk '{print $1+$2}' "$d/time")
  echo "$2: $dec decisions in ${DUR}s = $((dec / DUR))/s, client CPU $cpu s = $(echo "scale=2; $cpu * 1000000 / $dec" | bc) s per million"
}
run "redis://127.0.0.1:$port" "plain"
run "rediss://127.0.0.1:$tport?tls_ca=$d/ca.crt" "TLS  "
kill -9 $pid
rm -rf "$d"
