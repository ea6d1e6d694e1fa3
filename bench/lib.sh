# Shared setup of the benchmark scripts, sourced by them: a scratch directory, the
# processes a script starts (stopped when it exits), free loopback ports and nginx
# answering `return 200`.
#
#   source "$(dirname "$0")/../lib.sh"   (or bench/lib.sh from the repository root)
#   bench_init sluiced-bench             # work=/tmp/sluiced-bench-XXXXXX, pids=()
#   some-server & pids+=($!)             # stopped on exit, then $work removed
# A script may define bench_on_exit, run after its processes are stopped.

bench_init() {  # name of the scratch directory
  work=$(mktemp -d "/tmp/$1-XXXXXX")
  pids=()
  trap bench_cleanup EXIT
}

bench_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if declare -F bench_on_exit >/dev/null; then bench_on_exit; fi
  rm -rf "$work"
}

# Writes to `file` the config bench/sluiced's scripts give sluiced: domain `bench`, one
# limit per remote_address that no load reaches (below 2^31, so fixed window runs its
# lean script), no reload polling, warnings only.
bench_sluiced_config() {  # file
  cat >"$1" <<'YAML'
sluiced:
  reload_poll: 0
  log_level: warn
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 2000000000}
YAML
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Starts a redis-server without persistence on a free loopback port (set in rport; its
# pid in rpid and pids), its log in $work/redis.log, any further arguments passed on
# (e.g. --loadmodule PATH); returns once it answers PING, fails if it does not.
start_redis() {  # [redis-server arguments...]
  rport=$(free_port)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
    --dir "$work" "$@" >"$work/redis.log" 2>&1 &
  rpid=$!
  pids+=("$rpid")
  for _ in $(seq 200); do redis-cli -p "$rport" ping >/dev/null 2>&1 && return 0; sleep 0.05; done
  echo "bench: redis-server did not start (log: $work/redis.log)" >&2
  return 1
}

# Starts nginx answering `return 200 "ok\n"` on a free port (set in nport) with
# `workers` worker processes (default 1), its files under $work/nginx.
start_nginx_200() {  # [workers]
  nport=$(free_port)
  mkdir -p "$work/nginx/tmp"
  cat >"$work/nginx/nginx.conf" <<NGINX
daemon off;
worker_processes ${1:-1};
error_log $work/nginx/error.log warn;
pid $work/nginx/nginx.pid;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/nginx/tmp/body;
  proxy_temp_path $work/nginx/tmp/proxy;
  fastcgi_temp_path $work/nginx/tmp/fastcgi;
  uwsgi_temp_path $work/nginx/tmp/uwsgi;
  scgi_temp_path $work/nginx/tmp/scgi;
  server { listen 127.0.0.1:$nport; location / { return 200 "ok\n"; } }
}
NGINX
  /usr/sbin/nginx -p "$work/nginx/" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
  pids+=($!)
}

# One STATIC cluster of an Envoy bootstrap at 127.0.0.1:port, HTTP/2 when http2 is 1
# (a gRPC service), as a YAML list entry under `clusters:`.
envoy_cluster() {  # name, port, http2
  local h2=
  [[ $3 == 1 ]] && h2='
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}'
  printf '  - name: %s\n    type: STATIC%s\n    load_assignment:\n      cluster_name: %s\n      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: %s}}}}]}]\n' \
    "$1" "$h2" "$1" "$2"
}

# An Envoy bootstrap on stdout: one listener on 127.0.0.1:port routing everything to the
# cluster "upstream", with `route_extra` appended to its route (e.g. rate_limits),
# `filters` before the router (YAML list entries, each starting with a newline) and
# `clusters` (envoy_cluster entries).
envoy_yaml() {  # port, route_extra, filters, clusters
  cat <<YAML
admin: {address: {socket_address: {address: 127.0.0.1, port_value: 0}}}
static_resources:
  listeners:
  - name: ingress
    address: {socket_address: {address: 127.0.0.1, port_value: $1}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {prefix: "/"}
                route:
                  cluster: upstream$2
          http_filters:$3
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
$4
YAML
}

# Envoy's ratelimit filter (RLS, domain "bench", failing closed) asking the gRPC cluster
# `cluster`, as an http_filters entry for envoy_yaml.
envoy_ratelimit_filter() {  # cluster
  printf '%s' '
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: bench
              timeout: 5s
              failure_mode_deny: true
              rate_limit_service:
                transport_api_version: V3
                grpc_service: {envoy_grpc: {cluster_name: '"$1"'}}'
}
