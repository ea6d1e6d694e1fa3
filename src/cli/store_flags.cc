#include "cli/store_flags.h"

#include <cstdio>
#include <iostream>

#include "cli/flags.h"
#include "core/utf8.h"
#include "sluice/memory_store.h"

namespace sluice::cli {

void AddPolicyFlags(CLI::App& app, PolicyFlags& flags, const std::string& rate_help) {
  app.add_option("-a,--algorithm", flags.algorithm,
                 "fixed_window, sliding_window_log, sliding_window_counter, token_bucket or "
                 "gcra (short: fixed, sliding_log, sliding_counter, bucket)")
      ->capture_default_str();
  app.add_option("-r,--rate", flags.rate, rate_help);
  // An explicit 0 would silently mean "the rate's count" (Policy::burst's default):
  // refuse it rather than let the typed value and the policy disagree.
  app.add_option("--burst", flags.burst,
                 "token bucket capacity / GCRA burst (default: the rate's count)")
      ->check(AtLeastOne("leave --burst out for the rate's count"));
  app.add_option("-n,--policy-name", flags.policy_name,
                 "the policy's name, as the application names it (it is part of the key)")
      ->capture_default_str();
}

Result<Policy> BuildPolicy(const PolicyFlags& flags, std::string_view default_rate) {
  auto algorithm = ParseAlgorithm(flags.algorithm);
  if (!algorithm.ok())
    return Status::InvalidArgument("--algorithm: " + algorithm.status().message());
  const std::string_view rate_text = flags.rate.empty() ? default_rate : flags.rate;
  if (rate_text.empty()) {
    return Status::InvalidArgument("--rate is required, e.g. --rate 100/min");
  }
  auto rate = ParseRate(rate_text);
  if (!rate.ok()) return Status::InvalidArgument("--rate: " + rate.status().message());
  Policy p;
  p.name = flags.policy_name;
  p.algorithm = *algorithm;
  p.limit = rate->limit;
  p.window = rate->window;
  p.burst = flags.burst;
  if (flags.burst != 0 && *algorithm != Algorithm::kTokenBucket && *algorithm != Algorithm::kGcra) {
    return Status::InvalidArgument("--burst applies to token_bucket and gcra only, not " +
                                   std::string(AlgorithmName(*algorithm)));
  }
  if (Status s = ValidatePolicy(p); !s.ok()) return s;
  return p;
}

void AddStoreFlags(CLI::App& app, StoreFlags& flags) {
  app.add_option("--redis,--store", flags.url,
                 "redis://[user:password@]host:port[/db], unix:///path/to/socket[?db=N], "
                 "redis-sentinel://host:port[,host:port]/MASTER[?sentinel_password=P], or "
                 "memory:// (a fresh in-process store)")
      ->capture_default_str();
  app.add_option("--timeout", flags.timeout, "deadline of each store call")->capture_default_str();
  app.add_option("--connect-timeout", flags.connect_timeout,
                 "bound on connecting (and AUTH, SELECT, SCRIPT LOAD)")
      ->capture_default_str();
}

Result<OpenedStore> OpenStoreFromFlags(const StoreFlags& flags, bool* usage_error) {
  *usage_error = true;
  auto timeout = ParsePositiveDuration("--timeout", flags.timeout);
  if (!timeout.ok()) return timeout.status();
  auto connect = ParsePositiveDuration("--connect-timeout", flags.connect_timeout);
  if (!connect.ok()) return connect.status();
  *usage_error = false;

  OpenedStore out;
  if (flags.url.empty() || flags.url == "memory://") {
    out.store = std::make_shared<MemoryStore>();
    return out;
  }
  // Every Redis form (redis://, rediss://, redis-cluster://, redis-sentinel://, ...)
  // goes to RedisStore, which names what is wrong with it.
  if (!flags.url.starts_with("redis") && !flags.url.starts_with("unix://")) {
    return Status::InvalidArgument("unknown store URL '" + flags.url +
                                   "' (expected redis://host:port[/db], rediss://, "
                                   "redis-cluster://, redis-sentinel://, unix:///path/to/socket "
                                   "or memory://)");
  }
  RedisStoreOptions o;
  o.url = flags.url;
  o.call_timeout = *timeout;
  o.connect_timeout = *connect;
  o.connections = flags.connections;
  o.coalesce = flags.coalesce;
  o.on_warning = [](std::string_view w) { std::cerr << "sluice: warning: " << w << "\n"; };
  auto redis = RedisStore::Create(std::move(o));
  if (!redis.ok()) return redis.status();
  out.redis = *redis;
  out.store = *redis;
  return out;
}

Result<Micros> ParsePositiveDuration(std::string_view flag, std::string_view text) {
  const auto not_positive = [&] {
    return Status::InvalidArgument(std::string(flag) + " must be more than 0, not '" +
                                   std::string(text) + "'");
  };
  std::string_view t = text;
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
  if (t.starts_with('-')) return not_positive();
  auto d = ParseDuration(text);
  if (d.ok()) {
    if (*d <= 0) return not_positive();
    return *d;
  }
  // A bare zero ("0", "00") needs no unit to be wrong.
  if (!t.empty() && t.find_first_not_of('0') == std::string_view::npos) return not_positive();
  return Status::InvalidArgument(std::string(flag) + ": " + d.status().message());
}

std::string FormatWait(Micros us) {
  char buf[64];
  if (us <= 0) return "0s";
  if (us < 1000) {
    std::snprintf(buf, sizeof(buf), "%lldus", static_cast<long long>(us));
  } else if (us < 1'000'000) {
    std::snprintf(buf, sizeof(buf), "%gms", static_cast<double>(us / 100) / 10.0);
  } else if (us < 60'000'000) {
    std::snprintf(buf, sizeof(buf), "%gs", static_cast<double>(us / 100'000) / 10.0);
  } else if (us < 3'600'000'000LL) {
    std::snprintf(buf, sizeof(buf), "%lldm %llds", static_cast<long long>(us / 60'000'000),
                  static_cast<long long>(us / 1'000'000 % 60));
  } else if (us < 86'400'000'000LL) {
    std::snprintf(buf, sizeof(buf), "%lldh %lldm", static_cast<long long>(us / 3'600'000'000LL),
                  static_cast<long long>(us / 60'000'000 % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lldd %lldh", static_cast<long long>(us / 86'400'000'000LL),
                  static_cast<long long>(us / 3'600'000'000LL % 24));
  }
  return buf;
}

namespace {
// A window as typed: 1m rather than 60s, 250ms rather than 0.25s.
std::string FormatWindow(Micros us) {
  struct U {
    Micros n;
    const char* s;
  };
  constexpr U units[] = {{86'400'000'000LL, "d"}, {3'600'000'000LL, "h"}, {60'000'000, "m"},
                         {1'000'000, "s"},        {1000, "ms"},           {1, "us"}};
  for (const U& u : units) {
    if (us % u.n == 0) return std::to_string(us / u.n) + u.s;
  }
  return std::to_string(us) + "us";
}
}  // namespace

std::string DescribeLimit(const Policy& p) {
  std::string s = std::to_string(p.limit) + " per " + FormatWindow(p.window);
  if ((p.algorithm == Algorithm::kTokenBucket || p.algorithm == Algorithm::kGcra) &&
      p.Capacity() != p.limit) {
    s += ", burst " + std::to_string(p.Capacity());
  }
  return s;
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const std::size_t n = core::Utf8SequenceLength(s.substr(i));
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    ++i;
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out += "\"";
  return out;
}

}  // namespace sluice::cli
