// sluiced_grpc_load: a load generator for rate limit services over gRPC: Envoy's rate limit
// API (sluiced, envoyproxy/ratelimit, limitador), sluiced's empty reference handler, and
// gubernator's GetRateLimits (one limit per call), so that every daemon gets the same load.
//
// Closed loop (default): keeps --concurrency calls in flight on --threads channels.
// Open loop (--rate R): sends R calls/s in total on a fixed schedule, whatever the answers
// do, and measures each call from the moment it was due (so a stalled server shows as
// latency, not as a lower offered load); --concurrency then caps the calls in flight.
// Both stop after --duration seconds or --requests calls, whichever comes first.
//
//   sluiced_grpc_load --target 127.0.0.1:8081 --domain bench --key remote_address
//                     --values 1000 --concurrency 32 --threads 2 --duration 10 [--rate 20000]
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "envoy/service/ratelimit/v3/rls.pb.h"

namespace pb = ::envoy::service::ratelimit::v3;
using Clock = std::chrono::steady_clock;

namespace {

enum class Protocol { kRls, kEmpty, kGubernator };

struct Options {
  std::string target = "127.0.0.1:8081", domain = "bench", key = "remote_address";
  std::string protocol = "rls", value_prefix = "v";
  int values = 1000, concurrency = 32, threads = 2;
  double duration = 10, rate = 0;
  long long requests = 0, gub_limit = 4000000000LL, gub_duration_ms = 1000;
};

const char* MethodOf(Protocol p) {
  switch (p) {
    case Protocol::kRls:
      return "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
    case Protocol::kEmpty:
      return "/sluice.bench.v1.Empty/ShouldRateLimit";
    case Protocol::kGubernator:
      return "/pb.gubernator.V1/GetRateLimits";
  }
  return "";
}

// --- just enough protobuf wire format for gubernator's messages (field numbers from its
// gubernator.proto: GetRateLimitsReq.requests = 1; RateLimitReq name = 1, unique_key = 2,
// hits = 3, limit = 4, duration = 5 (ms); GetRateLimitsResp.responses = 1;
// RateLimitResp.status = 1, OVER_LIMIT = 1; RateLimitResp.error = 5: an answer with an
// error is counted as an error, not as a decision).
void PutVarint(std::string* out, std::uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void PutBytes(std::string* out, int field, const std::string& s) {
  PutVarint(out, static_cast<std::uint64_t>(field) << 3 | 2);
  PutVarint(out, s.size());
  out->append(s);
}
void PutInt(std::string* out, int field, std::uint64_t v) {
  PutVarint(out, static_cast<std::uint64_t>(field) << 3);
  PutVarint(out, v);
}
bool GetVarint(const std::string& s, std::size_t* i, std::uint64_t* v) {
  *v = 0;
  for (int shift = 0; *i < s.size() && shift < 64; shift += 7) {
    const auto b = static_cast<unsigned char>(s[(*i)++]);
    *v |= static_cast<std::uint64_t>(b & 0x7f) << shift;
    if (b < 0x80) return true;
  }
  return false;
}
// The varint of field `field` in message `s`, or the bytes of a length-delimited one.
// Returns false if absent (proto3: the default) or malformed.
bool FindField(const std::string& s, int field, std::uint64_t* varint, std::string* bytes) {
  std::size_t i = 0;
  std::uint64_t tag = 0, v = 0;
  while (i < s.size() && GetVarint(s, &i, &tag)) {
    const int type = static_cast<int>(tag & 7);
    if (type == 0) {
      if (!GetVarint(s, &i, &v)) return false;
      if (static_cast<int>(tag >> 3) == field && varint) return *varint = v, true;
    } else if (type == 2) {
      if (!GetVarint(s, &i, &v) || v > s.size() - i) return false;
      if (static_cast<int>(tag >> 3) == field && bytes) return *bytes = s.substr(i, v), true;
      i += v;
    } else if (type == 1 || type == 5) {
      i += type == 1 ? 8 : 4;
    } else {
      return false;
    }
  }
  return false;
}

std::string GubernatorRequest(const Options& o, const std::string& value) {
  std::string req;
  PutBytes(&req, 1, o.domain + "_" + o.key);
  PutBytes(&req, 2, value);
  PutInt(&req, 3, 1);
  PutInt(&req, 4, static_cast<std::uint64_t>(o.gub_limit));
  PutInt(&req, 5, static_cast<std::uint64_t>(o.gub_duration_ms));
  std::string outer;
  PutBytes(&outer, 1, req);
  return outer;
}

// True if the answer says "over the limit"; false for allowed. Sets *bad on a reply that
// does not parse.
bool OverLimit(Protocol p, const std::string& reply, bool* bad) {
  std::uint64_t code = 0;
  if (p == Protocol::kGubernator) {
    std::string first;
    std::string error;
    if (!FindField(reply, 1, nullptr, &first)) return *bad = true, false;
    if (FindField(first, 5, nullptr, &error) && !error.empty()) {  // RateLimitResp.error
      static std::atomic<bool> said{false};
      if (!said.exchange(true)) std::fprintf(stderr, "grpc_load: gubernator: %s\n", error.c_str());
      return *bad = true, false;
    }
    FindField(first, 1, &code, nullptr);
    return code == 1;
  }
  pb::RateLimitResponse resp;
  if (!resp.ParseFromString(reply)) return *bad = true, false;
  return resp.overall_code() == pb::RateLimitResponse::OVER_LIMIT;
}

struct Call {
  grpc::ClientContext ctx;
  grpc::ByteBuffer reply;
  grpc::Status status;
  std::unique_ptr<grpc::GenericClientAsyncResponseReader> reader;
  Clock::time_point start;
};

struct Result {
  std::vector<std::uint32_t> latencies_us;
  std::uint64_t errors = 0, over_limit = 0, sent = 0;
};

struct Work {
  const Options* o;
  Protocol protocol;
  const std::vector<std::string>* requests;
  int inflight;      // closed loop: calls kept in flight; open loop: the cap
  double rate;       // this worker's calls/s; 0: closed loop
  long long budget;  // calls this worker may send; <0: unbounded
  Clock::time_point end;
  int seed;
};

void Worker(Work w, Result* out) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per worker
  auto channel = grpc::CreateCustomChannel(w.o->target, grpc::InsecureChannelCredentials(), args);
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  const std::string method = MethodOf(w.protocol);
  std::size_t next = static_cast<std::size_t>(w.seed) * 7919;
  auto launch = [&](Clock::time_point due) {
    auto* c = new Call();
    c->start = due;
    const auto& bytes = (*w.requests)[next++ % w.requests->size()];
    grpc::Slice slice(bytes);
    grpc::ByteBuffer buf(&slice, 1);
    c->reader = stub.PrepareUnaryCall(&c->ctx, method, buf, &cq);
    c->reader->StartCall();
    c->reader->Finish(&c->reply, &c->status, c);
    ++out->sent;
  };
  auto may_send = [&] { return w.budget < 0 || static_cast<long long>(out->sent) < w.budget; };
  const auto interval =
      w.rate > 0
          ? std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / w.rate))
          : Clock::duration::zero();
  auto due = Clock::now();
  int pending = 0;
  if (w.rate <= 0) {
    for (int i = 0; i < w.inflight && may_send(); ++i, ++pending) launch(Clock::now());
  }
  out->latencies_us.reserve(1 << 20);
  std::string reply;
  for (;;) {
    const auto now = Clock::now();
    const bool running = now < w.end && may_send();
    if (w.rate > 0 && running && now >= due && pending < w.inflight) {
      launch(due);
      ++pending;
      due += interval;
      continue;
    }
    if (pending == 0 && (!running || w.rate <= 0)) break;
    void* tag = nullptr;
    bool ok = false;
    const auto wake = w.rate > 0 && running && pending < w.inflight ? due : w.end;
    // gRPC takes system_clock deadlines; the schedule runs on steady_clock.
    const auto deadline =
        std::chrono::system_clock::now() +
        std::chrono::duration_cast<std::chrono::system_clock::duration>(std::max(wake, now) - now);
    const auto st =
        pending == 0 ? grpc::CompletionQueue::TIMEOUT : cq.AsyncNext(&tag, &ok, deadline);
    if (st == grpc::CompletionQueue::SHUTDOWN) break;
    if (st == grpc::CompletionQueue::TIMEOUT) {
      if (pending == 0 && w.rate > 0 && running) std::this_thread::sleep_until(due);
      continue;
    }
    auto* c = static_cast<Call*>(tag);
    const auto us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - c->start).count();
    bool bad = false;
    if (ok && c->status.ok()) {
      std::vector<grpc::Slice> slices;
      reply.clear();
      if (c->reply.Dump(&slices).ok()) {
        for (auto& s : slices) reply.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
      if (OverLimit(w.protocol, reply, &bad)) ++out->over_limit;
    }
    if (!ok || !c->status.ok() || bad) {
      ++out->errors;
    } else {
      out->latencies_us.push_back(static_cast<std::uint32_t>(us));
    }
    delete c;
    --pending;
    if (w.rate <= 0 && Clock::now() < w.end && may_send()) {
      launch(Clock::now());
      ++pending;
    }
  }
  cq.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  while (cq.Next(&tag, &ok)) {
  }
}

