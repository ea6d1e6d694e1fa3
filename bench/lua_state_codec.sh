#!/usr/bin/env bash
# What reading and rewriting a short sliding log's state costs Redis's Lua, text against
# binary (docs/redis.md, "The sliding log's inline form"): one fresh redis-server, one
# EVAL per form that repeats --loops times what the lean sliding-log script does with a
# live inline log of --entries entries (lua/lean_sliding_log.lua): read the header, walk
# the entries to the first one still in the window, and build the state with one entry
# more. The text form is the one the inline form had first ("2 <expires> <last_seen>"
# then " <cost> <time>" per entry: string.match, string.gmatch, tonumber,
# string.format); the binary form is what the script writes (struct.unpack/pack of
# doubles). An empty loop is the floor. Each EVAL times itself with TIME; the median
# over --rounds is reported, in ns per state read and rewritten.
#
# Usage: bench/lua_state_codec.sh [--entries N] [--loops L] [--rounds R]
set -euo pipefail
cd "$(dirname "$0")/.."
entries=3
loops=100000
rounds=5
while [[ $# -gt 0 ]]; do
  case "$1" in
    --entries) entries=$2; shift 2 ;;
    --loops) loops=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "lua_state_codec.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
(( entries >= 1 && entries <= 8 )) || { echo "lua_state_codec.sh: --entries must be 1..8" >&2; exit 2; }
(( loops >= 1000 && loops <= 10000000 )) || { echo "lua_state_codec.sh: --loops must be 1000..10000000" >&2; exit 2; }
for tool in redis-server redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "lua_state_codec.sh: '$tool' is missing" >&2; exit 1; }
done

# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_init sluice-codec
start_redis
rcli() { redis-cli -h 127.0.0.1 -p "$rport" "$@"; }

# ARGV: form (empty, text, binary), loops, entries. Every entry is in the window (the
# common case: nothing dropped), cost 1, times 100 us apart.
cat > "$work/codec.lua" <<'EOF'
local form, n, k = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local fmt, max = string.format, math.max
local now, w = 1796434658821029, 1000000
local text, bin = '2 ' .. fmt('%d %d', now + w, now), struct.pack('<Bddd', 1, now + w, now, k)
for i = 1, k do
  text = text .. fmt(' 1 %d', now - 100 * (k - i))
  bin = bin .. struct.pack('<dd', 1, now - 100 * (k - i))
end
local t0 = redis.call('TIME')
local x = 0
for i = 1, n do
  local gnow = now + i
  if form == 'text' then
    local e, l, rest = string.match(text, '^2 (%S+) (%S+)(.*)$')
    local t = max(gnow, tonumber(l))
    local h, from, used = t - w, false, 0
    for at, c, ts in string.gmatch(rest, '() (%d+) (%d+)') do
      if from then
        used = used + tonumber(c)
      elseif tonumber(ts) > h then
        from, used = at, tonumber(c)
      end
    end
    local inl = from and string.sub(rest, from) or ''
    local st = fmt('%d', t)
    x = x + #('2 ' .. fmt('%d', t + w) .. ' ' .. st .. inl .. ' 1 ' .. st) + used
  elseif form == 'binary' then
    local _, e, l, used = struct.unpack('<Bddd', bin)
    local t = max(gnow, l)
    local h, from, len = t - w, 26, #bin
    while from < len do
      local c, ts = struct.unpack('<dd', bin, from)
      if ts > h then break end
      used, from = used - c, from + 16
    end
    local s = struct.pack('<Bddd', 1, t + w, t, used + 1) .. string.sub(bin, from) ..
      struct.pack('<dd', 1, t)
    x = x + #s
  else
    x = x + gnow
  end
end
local t1 = redis.call('TIME')
return fmt('%.1f', ((t1[1] - t0[1]) * 1e6 + (t1[2] - t0[2])) * 1000 / n)
EOF
sha=$(rcli script load "$(cat "$work/codec.lua")")
: > "$work/results.txt"
for round in $(seq "$rounds"); do
  for form in empty text binary; do
    echo "$form $(rcli evalsha "$sha" 0 "$form" "$loops" "$entries")" >> "$work/results.txt"
  done
done
echo "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg); $entries entries, $loops loops, median of $rounds rounds"
echo
python3 - "$work/results.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    form, ns = line.split()
    rows.setdefault(form, []).append(float(ns))
print("| state form | ns per read and rewrite (median) | rounds |")
print("|---|---:|---|")
for form in ("empty", "text", "binary"):
    v = rows[form]
    print(f"| {form} | {statistics.median(v):.0f} | {', '.join(f'{x:.0f}' for x in v)} |")
PY
