// The native Redis module's argument parser and decisions (src/redis/module: request.h,
// engine.h), which run inside redis-server, where a crash takes Redis down. The input
// is the command's arguments after its name, one per line; an accepted request is then
// decided with each key's own bytes as the value it holds (every layout's decoder meets
// arbitrary bytes; a key of 4k bytes stands for an absent one), on the caller's now or a
// fixed one. A sliding log's or a permit set's sorted set is an in-memory one
// (FakeSets), empty at first.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz_util.h"
#include "redis/module/engine.h"
#include "redis/module/request.h"
#include "redis/module/sliding_log.h"

namespace {

using sluice::redis_module::SetReply;

// The sorted-set commands sliding_log.cc and permits.cc run, on sets in memory (by score,
// then member).
class FakeSets final : public sluice::redis_module::SortedSets {
 public:
  bool Run(const char* command, std::uint32_t key, std::span<const std::string_view> args,
           bool /*write*/, SetReply* out) override {
    out->integer = 0;
    out->items.clear();
    if (failed_) return false;
    std::vector<std::pair<double, std::string>>& z = sets_[key];
    const std::string cmd = command;
    const auto num = [](std::string_view s) {
      return std::strtod(std::string(s).c_str(), nullptr);
    };
    if (cmd == "ZRANGEBYSCORE" || cmd == "ZREMRANGEBYSCORE") {
      FUZZ_CHECK(args.size() == 2 && args[0] == "-inf");
      const double max = num(args[1]);
      const auto end =
          std::find_if(z.begin(), z.end(), [&](const auto& e) { return e.first > max; });
      if (cmd[1] == 'R') {
        for (auto it = z.begin(); it != end; ++it) out->items.push_back(it->second);
      } else {
        out->integer = end - z.begin();
        z.erase(z.begin(), end);
      }
    } else if (cmd == "ZRANGE") {
      FUZZ_CHECK(args.size() == 2 || (args.size() == 3 && args[2] == "WITHSCORES"));
      const long long n = static_cast<long long>(z.size());
      long long a = std::atoll(std::string(args[0]).c_str());
      long long b = std::atoll(std::string(args[1]).c_str());
      if (a < 0) a += n;
      if (b < 0) b += n;
      for (long long i = std::max(a, 0LL); i <= b && i < n; ++i) {
        out->items.push_back(z[static_cast<std::size_t>(i)].second);
        if (args.size() == 3) out->items.push_back(std::to_string(z[i].first));
      }
    } else if (cmd == "ZADD" && !args.empty() && args[0] == "XX") {
      // a permit's extend: XX INCR 0 (its score, or nothing), then XX <score>
      const bool incr = args.size() == 4 && args[1] == "INCR";
      FUZZ_CHECK(incr || args.size() == 3);
      const std::string_view member = args.back();
      const auto it =
          std::find_if(z.begin(), z.end(), [&](const auto& e) { return e.second == member; });
      if (it != z.end()) {
        if (incr) out->items.push_back(std::to_string(it->first));
        if (!incr) it->first = num(args[1]);
        std::sort(z.begin(), z.end());
      }
    } else if (cmd == "ZADD") {
      FUZZ_CHECK(!args.empty() && args.size() % 2 == 0);
      for (std::size_t i = 0; i < args.size(); i += 2) {
        Remove(z, args[i + 1]);
        z.emplace_back(num(args[i]), std::string(args[i + 1]));
      }
      std::sort(z.begin(), z.end());
    } else if (cmd == "ZREM") {
      FUZZ_CHECK(args.size() == 1);
      const std::size_t before = z.size();
      Remove(z, args[0]);
      out->integer = static_cast<long long>(before - z.size());
    } else if (cmd == "ZCARD") {
      out->integer = static_cast<long long>(z.size());
    } else if (cmd == "DEL") {
      z.clear();
    } else {
      FUZZ_CHECK(cmd == "PEXPIRE" && args.size() == 1 && num(args[0]) >= 1);
    }
    return true;
  }
  void Fail(std::string why) override {
    FUZZ_CHECK(!why.empty());
    failed_ = true;
  }

