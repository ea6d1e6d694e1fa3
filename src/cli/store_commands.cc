// `sluice check`, `sluice peek`, `sluice reset`: what would this key get now?
//
// They go through the same sluice::Limiter an application uses, so the store key
// ("<prefix>:{<escaped key>}:<policy name>") is the one the application's requests
// touch. Store errors are reported (exit 3), never turned into a fail-open answer.
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/store_flags.h"
#include "cli/store_wrappers.h"
#include "sluice/key.h"
#include "sluice/limiter.h"

namespace sluice::cli {
namespace {

enum class Mode { kCheck, kPeek, kReset };

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kCheck:
      return "check";
    case Mode::kPeek:
      return "peek";
    case Mode::kReset:
      return "reset";
  }
  return "?";
}

constexpr const char* kStoreFooter =
    "Exit status: 0 allowed (reset: done), 1 denied (check, peek), 2 bad flags,\n"
    "3 store error (bad URL, connection refused, wrong password, timeout).\n"
    "The store key is <prefix>:{<key, escaped>}:<policy name>, exactly as the application's\n"
    "sluice::Limiter builds it: give the same --prefix, --policy-name, --algorithm and --rate\n"
    "as the application's policy. See docs/cli.md.";

// The decision of a check or a peek: one JSON object, or a line of text.
void PrintDecision(std::ostream& out, Mode mode, bool json, const std::string& key,
                   const std::string& store_key, const Policy& p, std::uint64_t cost,
                   const Decision& d) {
  if (json) {
    out << "{\"command\":" << JsonString(ModeName(mode))
        << ",\"allowed\":" << (d.allowed ? "true" : "false") << ",\"key\":" << JsonString(key)
        << ",\"store_key\":" << JsonString(store_key) << ",\"policy\":" << JsonString(p.name)
        << ",\"algorithm\":" << JsonString(AlgorithmName(p.algorithm))
        << ",\"rate_limit\":" << p.limit << ",\"window_us\":" << p.window
        << ",\"cost\":" << (mode == Mode::kCheck ? cost : 0) << ",\"limit\":" << d.limit
        << ",\"remaining\":" << d.remaining << ",\"reset_after_us\":" << d.reset_after
        << ",\"retry_after_us\":" << d.retry_after
        << ",\"source\":" << JsonString(DecisionSourceName(d.source)) << "}\n";
  } else {
    std::ostringstream line;
    if (mode == Mode::kCheck) {
      line << (d.allowed ? "allowed" : "denied");
    } else {
      line << (d.allowed ? "would allow" : "would deny");
    }
    line << ": " << d.remaining << " of " << d.limit << " left";
    if (!d.allowed) line << "; retry in " << FormatWait(d.retry_after);
    line << (d.allowed ? "; " : ", ");
    line << (d.reset_after > 0 ? "full again in " + FormatWait(d.reset_after) : "full");
    line << "  (" << store_key << ", " << AlgorithmName(p.algorithm) << " " << DescribeLimit(p)
         << ")\n";
    out << line.str();
  }
}

int Run(Mode mode, const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const std::string name = std::string("sluice ") + ModeName(mode);
  const char* what =
      mode == Mode::kCheck  ? "Takes --cost units for --key now and prints the decision."
      : mode == Mode::kPeek ? "Prints what a request of cost 1 for --key would get now, "
                              "without consuming anything."
                            : "Forgets --key under the policy: its full limit is "
                              "available again.";
  CLI::App app{what, name};
  app.footer(kStoreFooter);
  app.get_formatter()->column_width(30);

  PolicyFlags pf;
  StoreFlags sf;
  std::string key;
  std::string prefix = "sluice";
  std::uint64_t cost = 1;
  bool json = false;
  app.add_option("-k,--key", key, "the caller's key, e.g. user:42 (required)")->required();
  AddPolicyFlags(app, pf,
                 mode == Mode::kReset
                     ? "the policy's rate (not needed to reset)"
                     : "the policy's rate, e.g. 100/min, 10/s, 0.5/s, 5/10s (required)");
  if (mode == Mode::kCheck) {
    app.add_option("-c,--cost", cost, "units this request takes")
        ->check(AtLeastOne("a check of cost 0 takes nothing; use 'sluice peek' to look"))
        ->capture_default_str();
  }
  app.add_option("-p,--prefix", prefix, "key prefix, as LimiterOptions::key_prefix")
      ->capture_default_str();
  AddStoreFlags(app, sf);
  app.add_flag("--json", json, "print one JSON object instead of a line of text");

  if (const int code = ParseFlags(app, args, name, out, err); code >= 0) return code;
  const auto usage = [&](const std::string& message) {
    err << name << ": " << message << "\n";
    return kExitUsage;
  };

  auto policy = BuildPolicy(pf, mode == Mode::kReset ? "1/s" : "");
  if (!policy.ok()) return usage(policy.status().message());
  auto store_key = StoreKey(prefix, key, policy->name);
  if (!store_key.ok()) return usage("--key: " + store_key.status().message());

  const auto store_error = [&](const Status& s) {
    err << name << ": store error: " << s.message() << "\n";
    if (json) {
      out << "{\"command\":" << JsonString(ModeName(mode))
          << ",\"error\":{\"kind\":" << JsonString(ErrorCodeName(s.code()))
          << ",\"message\":" << JsonString(s.message()) << "}}\n";
    }
    return kExitStoreError;
  };
  bool usage_error = false;
  auto opened = OpenStoreFromFlags(sf, &usage_error);
  if (!opened.ok()) {
    if (usage_error) return usage(opened.status().message());
    return store_error(opened.status());
  }
  auto recording = std::make_shared<RecordingStore>(opened->store);

  LimiterOptions lo;
  lo.policies = {*policy};
  lo.store = recording;
  lo.key_prefix = prefix;
  lo.deny_cache = false;  // one call: the store must answer it
  auto limiter = Limiter::Create(std::move(lo));
  if (!limiter.ok()) return usage(limiter.status().message());

  const Policy& p = *policy;
  if (mode == Mode::kReset) {
    Status s = (*limiter)->Reset(key);
    if (!s.ok()) return store_error(s);
    if (json) {
      out << "{\"command\":\"reset\",\"key\":" << JsonString(key)
          << ",\"store_key\":" << JsonString(*store_key) << ",\"policy\":" << JsonString(p.name)
          << ",\"algorithm\":" << JsonString(AlgorithmName(p.algorithm)) << "}\n";
    } else {
      out << "reset: " << *store_key << " deleted; its full limit is available again\n";
    }
    return kExitOk;
  }

  auto d = mode == Mode::kCheck ? (*limiter)->Acquire(key, cost) : (*limiter)->Peek(key);
  if (!recording->error().ok()) return store_error(recording->error());
  if (!d.ok()) {
    if (d.status().code() == ErrorCode::kInvalidArgument) return usage(d.status().message());
    return store_error(d.status());
  }
  PrintDecision(out, mode, json, key, *store_key, p, cost, *d);
  return d->allowed ? kExitOk : kExitDenied;
}

int RunMode(Mode mode, int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  return Run(mode, args, std::cout, std::cerr);
}

}  // namespace

int RunCheck(int argc, char** argv) {
  return RunMode(Mode::kCheck, argc, argv);
}
int RunPeek(int argc, char** argv) {
  return RunMode(Mode::kPeek, argc, argv);
}
int RunReset(int argc, char** argv) {
  return RunMode(Mode::kReset, argc, argv);
}

}  // namespace sluice::cli