std::vector<std::string> Requests(const Options& o, Protocol p) {
  std::vector<std::string> out(o.values);
  for (int i = 0; i < o.values; ++i) {
    const std::string value = o.value_prefix + (o.values == 1 ? "hot" : std::to_string(i));
    if (p == Protocol::kGubernator) {
      out[i] = GubernatorRequest(o, value);
      continue;
    }
    pb::RateLimitRequest req;
    req.set_domain(o.domain);
    auto* e = req.add_descriptors()->add_entries();
    e->set_key(o.key);
    e->set_value(value);
    req.SerializeToString(&out[i]);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "gRPC load for rate limit services (Envoy RLS, sluiced's empty handler, gubernator)"};
  Options o;
  app.add_option("--target", o.target, "server gRPC address");
  app.add_option("--domain", o.domain, "domain of every request (gubernator: name prefix)");
  app.add_option("--key", o.key, "descriptor key");
  app.add_option("--values", o.values,
                 "distinct descriptor values (keys in the store): PREFIX0, PREFIX1, ...; 1: "
                 "the one value PREFIXhot");
  app.add_option("--value-prefix", o.value_prefix, "prefix of every descriptor value");
  app.add_option("--concurrency", o.concurrency,
                 "calls in flight in total (with --rate: the most in flight)");
  app.add_option("--threads", o.threads, "client threads (one channel each)");
  app.add_option("--duration", o.duration, "seconds, at most");
  app.add_option("--rate", o.rate,
                 "open loop: calls/s in total on a fixed schedule (0: closed loop)");
  app.add_option("--requests", o.requests, "calls in total, at most (0: no bound but --duration)");
  app.add_option("--protocol", o.protocol, "rls | empty (sluiced --bench-empty-grpc) | gubernator");
  app.add_option("--gubernator-limit", o.gub_limit, "gubernator: the limit each call carries");
  app.add_option("--gubernator-duration-ms", o.gub_duration_ms,
                 "gubernator: the window each call carries, ms");
  bool empty = false;
  app.add_flag("--empty", empty, "the same as --protocol empty");
  CLI11_PARSE(app, argc, argv);
  if (empty) o.protocol = "empty";
  const Protocol protocol = o.protocol == "gubernator" ? Protocol::kGubernator
                            : o.protocol == "empty"    ? Protocol::kEmpty
                                                       : Protocol::kRls;
  if (o.values < 1 || o.threads < 1 || o.concurrency < o.threads || o.duration <= 0 || o.rate < 0 ||
      o.requests < 0 ||
      (o.protocol != "rls" && o.protocol != "empty" && o.protocol != "gubernator")) {
    std::fprintf(stderr, "grpc_load: bad arguments\n");
    return 2;
  }
  const auto requests = Requests(o, protocol);
  std::vector<Result> results(o.threads);
  std::vector<std::thread> ts;
  const auto t0 = Clock::now();
  const auto end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.duration));
  for (int t = 0; t < o.threads; ++t) {
    Work w{&o,
           protocol,
           &requests,
           o.concurrency / o.threads + (t < o.concurrency % o.threads),
           o.rate / o.threads,
           -1,
           end,
           t};
    if (o.requests > 0) w.budget = o.requests / o.threads + (t < o.requests % o.threads);
    ts.emplace_back(Worker, w, &results[t]);
  }
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
      "decisions=%zu seconds=%.2f rate=%.0f p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f "
      "errors=%llu over_limit=%llu allowed=%llu offered=%.0f\n",
      all.size(), secs, all.size() / secs, pct(0.50), pct(0.99), pct(0.999),
      all.empty() ? 0.0 : all.back() / 1000.0, static_cast<unsigned long long>(errors),
      static_cast<unsigned long long>(over), static_cast<unsigned long long>(all.size() - over),
      o.rate);
  return errors == 0 ? 0 : 1;
}
