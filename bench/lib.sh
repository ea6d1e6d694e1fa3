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

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

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
