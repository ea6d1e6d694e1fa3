// Bytes of resident memory per live key: RSS before and after a Limiter (default
// MemoryStore) takes one request for each of N distinct caller keys of 16 bytes.
// The keys are generated into a stack buffer, so all key bytes counted are the
// store's own copies.
//
//   memory_per_key [algorithm] [keys]     (defaults: gcra 1000000)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench_util.h"
#include "sluice/key.h"

namespace {

long RssBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return -1;
  long size = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * sysconf(_SC_PAGESIZE) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sluice;
  const std::string algo_name = argc > 1 ? argv[1] : "gcra";
  const long n = argc > 2 ? std::atol(argv[2]) : 1'000'000;
  auto algo = ParseAlgorithm(algo_name);
  if (!algo.ok() || n <= 0) {
    std::fprintf(stderr, "usage: memory_per_key [algorithm] [keys>0]\n");
    return 2;
  }
  char buf[bench::kKeyLen];
  // Warm up allocator and thread-local buffers before the first reading.
  auto limiter = bench::MakeLimiter(*algo);
  (void)limiter->Acquire(bench::KeyAt(0, buf));
  (void)limiter->Reset(bench::KeyAt(0, buf));
  const long before = RssBytes();
  for (long i = 0; i < n; ++i) {
    auto d = limiter->Acquire(bench::KeyAt(static_cast<std::uint64_t>(i), buf));
    if (!d.ok() || !d->allowed) {
      std::fprintf(stderr, "key %ld: unexpected denial or error\n", i);
      return 1;
    }
  }
  const long after = RssBytes();
  const std::string store_key = StoreKey("sluice", bench::KeyAt(0, buf), "api").value();
  std::printf(
      "algorithm=%s keys=%ld caller_key_bytes=%zu store_key_bytes=%zu rss_before=%ld "
      "rss_after=%ld bytes_per_key=%.1f\n",
      AlgorithmName(*algo), n, bench::kKeyLen, store_key.size(), before, after,
      static_cast<double>(after - before) / static_cast<double>(n));
  return 0;
}
