#!/usr/bin/env bash
# The main job: installs what is missing, builds, and starts sluiced (the rate-limit
# daemon) on its embedded store with the sample config examples/sluiced.yaml.
# Extra arguments go to sluiced, e.g. scripts/run.sh --http 127.0.0.1:9080
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh release
cat <<'TRY'
sluiced is starting (HTTP 127.0.0.1:8080, gRPC 127.0.0.1:8081; Ctrl-C stops it).
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
exec build/release/src/service/sluiced --config examples/sluiced.yaml "$@"
