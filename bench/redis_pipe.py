# The pipelining load client of bench/redis_floor.sh and bench/module_instructions.sh:
#   python3 bench/redis_pipe.py MODE PORT DECISIONS KEYS CALLERS SHA
# CALLERS connections to 127.0.0.1:PORT, each sending 16 decisions' commands at a time
# over KEYS random keys ("floor:{N}:x") and reading their replies, until DECISIONS in all.
# MODE: incr (INCR), envoy (INCRBY + EXPIRE 60), script (EVALSHA SHA of a one-key
# script), module:ALGORITHM[:N] (ONE SLUICE.DECIDE of 16, or N, one-check groups of
# `sluice bench`'s default policy, 1000/s, with ALGORITHM fixed_window, gcra,
# token_bucket or sliding_window_counter), single:ALGORITHM (16 pipelined
# SLUICE.DECIDE1, one check each: what uncoalesced calls cost, pipelined as the script
# rows are), or full:ALGORITHM (the same as 16 pipelined one-check SLUICE.DECIDE of
# layout 1, which every module reads: the call before SLUICE.DECIDE1). Any reply that is not an integer (or the module's array of integers) fails
# the run.
import asyncio, random, sys
mode, port, decisions, keys, callers, sha = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
# the module's policy argument: algorithm id, limit, window (us), capacity, initial tokens
POLICIES = {"fixed_window": b"0,1000,1000000,1000,-1", "sliding_window_counter": b"2,1000,1000000,1000,-1",
            "token_bucket": b"3,1000,1000000,1000,-1", "gcra": b"4,1000,1000000,1000,-1"}
parts = mode.split(":")
kind, algorithm = parts[0], parts[1] if len(parts) > 1 else ""
if kind in ("module", "single", "full") and algorithm not in POLICIES:
    sys.exit("redis_pipe.py: the module does not decide '%s'" % algorithm)
per = int(parts[2]) if kind == "module" and len(parts) > 2 else 16
def cmd(*a):
    out = [b"*%d\r\n" % len(a)]
    for x in a:
        x = x if isinstance(x, bytes) else str(x).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(x), x))
    return b"".join(out)
def decision(rng):
    k = b"floor:{%d}:x" % rng.randrange(keys)
    if mode == "incr":
        return cmd(b"INCR", k), 1
    if mode == "envoy":
        return cmd(b"INCRBY", k, 1) + cmd(b"EXPIRE", k, 60), 2
    if mode.startswith("single:"):  # (its reply: an array of one integer, two lines)
        return cmd(b"SLUICE.DECIDE1", k, POLICIES[algorithm], b"0,0,1,0,1"), 2
    if mode.startswith("full:"):
        return cmd(b"SLUICE.DECIDE", 1, k, 1, b"", 0, 1, POLICIES[algorithm], b"0,0,1,0,1"), 2
    return cmd(b"EVALSHA", sha, 1, k, 60), 1
left = decisions
async def caller(i):
    global left
    rng = random.Random(i)
    r, w = await asyncio.open_connection("127.0.0.1", port)
    while left > 0:
        n = min(per, left)
        left -= n
        wire, replies = [], 0
        if mode.startswith("module:"):
            ks = [b"floor:{%d}:x" % rng.randrange(keys) for _ in range(n)]
            wire.append(cmd(b"SLUICE.DECIDE", n, *ks, 1, b"", 0, 1, POLICIES[algorithm], *([b"0,0,1,0,1"] * n)))
            header = None
        for _ in range(0 if wire else n):
            c, k = decision(rng)
            wire.append(c)
            replies += k
        w.write(b"".join(wire))
        if not replies:
            header = await r.readline()
            if not header.startswith(b"*"):
                sys.exit("redis_floor.sh: %s: unexpected reply %r" % (mode, header))
            replies = int(header[1:])
        for _ in range(replies):
            line = await r.readline()
            if not line.startswith(b":") and line != b"*1\r\n":
                sys.exit("redis_floor.sh: %s: unexpected reply %r" % (mode, line))
    w.close()
async def main():
    await asyncio.gather(*(caller(i) for i in range(callers)))
asyncio.run(main())
