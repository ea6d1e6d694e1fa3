// `sluice bench`: the load tool. Flags, the progress line and the summary.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <sstream>

#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/store_flags.h"

namespace sluice::cli {
namespace {

constexpr const char* kBenchFooter =
    "Each caller issues its next decision as soon as its previous one completes. Against\n"
    "Redis (--api store, the default) the callers are outstanding RedisStore::RunAsync\n"
    "calls pipelined over --connections; with --api limiter (or memory://) each caller is a\n"
    "thread calling sluice::Limiter::Acquire (the deny cache then applies) or\n"
    "Store::Run. Keys are bench:000000000000 .. (--keys of them, chosen at random;\n"
    "--hot-key is --keys 1); the store key is <prefix>:{<key>}:<policy name>.\n"
    "\n"
    "A progress line goes to stderr every second; the summary to stdout (--json: one JSON\n"
    "object). Exit status: 0 done, 2 bad flags, 3 store error (cannot connect, or no\n"
    "decision succeeded). See docs/cli.md.";

std::string FormatLatency(std::uint64_t ns) {
  char buf[32];
  if (ns < 1'000'000) {
    std::snprintf(buf, sizeof(buf), "%.0fus", static_cast<double>(ns) / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.2fms", static_cast<double>(ns) / 1e6);
  }
  return buf;
}

// The URL without its password.
std::string Redact(const std::string& url) {
  const std::size_t scheme = url.find("://");
  const std::size_t at = url.find('@');
  if (scheme == std::string::npos || at == std::string::npos || at < scheme) return url;
  return url.substr(0, scheme + 3) + "***" + url.substr(at);
}

double Us(std::uint64_t ns) {
  return static_cast<double>(ns) / 1e3;
}

// The flags of `sluice bench` that are not BenchConfig fields or parsed in place.
struct BenchFlags {
  PolicyFlags pf;
  StoreFlags sf;
  BenchConfig config;
  std::string duration_text = "5s";
  std::string api = "store";
  std::string block_for_text;
  std::string on_change_text;
  std::string overage_text;
  std::string max_wait_text;
  bool hot_key = false;
  bool no_deny_cache = false;
  bool json = false;
  bool quiet = false;
};

// Declares every flag of `sluice bench` on `app`, into `f`.
void AddBenchFlags(CLI::App& app, BenchFlags& f) {
  AddPolicyFlags(app, f.pf, "the policy's rate (default 1000/s)");
  AddStoreFlags(app, f.sf);
  app.add_option("--connections", f.sf.connections, "Redis connections shared by the callers")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--coalesce", f.sf.coalesce,
                 "Redis: at most this many callers' decisions queued together share one "
                 "script call (1: one call per decision; docs/redis.md)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("-c,--concurrency", f.config.concurrency, "concurrent callers")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  auto* duration_opt =
      app.add_option("-d,--duration", f.duration_text, "how long to run")->capture_default_str();
  app.add_option("--requests", f.config.requests,
                 "stop after this many decisions instead of after --duration")
      ->check(AtLeastOne())
      ->excludes(duration_opt);
  app.add_option("-k,--keys", f.config.keys, "distinct caller keys, chosen at random")
      ->check(CLI::Range(std::uint64_t{1}, std::uint64_t{10'000'000}))
      ->capture_default_str();
  app.add_flag("--hot-key", f.hot_key, "every caller uses one key (same as --keys 1)");
  app.add_option("--cost", f.config.cost, "units each decision takes")
      ->check(AtLeastOne("a decision of cost 0 takes nothing"))
      ->capture_default_str();
  app.add_option("-p,--prefix", f.config.prefix, "key prefix")->capture_default_str();
  app.add_option("--api", f.api,
                 "store: RedisStore::RunAsync (Store::Run for memory://); limiter: "
                 "sluice::Limiter::Acquire from one thread per caller")
      ->check(CLI::IsMember({"store", "limiter"}))
      ->capture_default_str();
  app.add_flag("--no-deny-cache", f.no_deny_cache, "--api limiter: turn the local deny cache off");
  app.add_option("--target-rate", f.config.target_rate,
                 "decisions/s over all callers, paced (threads only: --api limiter or "
                 "memory://); default: as fast as possible")
      ->check(MoreThanZero());
  app.add_option("--block-for", f.block_for_text,
                 "the policy's block_for (e.g. 1m): once denied, a key stays denied that long "
                 "(Policy::block_for; on Redis its decisions run the batch script, or the "
                 "native module where it is loaded)");
  app.add_option("--on-change", f.on_change_text,
                 "the policy's on_change: as_is (default), reset or proportional (states are "
                 "then written with the policy's parameters; Policy::on_change)");
  app.add_option("--overage", f.overage_text,
                 "the policy's overage: reject (default), charge or drain (a denied decision "
                 "takes its cost into the key's debt, or what is left; Policy::overage)");
  app.add_option("--seed", f.config.seed, "random seed for key choice")->capture_default_str();
  app.add_option("--max-wait", f.max_wait_text,
                 "reservations: each decision may take budget up to this far ahead "
                 "(StoreCheck::max_wait; --api limiter: Limiter::Reserve, without waiting)");
  app.add_flag("--json", f.json, "print the summary as one JSON object");
  app.add_flag("-q,--quiet", f.quiet, "no progress line");
}

// Turns the flags into f.config (the store aside); a usage error's message, or "".
std::string ResolveBenchFlags(BenchFlags& f) {
  auto policy = BuildPolicy(f.pf, "1000/s");
  if (!policy.ok()) return policy.status().message();
  f.config.policy = *policy;
  if (!f.block_for_text.empty()) {
    auto b = ParsePositiveDuration("--block-for", f.block_for_text);
    if (!b.ok()) return b.status().message();
    f.config.policy.block_for = *b;
    if (Status s = ValidatePolicy(f.config.policy); !s.ok()) return "--block-for: " + s.message();
  }
  if (!f.on_change_text.empty()) {
    auto m = ParseOnChange(f.on_change_text);
    if (!m.ok()) return "--on-change: " + m.status().message();
    f.config.policy.on_change = *m;
    if (Status s = ValidatePolicy(f.config.policy); !s.ok()) return "--on-change: " + s.message();
  }
  if (!f.overage_text.empty()) {
    auto o = ParseOverage(f.overage_text);
    if (!o.ok()) return "--overage: " + o.status().message();
    f.config.policy.overage = *o;
    if (Status s = ValidatePolicy(f.config.policy); !s.ok()) return "--overage: " + s.message();
  }
  if (f.hot_key) f.config.keys = 1;
  f.config.api = f.api == "limiter" ? BenchApi::kLimiter : BenchApi::kStore;
  f.config.deny_cache = !f.no_deny_cache;
  if (f.config.requests == 0) {
    auto d = ParsePositiveDuration("--duration", f.duration_text);
    if (!d.ok()) return d.status().message();
    f.config.duration = *d;
  }
  if (!f.max_wait_text.empty()) {
    auto w = ParseDuration(f.max_wait_text);
    if (!w.ok()) return "--max-wait: " + w.status().message();
    f.config.max_wait = *w;
    if (f.config.max_wait != 0 && f.config.policy.overage != Overage::kReject) {
      return "--max-wait: a reservation that waits needs --overage reject";
    }
  }
  // (under an overage a cost may exceed the capacity: it is charged, never admitted)
  if (f.config.cost > f.config.policy.MaxCost()) {
    return "--cost " + std::to_string(f.config.cost) + " exceeds the policy's capacity " +
           std::to_string(f.config.policy.Capacity());
  }
  return "";
}

// The summary as one JSON object.
void WriteJsonSummary(std::ostream& out, const BenchFlags& f, const BenchResult& r,
                      const std::string& store_name) {
  const BenchConfig& config = f.config;
  const StoreFlags& sf = f.sf;
  const std::string& api = f.api;
  const Policy& p = config.policy;
  std::ostringstream j;
  j.setf(std::ios::fixed);
  j.precision(1);
  j << "{\"store\":" << JsonString(store_name) << ",\"api\":" << JsonString(api)
    << ",\"engine\":" << JsonString(r.engine) << ",\"connections\":" << sf.connections
    << ",\"coalesce\":" << sf.coalesce
    << ",\"algorithm\":" << JsonString(AlgorithmName(p.algorithm))
    << ",\"policy\":" << JsonString(p.name) << ",\"rate_limit\":" << p.limit
    << ",\"window_us\":" << p.window << ",\"capacity\":" << p.Capacity()
    << ",\"keys\":" << config.keys << ",\"concurrency\":" << config.concurrency
    << ",\"cost\":" << config.cost << ",\"max_wait_us\":" << config.max_wait;
  j.precision(3);
  j << ",\"elapsed_s\":" << r.elapsed_s;
  j.precision(1);
  j << ",\"decisions\":" << r.decisions << ",\"decisions_per_s\":" << r.rate()
    << ",\"allowed\":" << r.allowed << ",\"denied\":" << r.denied << ",\"errors\":{";
  for (int i = 1; i <= static_cast<int>(ErrorCode::kInternal); ++i) {
    j << (i > 1 ? "," : "") << JsonString(ErrorCodeName(static_cast<ErrorCode>(i))) << ":"
      << r.errors[static_cast<std::size_t>(i)];
  }
  j << "},\"error_total\":" << r.error_total << ",\"latency_us\":{\"p50\":" << Us(r.p50)
    << ",\"p90\":" << Us(r.p90) << ",\"p99\":" << Us(r.p99) << ",\"p999\":" << Us(r.p999)
    << ",\"max\":" << Us(r.max) << ",\"mean\":" << r.mean / 1e3 << "}";
  if (r.has_store_calls) j << ",\"store_calls\":" << r.store_calls;
  if (config.api == BenchApi::kLimiter) {
    j << ",\"deny_cache\":" << (config.deny_cache ? "true" : "false")
      << ",\"deny_cache_hits\":" << r.deny_cache_hits;
  }
  j << "}\n";
  out << j.str();
}

// The summary for people.
void WriteTextSummary(std::ostream& out, const BenchFlags& f, const BenchResult& r,
                      const std::string& store_name, const std::string& error_kinds) {
  const BenchConfig& config = f.config;
  const StoreFlags& sf = f.sf;
  const Policy& p = config.policy;
  char buf[512];
  std::ostringstream s;
  s << "store        " << store_name << " ("
    << (r.engine == "async"                ? "RedisStore::RunAsync"
        : config.api == BenchApi::kLimiter ? "Limiter::Acquire from threads"
                                           : "Store::Run from threads");
  if (config.redis)
    s << ", " << sf.connections << " connection" << (sf.connections > 1 ? "s" : "") << ", coalesce "
      << sf.coalesce;
  if (config.api == BenchApi::kLimiter) s << ", deny cache " << (config.deny_cache ? "on" : "off");
  s << ")\n";
  s << "policy       '" << p.name << "' " << AlgorithmName(p.algorithm) << " " << DescribeLimit(p)
    << ", cost " << config.cost << ", " << config.keys << (config.keys == 1 ? " key" : " keys");
  if (config.max_wait > 0) s << ", reservations up to " << config.max_wait << "us ahead";
  s << "\n";
  std::snprintf(buf, sizeof(buf), "callers      %d concurrent, %.2fs\n", config.concurrency,
                r.elapsed_s);
  s << buf;
  std::snprintf(buf, sizeof(buf), "decisions    %llu (%.0f/s)\n",
                static_cast<unsigned long long>(r.decisions), r.rate());
  s << buf;
  std::snprintf(buf, sizeof(buf), "allowed      %llu, denied %llu\n",
                static_cast<unsigned long long>(r.allowed),
                static_cast<unsigned long long>(r.denied));
  s << buf;
  s << "latency      p50 " << FormatLatency(r.p50) << ", p90 " << FormatLatency(r.p90) << ", p99 "
    << FormatLatency(r.p99) << ", p99.9 " << FormatLatency(r.p999) << ", max "
    << FormatLatency(r.max) << "\n";
  s << "errors       " << r.error_total;
  if (!error_kinds.empty()) s << " (" << error_kinds << ")";
  s << "\n";
  if (r.has_store_calls) s << "redis calls  " << r.store_calls << "\n";
  if (config.api == BenchApi::kLimiter) s << "deny cache   " << r.deny_cache_hits << " hits\n";
  out << s.str();
}

}  // namespace

int Bench(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  CLI::App app{
      "Issues decisions from N concurrent callers against a store and reports decisions/s,\n"
      "latency percentiles, allowed/denied and errors by kind.",
      "sluice bench"};
  app.footer(kBenchFooter);
  app.get_formatter()->column_width(30);
  BenchFlags f;
  f.pf.algorithm = "fixed_window";
  f.pf.policy_name = "bench";
  f.sf.timeout = "50ms";
  f.sf.connections = 2;
  AddBenchFlags(app, f);
  if (const int code = ParseFlags(app, args, "sluice bench", out, err); code >= 0) return code;
  const auto usage = [&](const std::string& message) {
    err << "sluice bench: " << message << "\n";
    return kExitUsage;
  };
  if (const std::string bad = ResolveBenchFlags(f); !bad.empty()) return usage(bad);
  BenchConfig& config = f.config;
  const StoreFlags& sf = f.sf;
  const bool quiet = f.quiet;

  bool usage_error = false;
  auto opened = OpenStoreFromFlags(sf, &usage_error);
  if (!opened.ok()) {
    if (usage_error) return usage(opened.status().message());
    err << "sluice bench: store error: " << opened.status().message() << "\n";
    return kExitStoreError;
  }
  config.store = opened->store;
  config.redis = opened->redis;

  const bool tty = isatty(STDERR_FILENO) != 0;
  auto progress = [&](const BenchProgress& p) {
    if (quiet) return;
    char line[256];
    const double denied_pct =
        p.decisions > 0 ? 100.0 * static_cast<double>(p.denied) / static_cast<double>(p.decisions)
                        : 0;
    std::snprintf(line, sizeof(line),
                  "%s[%5.1fs] %llu decisions, %.0f/s, p50 %s, p99 %s, denied %.1f%%, errors %llu",
                  tty ? "\r" : "", p.elapsed_s, static_cast<unsigned long long>(p.decisions),
                  p.interval_rate, FormatLatency(p.interval_p50).c_str(),
                  FormatLatency(p.interval_p99).c_str(), denied_pct,
                  static_cast<unsigned long long>(p.errors));
    err << line << (tty ? "   " : "\n") << std::flush;
  };
  auto result = RunBench(config, progress);
  if (tty && !quiet) err << "\n";
  if (!result.ok()) return usage(result.status().message());
  const BenchResult& r = *result;
  const std::string store_name = Redact(sf.url.empty() ? "memory://" : sf.url);
  std::string error_kinds;
  for (std::size_t i = 0; i < r.errors.size(); ++i) {
    if (r.errors[i] == 0) continue;
    if (!error_kinds.empty()) error_kinds += ", ";
    error_kinds +=
        std::string(ErrorCodeName(static_cast<ErrorCode>(i))) + " " + std::to_string(r.errors[i]);
  }
  if (f.json) {
    WriteJsonSummary(out, f, r, store_name);
  } else {
    WriteTextSummary(out, f, r, store_name, error_kinds);
  }
  if (r.decisions > 0 && r.error_total == r.decisions) {
    err << "sluice bench: store error: no decision succeeded (" << error_kinds << ")\n";
    return kExitStoreError;
  }
  return kExitOk;
}

int RunBenchCommand(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  return Bench(args, std::cout, std::cerr);
}

}  // namespace sluice::cli
