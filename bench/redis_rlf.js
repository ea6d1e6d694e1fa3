// The peer for bench/redis_bench.sh: rate-limiter-flexible's RateLimiterRedis over
// ioredis, driven like `sluice bench`: N concurrent callers (async loops in one
// process), each issuing its next consume() as soon as the previous one settles, over
// K random keys, for a duration. Prints one JSON object.
//
//   NODE_PATH=TMP/node_modules node bench/redis_rlf.js --port P --points 1000 \
//       --duration-s 1 --concurrency 64 --seconds 5 --keys 10000 [--auto-pipelining]
'use strict';
const { RateLimiterRedis } = require('rate-limiter-flexible');
const Redis = require('ioredis');

function flag(name, def) {
  const i = process.argv.indexOf('--' + name);
  if (i < 0) return def;
  if (typeof def === 'boolean') return true;
  return Number(process.argv[i + 1]);
}

async function main() {
  const port = flag('port', 6379);
  const points = flag('points', 1000);
  const duration = flag('duration-s', 1);
  const concurrency = flag('concurrency', 64);
  const seconds = flag('seconds', 5);
  const keys = flag('keys', 10000);
  const autoPipelining = flag('auto-pipelining', false);

  const redis = new Redis({ host: '127.0.0.1', port, enableAutoPipelining: autoPipelining,
                            maxRetriesPerRequest: 1 });
  const limiter = new RateLimiterRedis({ storeClient: redis, points, duration,
                                         keyPrefix: 'rlf' });
  // Warm up: the first call loads the script.
  await limiter.consume('warmup').catch(() => {});

  const lat = [];
  let allowed = 0, denied = 0, errors = 0;
  let stop = false;
  const key = () => 'bench:' + String(Math.floor(Math.random() * keys)).padStart(12, '0');
  async function caller() {
    while (!stop) {
      const t0 = process.hrtime.bigint();
      try {
        await limiter.consume(key(), 1);
        allowed++;
      } catch (e) {
        if (e instanceof Error) errors++; else denied++;
      }
      lat.push(Number(process.hrtime.bigint() - t0));
    }
  }
  const start = process.hrtime.bigint();
  const timer = setTimeout(() => { stop = true; }, seconds * 1000);
  await Promise.all(Array.from({ length: concurrency }, caller));
  clearTimeout(timer);
  const elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  lat.sort((a, b) => a - b);
  const q = (p) => lat.length ? lat[Math.min(lat.length - 1, Math.floor(p * lat.length))] / 1e3 : 0;
  const decisions = allowed + denied + errors;
  console.log(JSON.stringify({
    peer: 'rate-limiter-flexible RateLimiterRedis + ioredis',
    auto_pipelining: autoPipelining, concurrency, keys, elapsed_s: elapsed, decisions,
    decisions_per_s: decisions / elapsed, allowed, denied, errors,
    latency_us: { p50: q(0.5), p90: q(0.9), p99: q(0.99), max: q(1) },
  }));
  redis.disconnect();
}

main().catch((e) => { console.error('redis_rlf.js: ' + e.message); process.exit(3); });
