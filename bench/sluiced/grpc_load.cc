// sluiced_grpc_load: a closed-loop load generator for Envoy's rate limit gRPC API.
// Keeps --concurrency calls in flight on --threads async channels for --duration
// seconds and reports decisions/s and latency percentiles.
//
//   sluiced_grpc_load --target 127.0.0.1:8081 --domain bench --key remote_address
//                     --values 1000 --concurrency 32 --threads 2 --duration 10
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "sluice/bench/v1/empty.grpc.pb.h"

namespace pb = ::envoy::service::ratelimit::v3;
using Clock = std::chrono::steady_clock;

namespace {

struct Call {
  grpc::ClientContext ctx;
  pb::RateLimitResponse resp;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<pb::RateLimitResponse>> reader;
  Clock::time_point start;
};

struct Result {
  std::vector<std::uint32_t> latencies_us;
  std::uint64_t errors = 0, over_limit = 0;
};

void Worker(const std::string& target, const std::vector<pb::RateLimitRequest>& requests,
            int inflight, const std::atomic<bool>& stop, Result* out, int seed, bool empty) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per worker
  auto channel = grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  auto stub = pb::RateLimitService::NewStub(channel);
  auto empty_stub = ::sluice::bench::v1::Empty::NewStub(channel);
  grpc::CompletionQueue cq;
  std::size_t next = static_cast<std::size_t>(seed) * 7919;
  auto launch = [&] {
    auto* c = new Call();
    c->start = Clock::now();
    const auto& req = requests[next++ % requests.size()];
    c->reader = empty ? empty_stub->AsyncShouldRateLimit(&c->ctx, req, &cq)
                      : stub->AsyncShouldRateLimit(&c->ctx, req, &cq);
    c->reader->Finish(&c->resp, &c->status, c);
  };
  for (int i = 0; i < inflight; ++i) launch();
  int pending = inflight;
  out->latencies_us.reserve(1 << 20);
  void* tag = nullptr;
  bool ok = false;
  while (pending > 0 && cq.Next(&tag, &ok)) {
    auto* c = static_cast<Call*>(tag);
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - c->start).count();
    if (!ok || !c->status.ok()) {
      ++out->errors;
    } else {
      out->latencies_us.push_back(static_cast<std::uint32_t>(us));
      if (c->resp.overall_code() == pb::RateLimitResponse::OVER_LIMIT) ++out->over_limit;
    }
    delete c;
    --pending;
    if (!stop.load(std::memory_order_relaxed)) {
      launch();
      ++pending;
    }
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Closed-loop gRPC load for envoy.service.ratelimit.v3.RateLimitService"};
  std::string target = "127.0.0.1:8081", domain = "bench", key = "remote_address";
  int values = 1000, concurrency = 32, threads = 2;
  double duration = 10;
  app.add_option("--target", target, "sluiced gRPC address");
  app.add_option("--domain", domain, "domain of every request");
  app.add_option("--key", key, "descriptor key");
  app.add_option("--values", values, "distinct descriptor values (keys in the store)");
  app.add_option("--concurrency", concurrency, "calls in flight in total");
  app.add_option("--threads", threads, "client threads (one channel each)");
  app.add_option("--duration", duration, "seconds");
  bool empty = false;
  app.add_flag("--empty", empty,
               "call sluice.bench.v1.Empty (sluiced --bench-empty-grpc): gRPC without a decision, "
               "the reference");
  CLI11_PARSE(app, argc, argv);
  if (values < 1 || threads < 1 || concurrency < threads || duration <= 0) {
    std::fprintf(stderr, "grpc_load: bad arguments\n");
    return 2;
  }
  std::vector<pb::RateLimitRequest> requests(values);
  for (int i = 0; i < values; ++i) {
    requests[i].set_domain(domain);
    auto* e = requests[i].add_descriptors()->add_entries();
    e->set_key(key);
    e->set_value("v" + std::to_string(i));
  }
  std::atomic<bool> stop{false};
  std::vector<Result> results(threads);
  std::vector<std::thread> ts;
  const auto t0 = Clock::now();
  for (int t = 0; t < threads; ++t) {
    const int inflight = concurrency / threads + (t < concurrency % threads ? 1 : 0);
    ts.emplace_back(Worker, target, std::cref(requests), inflight, std::cref(stop), &results[t], t,
                    empty);
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(duration));
  stop = true;
  for (auto& t : ts) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<std::uint32_t> all;
  std::uint64_t errors = 0, over = 0;
  for (auto& r : results) {
    all.insert(all.end(), r.latencies_us.begin(), r.latencies_us.end());
    errors += r.errors;
    over += r.over_limit;
  }
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) {
    return all.empty()
               ? 0.0
               : all[std::min(all.size() - 1, static_cast<std::size_t>(p * all.size()))] / 1000.0;
  };
  std::printf(
      "decisions=%zu seconds=%.2f rate=%.0f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f errors=%llu "
      "over_limit=%llu\n",
      all.size(), secs, all.size() / secs, pct(0.50), pct(0.99),
      all.empty() ? 0.0 : all.back() / 1000.0, static_cast<unsigned long long>(errors),
      static_cast<unsigned long long>(over));
  return errors == 0 ? 0 : 1;
}
