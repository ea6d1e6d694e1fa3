// The native module's arguments (module_wire.h; the layout: module/wire.h).
#include "redis/module_wire.h"

#include <algorithm>
#include <charconv>

#include "redis/module/wire.h"

namespace sluice::redis {
namespace {

constexpr std::size_t kPolicyNumbers = 5;  // algorithm, limit, window, capacity, initial
constexpr std::size_t kOnChange =
    5;  // CoalesceInfo::data's on_change (0 as_is, 1 reset, 2 proportional)
constexpr std::size_t kBlockFor = 6;  // and block_for

// "a,b,c": the integers joined by commas.
std::string Joined(const long long* v, std::size_t n) {
  std::string s;
  char buf[24];
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) s.push_back(',');
    const auto r = std::to_chars(buf, buf + sizeof(buf), v[i]);
    s.append(buf, r.ptr);
  }
  return s;
}

}  // namespace

bool ModuleDecides(const StoreCheck& c, WireKind k) {
  const Algorithm a = c.policy->algorithm;
  return a != Algorithm::kConcurrency && c.policy->overage == Overage::kReject &&
         c.usage_id.empty() &&
         (k == WireKind::kDecide || k == WireKind::kReserve || k == WireKind::kRefund ||
          k == WireKind::kForce);
}

std::size_t EncodeModuleArgv(bool caller_time, const std::vector<const CoalesceInfo*>& groups,
                             std::string& out) {
  // CoalesceInfo::data: the group's now, then kWireCheckNumbers per check: the policy's
  // algorithm, limit, window, capacity, initial tokens (its first five), then after
  // on_change and block_for the kind, the cost and max_wait.
  std::vector<const long long*> policies;
  std::vector<std::string> checks;
  for (const CoalesceInfo* g : groups) {
    const std::vector<long long>& d = g->data;
    const std::size_t n = (d.size() - 1) / kWireCheckNumbers;
    for (std::size_t i = 0; i < n; ++i) {
      const long long* p = d.data() + 1 + i * kWireCheckNumbers;
      std::size_t at = 0;
      while (at < policies.size() && !(std::equal(p, p + kPolicyNumbers, policies[at]) &&
                                       p[kOnChange] == policies[at][kOnChange] &&
                                       p[kBlockFor] == policies[at][kBlockFor])) {
        ++at;
      }
      if (at == policies.size()) policies.push_back(p);
      const bool reserve = p[7] == static_cast<long long>(WireKind::kReserve);
      const long long f[6] = {static_cast<long long>(at), p[7], p[8], reserve ? p[9] : 0,
                              i + 1 == n ? 1 : 0,         d[0]};
      checks.push_back(Joined(f, caller_time ? 6 : 5));
    }
  }
  AppendBulk(out, std::to_string(kModuleWireVersion));
  AppendBulk(out, caller_time ? "c" : "");
  AppendBulk(out, std::to_string(caller_time ? kCallerTimeTtlPadMs : 0));
  AppendBulk(out, std::to_string(policies.size()));
  for (const long long* p : policies) {
    std::string policy = Joined(p, kPolicyNumbers);
    if (p[kBlockFor] > 0 || p[kOnChange] != 0) policy += "," + std::to_string(p[kBlockFor]);
    if (p[kOnChange] != 0) policy += "," + std::to_string(p[kOnChange]);
    AppendBulk(out, policy);
  }
  for (const std::string& c : checks) AppendBulk(out, c);
  return 4 + policies.size() + checks.size();
}

std::string EncodeModuleCall(const std::string& script_wire, const CoalesceInfo& merge,
                             bool caller_time) {
  std::string argv;
  const std::size_t nargs = EncodeModuleArgv(caller_time, {&merge}, argv);
  std::string out;
  out.reserve(64 + (merge.keys_end - merge.keys_begin) + argv.size());
  out.push_back('*');
  out.append(std::to_string(2 + merge.nkeys + nargs));
  out.append("\r\n");
  AppendBulk(out, kModuleCommand);
  AppendBulk(out, std::to_string(merge.nkeys));
  out.append(script_wire, merge.keys_begin, merge.keys_end - merge.keys_begin);
  out.append(argv);
  return out;
}

}  // namespace sluice::redis
