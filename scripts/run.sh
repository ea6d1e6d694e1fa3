#!/usr/bin/env bash
# The main job: installs what is missing, builds, and starts sluiced (the rate-limit
# daemon) on its embedded store with the sample config examples/sluiced.yaml.
# Extra arguments go to sluiced, e.g. scripts/run.sh --http 127.0.0.1:9080
set -euo pipefail
cd "$(dirname "$0")/.."
# The curl lines below use the addresses the flags give (--http A:P, --http=A:P).
http=127.0.0.1:8080
grpc=127.0.0.1:8081
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --http) http=${args[i + 1]:-$http} ;;
    --http=*) http=${args[i]#--http=} ;;
    --grpc) grpc=${args[i + 1]:-$grpc} ;;
    --grpc=*) grpc=${args[i]#--grpc=} ;;
  esac
done
# A wildcard listen address is reached through loopback.
url_host=${http%:*}
case $url_host in 0.0.0.0 | "") url_host=127.0.0.1 ;; "[::]") url_host="[::1]" ;; esac
base="http://$url_host:${http##*:}"
banner=$(sed "s|http://127.0.0.1:8080|$base|g; s|@HTTP@|$http|; s|@GRPC@|$grpc|" <<'TRY'
sluiced is starting (HTTP @HTTP@, gRPC @GRPC@; Ctrl-C stops it).
Try it from another shell:

  # 10 requests a minute per client address: the 11th gets 429
  for i in $(seq 11); do curl -s -o /dev/null -w '%{http_code} ' \
    'http://127.0.0.1:8080/v1/check?domain=api&key=remote_address&value=10.0.0.1'; done; echo
  # the same question in envoyproxy/ratelimit's JSON
  curl -s -XPOST http://127.0.0.1:8080/json -d \
    '{"domain":"api","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]}]}'
  # what nginx auth_request asks (X-Real-IP becomes the remote_address descriptor)
  curl -si -H 'X-Real-IP: 10.0.0.2' http://127.0.0.1:8080/nginx/auth/api | head -5
  # Prometheus metrics
  curl -s http://127.0.0.1:8080/metrics | grep sluiced_decisions_total

docs/sluiced.md explains the configuration, each API, nginx and Envoy set-ups.
TRY
)
# Tests: print the banner for these arguments, build nothing, start nothing.
if [[ ${SLUICE_RUN_BANNER_ONLY:-} == 1 ]]; then
  echo "$banner"
  exit 0
fi
scripts/deps.sh
scripts/build.sh release
echo "$banner"
exec build/release/src/service/sluiced --config examples/sluiced.yaml "$@"
