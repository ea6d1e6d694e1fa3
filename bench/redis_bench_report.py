#!/usr/bin/env python3
"""Renders the Markdown report of bench/redis_bench.sh from its JSON lines (one object per
measurement). Usage: redis_bench_report.py RESULTS.jsonl SECONDS KEYS RATE FLOOD_RATE FLOOD_FACTOR [ROUNDS]
A case measured in several rounds is shown by its median round (by throughput; by p99
for the paced latency case); ratios to rate-limiter-flexible are taken round by round
(the two measured minutes apart at most) and their median shown.
"""
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
seconds, keys, rate, flood_rate, flood_factor = sys.argv[2:7]
nrounds = int(sys.argv[7]) if len(sys.argv) > 7 else 1
runs = {}  # case -> its rows, round by round
for r in rows:
    runs.setdefault(r["case"], []).append(r)
def median_row(rs, key):
    return sorted(rs, key=key)[(len(rs) - 1) // 2]
by = {c: median_row(rs, (lambda r: r["latency_us"]["p99"]) if c.startswith("paced:")
                    else (lambda r: r["decisions_per_s"])) for c, rs in runs.items()}
def rlf_in_round(i):
    v = [runs[c][i]["decisions_per_s"] for c in ("rlf", "rlf:autopipelining")
         if c in runs and len(runs[c]) > i]
    return max(v) if v else None
def vs_rlf(case):  # median over rounds of sluice / the better rate-limiter-flexible mode
    q = [r["decisions_per_s"] / rlf_in_round(i) for i, r in enumerate(runs.get(case, []))
         if rlf_in_round(i)]
    return statistics.median(q) if q else None
def rps(c): return by[c]["decisions_per_s"] if c in by else None
def fmt(x): return "n/a" if x is None else f"{x:,.0f}"
def ms(us): return "n/a" if us is None else f"{us/1000:.2f}"
def usc(r): return f"{r['redis_usec_per_call']:.1f}" if "redis_usec_per_call" in r else "n/a"
# Redis server CPU time per call (all of it: network, parsing, execution): unlike
# throughput and usec_per_call, time other processes take from Redis does not count.
def cpu(r): return f"{1e6 * r['redis_cpu_s'] / r['redis_calls']:.1f}" if r.get("redis_calls") else "n/a"
def cpu_per(r, what):
    v = r.get(what)
    return "n/a" if v is None or not r.get("decisions") else f"{1e6 * v / r['decisions']:.1f}"
incr = rps("incr")
rlf_cases = [c for c in ("rlf", "rlf:autopipelining") if c in by]
rlf = max([rps(c) for c in rlf_cases], default=None)
print(f"One redis-server, one run: 64 concurrent callers, {keys} keys chosen at random, "
      f"{rate} per key, {seconds} s per measurement, {nrounds} round(s) of (b), (c) and (e) "
      "interleaved (median round shown; ratios to rate-limiter-flexible: median of the "
      "rounds' ratios); redis-benchmark with 64 clients at "
      "pipeline 16. 'Redis CPU us/call' is the redis-server process's CPU time (user + "
      "system, from /proc) over the calls it served; 'exec' is Redis's own timing of the "
      "command (INFO commandstats usec_per_call), which also counts time Redis spent "
      "preempted mid-command.\n")
print(f"Plain INCR at pipeline 16: **{fmt(incr)}/s**, Redis CPU {cpu(by['incr'])} us/call "
      f"(exec {usc(by['incr'])}); an empty script (EVALSHA of `return 1`): "
      f"{fmt(rps('empty_script'))}/s, Redis CPU {cpu(by['empty_script'])} us/call "
      f"(exec {usc(by['empty_script'])}).\n")
def per_decision(r, what):  # Redis-side totals over the decisions made
    if what == "calls":
        return f"{r['redis_calls'] / r['decisions']:.3f}" if r.get("redis_calls") and r.get("decisions") else "n/a"
    return f"{1e6 * r['redis_cpu_s'] / r['decisions']:.1f}" if r.get("decisions") else "n/a"
print("| algorithm | (a) ceiling: redis-benchmark EVALSHA, P16 | Redis CPU (exec) us/call | "
      "script / INCR | (b) sluice bench | sluice / ceiling | sluice p50 / p99 ms | "
      "Redis calls / decision | Redis CPU us/decision | sluice client CPU us/decision | "
      "sluice / rate-limiter-flexible |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
algs = [c.split(":", 1)[1] for c in by if c.startswith("sluice:")]
for alg in algs:
    ceil, s = by.get("ceiling:" + alg), by["sluice:" + alg]
    lat = s["latency_us"]
    errors = f" ({s['error_total']} errors)" if s["error_total"] else ""
    print(f"| {alg} | {fmt(ceil['decisions_per_s'])}/s | {cpu(ceil)} ({usc(ceil)}) | "
          f"{100 * ceil['decisions_per_s'] / incr:.1f}% | {fmt(s['decisions_per_s'])}/s{errors} | "
          f"{100 * s['decisions_per_s'] / ceil['decisions_per_s']:.0f}% | "
          f"{ms(lat['p50'])} / {ms(lat['p99'])} | {per_decision(s, 'calls')} | "
          f"{per_decision(s, 'cpu')} | {cpu_per(s, 'client_cpu_s')} | "
          + (f"**{vs_rlf('sluice:' + alg):.2f}x** |" if rlf else "n/a |"))
print()
def cells(c):  # one (b) case's columns, from its median round
    r = by[c]
    lat = r["latency_us"]
    errors = f" ({r['error_total']} errors)" if r["error_total"] else ""
    return (f"{fmt(r['decisions_per_s'])}/s{errors} | {ms(lat['p50'])} / {ms(lat['p99'])} | "
            f"{per_decision(r, 'calls')} | {per_decision(r, 'cpu')} | "
            f"{cpu_per(r, 'client_cpu_s')} | " + (f"{vs_rlf(c):.2f}x |" if rlf else "n/a |"))
if any("sluice-nc:" + a in by for a in algs):
    print("(b) coalesced calls (`--coalesce 32`, the default) against one script call per "
          "decision (`--coalesce 1`, as before coalescing), same run:\n")
    print("| algorithm | coalescing | sluice bench | p50 / p99 ms | Redis calls / decision | "
          "Redis CPU us/decision | client CPU us/decision | / rate-limiter-flexible |")
    print("|---|---|---|---|---|---|---|---|")
    for alg in algs:
        for label, c in (("on", "sluice:" + alg), ("off", "sluice-nc:" + alg)):
            if c in by:
                print(f"| {alg} | {label} | " + cells(c))
    print()
if any("sluice-module:" + a in by for a in algs):
    print("(b) on the native module (`SLUICE.DECIDE`, loaded into the same redis-server; "
          "coalesced as by default), same run; Redis calls are `SLUICE.DECIDE` calls:\n")
    print("| algorithm | sluice bench | p50 / p99 ms | Redis calls / decision | "
          "Redis CPU us/decision | client CPU us/decision | / rate-limiter-flexible |")
    print("|---|---|---|---|---|---|---|")
    for alg in algs:
        if "sluice-module:" + alg in by:
            print(f"| {alg} | " + cells("sluice-module:" + alg))
    print()
for c in rlf_cases:
    r = by[c]
    label = "ioredis enableAutoPipelining" if "auto" in c else "ioredis defaults"
    print(f"(c) rate-limiter-flexible@11 RateLimiterRedis + ioredis@5 ({label}), 1000 points "
          f"per 1 s, 64 concurrent callers: **{fmt(r['decisions_per_s'])}/s**, p50 "
          f"{ms(r['latency_us']['p50'])} ms, p99 {ms(r['latency_us']['p99'])} ms, "
          f"{r['errors']} errors; its script: Redis CPU {cpu(r)} us/call (exec {usc(r)}); "
          "node client CPU "
          f"{cpu_per(r, 'client_cpu_s')} us/decision.  ")
if not rlf_cases:
    print("(c) rate-limiter-flexible: not run (node/npm missing or npm install failed).")
print()
paced = [c for c in ("paced:32", "paced:1") if c in by]
if paced:
    r0 = by[paced[0]]
    print(f"(e) Latency at one offered load: fixed_window, {r0['concurrency']} threads through "
          "sluice::Limiter (deny cache off), paced to the same total rate:\n")
    print("| coalescing | decisions/s | p50 ms | p90 ms | p99 ms (median round) | p99.9 ms | "
          "p99 ms of each round | Redis calls / decision | errors |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c in paced:
        r = by[c]
        lat = r["latency_us"]
        each = ", ".join(ms(x["latency_us"]["p99"]) for x in runs[c])
        print(f"| {'on (32)' if c.endswith(':32') else 'off (1)'} | {fmt(r['decisions_per_s'])} | "
              f"{ms(lat['p50'])} | {ms(lat['p90'])} | {ms(lat['p99'])} | {ms(lat['p999'])} | "
              f"{each} | {per_decision(r, 'calls')} | {r['error_total']} |")
    print()
print(f"(d) One key flooded at {flood_factor}x its limit ({flood_rate}/s; "
      f"{int(flood_rate) * int(flood_factor)} decisions/s offered by 8 threads through "
      "sluice::Limiter, paced):\n")
print("| algorithm | deny cache | decisions | allowed | Redis calls (EVALSHA) | calls per decision | deny-cache hits |")
print("|---|---|---|---|---|---|---|")
for alg in ("fixed_window", "token_bucket"):
    for cache in ("off", "on"):
        c = f"flood:{alg}:{cache}"
        if c not in by: continue
        r = by[c]
        print(f"| {alg} | {cache} | {r['decisions']:,} | {r['allowed']:,} | {r['store_calls']:,} | "
              f"{r['store_calls'] / max(1, r['decisions']):.3f} | {r['deny_cache_hits']:,} |")