 private:
  static void Remove(std::vector<std::pair<double, std::string>>& z, std::string_view m) {
    z.erase(std::remove_if(z.begin(), z.end(), [&](const auto& e) { return e.second == m; }),
            z.end());
  }
  std::map<std::uint32_t, std::vector<std::pair<double, std::string>>> sets_;
  bool failed_ = false;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> args;
  while (args.size() < 10'000) {
    const std::size_t nl = text.find('\n');
    args.push_back(text.substr(0, nl));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  using namespace sluice::redis_module;
  // (kept across inputs, as the module keeps its request across calls)
  static ModuleRequest r;
  std::string error;
  if (!ParseModuleRequest(args, &r, &error)) {
    FUZZ_CHECK(!error.empty());
    return 0;
  }
  // The policies kept from earlier inputs (ParsePolicies' reuse) are those a fresh
  // request parses from these arguments.
  ModuleRequest fresh;
  FUZZ_CHECK(ParseModuleRequest(args, &fresh, &error));
  FUZZ_CHECK(fresh.policies.size() == r.policies.size());
  for (std::size_t i = 0; i < r.policies.size(); ++i) {
    const sluice::Policy &a = r.policies[i], &b = fresh.policies[i];
    FUZZ_CHECK(a.algorithm == b.algorithm && a.limit == b.limit && a.window == b.window &&
               a.burst == b.burst && a.initial_tokens == b.initial_tokens &&
               a.block_for == b.block_for && a.on_change == b.on_change && a.overage == b.overage &&
               a.max_debt == b.max_debt);
  }
  const std::size_t nkeys = ModuleKeyCount(args);
  FUZZ_CHECK(nkeys >= r.checks.size() && nkeys <= 4 * r.checks.size() && !r.groups.empty());
  // Every key is one check's, in order: its state key, then a sliding log's sorted set,
  // then its block key if it has one, then its usage record's if it has one.
  std::size_t next_key = 0;
  for (const ModuleCheck& c : r.checks) {
    FUZZ_CHECK(c.key == next_key++);
    FUZZ_CHECK((c.log_key >= 0) ==
               (r.policies[c.policy].algorithm == sluice::Algorithm::kSlidingWindowLog));
    if (c.log_key >= 0) FUZZ_CHECK(static_cast<std::size_t>(c.log_key) == next_key++);
    FUZZ_CHECK((c.block_key >= 0) == (r.policies[c.policy].block_for > 0));
    if (c.block_key >= 0) FUZZ_CHECK(static_cast<std::size_t>(c.block_key) == next_key++);
    FUZZ_CHECK((c.record_key >= 0) == (c.op == 8 || c.usage_ttl > 0));
    if (c.record_key >= 0) FUZZ_CHECK(static_cast<std::size_t>(c.record_key) == next_key++);
  }
  FUZZ_CHECK(next_key == nkeys);
  std::vector<long long> reply;
  std::vector<ModuleWrite> writes;
  FakeSets logs;
  for (const ModuleGroup& g : r.groups) {
    FUZZ_CHECK(g.begin < g.end && g.end <= r.checks.size() &&
               g.end - g.begin <= sluice::kMaxBatchChecks);
    StoredValue values[sluice::kMaxBatchChecks], blocks[sluice::kMaxBatchChecks];
    for (std::size_t i = g.begin; i < g.end; ++i) {
      const ModuleCheck& c = r.checks[i];
      const std::string_view key = args[1 + c.key];
      // (every packed layout is 1 + 8k bytes long, so it is always present)
      values[i - g.begin] = StoredValue{key.size() % 4 != 0, key};
      // A block key's name stands for its value too: a number, or not one.
      if (c.block_key >= 0) {
        const std::string_view b = args[1 + static_cast<std::size_t>(c.block_key)];
        blocks[i - g.begin] = StoredValue{b.size() % 3 != 0, b};
      }
    }
    const sluice::Micros now = r.caller_time ? r.checks[g.begin].now : 1'785'000'000'000'000;
    writes.clear();
    if (g.op == sluice::StoreOp::kSettle) {
      // A settle reads its record, here its key's name, as the module does: settled
      // when it is one, and then as of the state and block its check has.
      for (std::size_t i = g.begin; i < g.end; ++i) {
        const std::string_view name = args[1 + static_cast<std::size_t>(r.checks[i].record_key)];
        UsageRecord record;
        if (!ReadUsageRecord({true, name}, now, &record)) continue;
        FUZZ_CHECK(record.expires > now);
        SettleCheck(r, i, now, record, values[i - g.begin], blocks[i - g.begin], logs, &writes,
                    &reply);
      }
    } else {
      DecideGroup(r, g, now, {values, g.end - g.begin}, {blocks, g.end - g.begin}, logs, &writes,
                  &reply);
    }
    for (const ModuleWrite& w : writes) {
      FUZZ_CHECK(w.check >= g.begin && w.check < g.end);
      FUZZ_CHECK(w.ttl_ms >= 1 && w.value.size > 0);
      FUZZ_CHECK(w.to != WriteTo::kBlock || r.checks[w.check].block_key >= 0);
      FUZZ_CHECK(w.to != WriteTo::kRecord || r.checks[w.check].record_key >= 0);
    }
  }
  // (at most five numbers a check: a penalty that took units, a charge, a settle)
  FUZZ_CHECK(reply.size() <= 5 * r.checks.size());
  return 0;
}
