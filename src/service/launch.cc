// sluiced's launch flags: environment variables, the password file, --version and
// --check-config.
#include "service/launch.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "service/config.h"
#include "service/engine.h"
#include "sluice/memory_store.h"
#include "sluice_version.h"
#ifdef SLUICED_HAVE_REDIS
#include "redis/url.h"
#endif

namespace sluice::service {
namespace {

constexpr std::size_t kMaxSecretBytes = 64 * 1024;

bool IsMemory(const std::string& url) {
  return url.empty() || url == "memory://";
}

std::string PercentEncode(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

// The store URL for messages: never the password.
std::string DescribeStore(const std::string& url) {
  if (IsMemory(url)) return "memory:// (embedded, not shared between instances)";
#ifdef SLUICED_HAVE_REDIS
  auto u = redis::ParseUrl(url);
  if (u.ok()) return u->Describe() + (u->password.empty() ? "" : " (with password)");
#endif
  return "(unparsable URL)";
}

// A duration in the largest unit that holds it exactly: "15m", "50ms", "1500us".
std::string Duration(Micros us) {
  static constexpr struct {
    Micros micros;
    const char* name;
  } kUnits[] = {{86'400'000'000, "d"},
                {3'600'000'000, "h"},
                {60'000'000, "m"},
                {1'000'000, "s"},
                {1'000, "ms"}};
  for (const auto& u : kUnits) {
    if (us != 0 && us % u.micros == 0) return std::to_string(us / u.micros) + u.name;
  }
  return std::to_string(us) + "us";
}

std::string Rate(const RateLimitSpec& r) {
  if (r.unlimited) return "unlimited";
  std::string s;
  if (r.concurrency != 0) {
    // --- concurrency limits (issue #12) ---
    s = std::to_string(r.concurrency) + " in flight, lease " + Duration(r.permit_lease) + " " +
        FailureModeName(r.failure_mode);
  } else {
    s = std::to_string(r.requests_per_unit) + "/" +
        (r.unit_multiplier == 1
             ? std::string(UnitName(r.unit))
             : "(" + std::to_string(r.unit_multiplier) + " " + UnitName(r.unit) + ")") +
        " " + AlgorithmName(r.algorithm);
    if (r.burst != 0) s += " burst " + std::to_string(r.burst);
    s += std::string(" ") + FailureModeName(r.failure_mode);
  }
  // Everything else that changes what the limit does: blocks, carry-over, hot-key leases.
  if (r.block_for != 0) s += " block_for " + Duration(r.block_for);
  if (r.on_change) s += std::string(" on_change ") + OnChangeName(*r.on_change);
  if (r.lease != 0) {
    s += " lease " + std::to_string(r.lease) +
         (r.lease_validity != 0 ? " (valid " + Duration(r.lease_validity) + ")" : "");
  }
  if (!r.policy.empty()) s += " policy=" + r.policy;
  if (!r.name.empty()) s += " name=" + r.name;
  return s;
}

// One line per descriptor that carries a limit: the path of entries that reaches it.
void PrintRules(std::FILE* out, const std::vector<DescriptorSpec>& ds, const std::string& prefix,
                std::size_t* rules) {
  for (const DescriptorSpec& d : ds) {
    const std::string path =
        prefix + (prefix.empty() ? "" : ", ") + d.key + (d.has_value ? "=" + d.value : "");
    if (d.has_rate_limit) {
      ++*rules;
      std::fprintf(out, "    [%s] -> %s%s (line %d)\n", path.c_str(), Rate(d.rate_limit).c_str(),
                   d.shadow_mode ? " shadow" : "", d.line);
    }
    // rate_limits: every limit on its own line, numbered as in /rlconfig and metrics.
    for (std::size_t j = 0; j < d.rate_limits.size(); ++j) {
      ++*rules;
      std::fprintf(out, "    [%s] #%zu of %zu -> %s%s (line %d)\n", path.c_str(), j + 1,
                   d.rate_limits.size(), Rate(d.rate_limits[j]).c_str(),
                   d.shadow_mode ? " shadow" : "", d.rate_limits[j].line);
    }
    PrintRules(out, d.descriptors, path, rules);
  }
}

}  // namespace

std::string EnvName(std::string_view long_flag) {
  while (!long_flag.empty() && long_flag.front() == '-') long_flag.remove_prefix(1);
  std::string env = "SLUICED_";
  for (char c : long_flag) {
    env.push_back(c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  }
  return env;
}

Result<std::string> ReadSecretFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::InvalidArgument("password file '" + path +
                                   "': cannot open: " + std::strerror(errno));
  }
  std::string text;
  char buf[4096];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxSecretBytes) {
      return Status::InvalidArgument("password file '" + path + "': larger than 64 KiB");
    }
  }
  if (in.bad()) {
    return Status::InvalidArgument("password file '" + path + "': read error");
  }
  if (text.ends_with("\r\n")) {
    text.resize(text.size() - 2);
  } else if (text.ends_with("\n")) {
    text.pop_back();
  }
  if (text.empty()) return Status::InvalidArgument("password file '" + path + "': empty");
  return text;
}

Result<std::string> WithRedisPassword(const std::string& url, const std::string& password) {
  if (IsMemory(url)) {
    return Status::InvalidArgument(
        "a Redis password file was given but the store is memory:// (set --redis, "
        "SLUICED_REDIS or sluiced.redis to a redis:// URL)");
  }
  const std::size_t scheme = url.find("://");
  if (url.starts_with("unix://") || scheme == std::string::npos) {
    return Status::InvalidArgument(
        "a Redis password file was given but the store URL is not a redis:// URL (unix:// "
        "sockets take no password here)");
  }
  const std::string head = url.substr(0, scheme + 3);
  std::string rest = url.substr(scheme + 3);
  std::string user;
  const std::size_t at = rest.rfind('@');
  if (at != std::string::npos) {
    const std::string cred = rest.substr(0, at);
    const std::size_t colon = cred.find(':');
    // "user:pass@" keeps the user; a bare "token@" is a password (as redis-cli reads it).
    if (colon != std::string::npos) user = cred.substr(0, colon);
    rest = rest.substr(at + 1);
  }
  return head + user + ":" + PercentEncode(password) + "@" + rest;
}

Status ApplyRedisPasswordFile(const std::string& path, DaemonOptions& options) {
  auto password = ReadSecretFile(path);
  if (!password.ok()) return password.status();
  std::string url;
  if (options.redis) {
    url = *options.redis;
  } else {
    auto config = LoadConfig(options.config_file);
    // Startup (or --check-config) reports this error with FILE:LINE.
    if (!config.ok()) return Status::Ok();
    url = config->settings.redis;
  }
  auto with = WithRedisPassword(url, *password);
  if (!with.ok()) return with.status();
  options.redis = std::move(*with);
  return Status::Ok();
}

int CheckConfig(const DaemonOptions& options, const std::string& password_file, std::FILE* out,
                std::FILE* err) {
  auto fail = [&](const Status& s) {
    std::fprintf(err, "sluiced: %s\n", s.message().c_str());
    return 1;
  };
  // The same steps, in the same order, as Daemon::Start.
  for (const auto* a : {&options.http, &options.grpc}) {
    if (*a) {
      if (Status s = ValidateListenAddress(**a); !s.ok()) return fail(s);
    }
  }
  auto config = LoadConfig(options.config_file);
  if (!config.ok()) return fail(config.status());
  Settings& s = config->settings;
  if (options.http) s.http = *options.http;
  if (options.grpc) s.grpc = *options.grpc;
  if (options.redis) s.redis = *options.redis;
  if (!IsMemory(s.redis)) {
#ifdef SLUICED_HAVE_REDIS
    // Parsed, not contacted: a deploy pipeline may not reach production Redis.
    if (auto u = redis::ParseUrl(s.redis); !u.ok()) return fail(u.status());
#else
    if (auto st = OpenServiceStore(s.redis); !st.ok()) return fail(st.status());
#endif
  }
  // Compiling every limit into policies catches what parsing alone cannot.
  auto engine =
      Engine::Create(*config, Engine::Options{std::make_shared<MemoryStore>(), options.clock});
  if (!engine.ok()) return fail(engine.status());

  std::fprintf(out, "%s: OK\n", options.config_file.c_str());
  std::fprintf(out, "  http: %s\n  grpc: %s\n  store: %s\n", s.http.c_str(), s.grpc.c_str(),
               DescribeStore(s.redis).c_str());
  if (!password_file.empty()) {
    std::fprintf(out, "  redis password: from %s\n", password_file.c_str());
  }
  std::fprintf(out, "  default algorithm: %s, failure mode: %s%s\n",
               AlgorithmName(s.default_algorithm), FailureModeName(s.default_failure_mode),
               s.shadow_mode ? ", shadow mode (never denies)" : "");
  std::size_t total = 0;
  for (const DomainSpec& d : config->domains) {
    std::size_t rules = 0;
    std::fprintf(out, "  domain %s (line %d):\n", d.domain.c_str(), d.line);
    PrintRules(out, d.descriptors, "", &rules);
    if (rules == 0) std::fprintf(out, "    (no limits)\n");
    total += rules;
  }
  std::fprintf(out, "%zu domain(s), %zu limit(s)\n", config->domains.size(), total);
  return 0;
}

bool NotifyServiceManager(std::string_view state) {
  const char* where = std::getenv("NOTIFY_SOCKET");
  if (where == nullptr || where[0] == '\0') return true;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::size_t len = std::strlen(where);
  if ((where[0] != '/' && where[0] != '@') || len >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, where, len);
  if (where[0] == '@') addr.sun_path[0] = '\0';  // abstract namespace
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const socklen_t addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len);
  const ssize_t n = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                             reinterpret_cast<const sockaddr*>(&addr), addr_len);
  ::close(fd);
  return n == static_cast<ssize_t>(state.size());
}

std::unique_ptr<Launch> Launch::Attach(CLI::App& app, int argc, char** argv) {
  std::unique_ptr<Launch> l(new Launch());
  for (int i = 1; i < argc; ++i) l->argv_.emplace_back(argv[i]);
  Launch* self = l.get();
  app.add_flag("--version", l->version_, "print the version and exit");
  app.add_option("--check-config", l->check_config_,
                 "validate FILE as startup and reload do, print what it holds, exit 0 (valid) "
                 "or 1 (FILE:LINE: why); binds nothing, contacts no Redis")
      ->type_name("FILE");
  app.add_option("--redis-password-file", l->password_file_,
                 "read the Redis password from FILE (one line) instead of the URL, so it stays "
                 "out of process listings and unit files")
      ->type_name("FILE");
  // Just before parsing, when main() has declared every flag (before or after Attach).
  app.preparse_callback([&app](std::size_t) {
    for (CLI::Option* opt : app.get_options()) {
      const auto& names = opt->get_lnames();
      if (names.empty()) continue;
      const std::string& n = names.front();
      if (n == "help" || n == "version" || n == "check-config") continue;
      if (opt->get_envname().empty()) opt->envname(EnvName(n));
    }
    // --config is required unless --check-config names the file; checked after parsing.
    if (CLI::Option* c = app.get_option_no_throw("--config")) c->required(false);
  });
  app.parse_complete_callback([self, &app] { self->Validate(app); });
  // A command-line error may come from a variable set long ago in a unit or an
  // EnvironmentFile: name the variables that supplied values (not their values, which
  // may be secrets).
  app.failure_message([self](const CLI::App* a, const CLI::Error& e) {
    std::string msg = CLI::FailureMessage::simple(a, e);
    std::string from_env;
    for (const CLI::Option* opt : a->get_options()) {
      const std::string& env = opt->get_envname();
      const char* v = env.empty() ? nullptr : std::getenv(env.c_str());
      if (v == nullptr || v[0] == '\0') continue;
      if (self->Source(opt->get_lnames().empty()
                           ? std::vector<std::string>{}
                           : std::vector<std::string>{"--" + opt->get_lnames().front()},
                       env) != env) {
        continue;  // the flag was given: the variable was not used
      }
      from_env += (from_env.empty() ? "" : ", ") + env;
    }
    if (!from_env.empty()) msg += "Values from the environment: " + from_env + "\n";
    return msg;
  });
  return l;
}

void Launch::Validate(CLI::App& app) {
  if (version_) throw CLI::CallForVersion("sluiced " SLUICE_VERSION, 0);
  CLI::Option* config = app.get_option_no_throw("--config");
  if (config && config->count() == 0 && check_config_.empty()) {
    throw CLI::RequiredError("--config (or SLUICED_CONFIG)");
  }
  config_flag_ = Source({"-c", "--config"}, "") != "";
  if (!password_file_.empty()) {
    password_file_source_ = Source({"--redis-password-file"}, "SLUICED_REDIS_PASSWORD_FILE");
  }
  // Listen addresses from the environment: name the variable, not a flag never given.
  for (const char* flag : {"--http", "--grpc"}) {
    CLI::Option* o = app.get_option_no_throw(flag);
    if (!o || o->count() == 0) continue;
    const std::string value = o->as<std::string>();
    if (Status s = ValidateListenAddress(value); !s.ok()) {
      throw CLI::ValidationError(Source({flag}, EnvName(flag)), s.message());
    }
  }
}

std::string Launch::Source(const std::vector<std::string>& names, const std::string& env) const {
  for (const std::string& a : argv_) {
    for (const std::string& n : names) {
      if (a == n || a.starts_with(n + "=")) return n;
    }
  }
  return env;
}

int Launch::Finish(DaemonOptions& options) {
  if (!check_config_.empty()) {
    // SLUICED_CONFIG (say from /etc/default/sluiced) yields to --check-config's file; a
    // --config flag naming another file is a mistake worth saying.
    if (config_flag_ && options.config_file != check_config_) {
      std::fprintf(stderr,
                   "sluiced: --check-config %s and --config %s name different files; give "
                   "one\n",
                   check_config_.c_str(), options.config_file.c_str());
      return 1;
    }
    options.config_file = check_config_;
  }
  if (!password_file_.empty()) {
    if (Status s = ApplyRedisPasswordFile(password_file_, options); !s.ok()) {
      std::fprintf(stderr, "sluiced: %s: %s\n", password_file_source_.c_str(), s.message().c_str());
      return 1;
    }
  }
  if (!check_config_.empty()) {
    return CheckConfig(options, password_file_.empty() ? "" : password_file_, stdout, stderr);
  }
  return -1;
}

}  // namespace sluice::service
