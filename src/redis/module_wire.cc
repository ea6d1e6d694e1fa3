// The native module's arguments (module_wire.h; the layout: module/wire.h).
#include "redis/module_wire.h"

#include <algorithm>
#include <array>
#include <charconv>

#include "redis/module/wire.h"

namespace sluice::redis {
namespace {

// Appends the integers joined by commas as ONE bulk argument, with ":" and `permit`
// after them when `colon`, formatted on the stack (every check of every merged call
// comes through here, on the connection's I/O thread).
void AppendJoined(std::string& out, const long long* v, std::size_t n, bool colon = false,
                  std::string_view permit = {}) {
  char buf[24 * 9 + 1 + 64];  // (at most 9 numbers, then a permit id: 32 characters)
  char* p = buf;
  for (std::size_t i = 0; i < n; ++i) {
    if (i > 0) *p++ = ',';
    p = std::to_chars(p, buf + 24 * 9, v[i]).ptr;
  }
  const std::string_view numbers(buf, static_cast<std::size_t>(p - buf));
  if (!colon) {
    AppendBulk(out, numbers);
  } else if (permit.size() < 64) {
    *p++ = ':';
    p = std::copy(permit.begin(), permit.end(), p);
    AppendBulk(out, std::string_view(buf, static_cast<std::size_t>(p - buf)));
  } else {  // (not an id the stores accept: sent as it is, for the module to refuse)
    AppendBulk(out, std::string(numbers).append(":").append(permit));
  }
}

// The module's arguments after the keys for `groups`; without `head`, only the
// policies and the checks (SLUICE.DECIDE1's).
std::size_t AppendModuleArgv(bool caller_time, std::span<const CoalesceInfo* const> groups,
                             std::string& out, bool head = true) {
  // A policy's numbers on the wire: the first five of CoalesceInfo::data's (algorithm,
  // limit, window, capacity, initial tokens), its block_for and on_change, then its
  // overage and max_debt.
  using PolicyNumbers = std::array<long long, 9>;
  std::vector<PolicyNumbers> policies;
  std::vector<std::uint32_t> index;  // each check's policy, check after check
  for (const CoalesceInfo* g : groups) {
    // CoalesceInfo::data: the group's now, then kWireCheckNumbers per check
    // (script_wire.h, WireCheckNumber).
    const std::vector<long long>& d = g->data;
    for (std::size_t at = 1; at + kWireCheckNumbers <= d.size(); at += kWireCheckNumbers) {
      const long long* p = d.data() + at;
      PolicyNumbers pn{p[kWireAlgorithm],
                       p[kWireLimit],
                       p[kWireWindow],
                       p[kWireCapacity],
                       p[kWireInitial],
                       p[kWireBlockFor],
                       p[kWireOnChange],
                       0,
                       0};
      // The bound is the capacity under drain, capacity + max debt under charge
      // (core::OverageBound; a max_debt of 0 is the capacity: the same bound).
      const long long bound = p[kWireOverageBound], cap = p[kWireCapacity];
      if (bound > 0) {
        pn[7] = static_cast<long long>(bound > cap ? Overage::kCharge : Overage::kDrain);
        pn[8] = bound > cap ? bound - cap : 0;
      }
      const auto i = static_cast<std::size_t>(std::find(policies.begin(), policies.end(), pn) -
                                              policies.begin());
      if (i == policies.size()) policies.push_back(pn);
      index.push_back(static_cast<std::uint32_t>(i));
    }
  }
  if (head) {
    AppendBulk(out, std::to_string(kModuleWireVersion));
    AppendBulk(out, caller_time ? "c" : "");
    AppendBulk(out, std::to_string(caller_time ? kCallerTimeTtlPadMs : 0));
    AppendBulk(out, std::to_string(policies.size()));
  }
  for (const PolicyNumbers& p : policies) {
    // (the tail only as long as the policy needs: block_for, on_change, overage)
    AppendJoined(out, p.data(), p[7] != 0 ? 9 : p[6] != 0 ? 7 : p[5] > 0 ? 6 : 5);
  }
  std::size_t check = 0;
  for (const CoalesceInfo* g : groups) {
    const std::vector<long long>& d = g->data;
    const std::size_t n = (d.size() - 1) / kWireCheckNumbers;
    for (std::size_t i = 0; i < n; ++i) {
      const long long* p = d.data() + 1 + i * kWireCheckNumbers;
      // (the fourth number: a reservation's max_wait, or a usage record's lifetime)
      const auto kind = static_cast<WireKind>(p[kWireKind]);
      const long long fourth = kind == WireKind::kReserve   ? p[kWireMaxWait]
                               : kind == WireKind::kOverage ? p[kWireUsageTtl]
                                                            : 0;
      const long long f[6] = {index[check++], p[kWireKind],       p[kWireCost],
                              fourth,         i + 1 == n ? 1 : 0, d[0]};
      // (a permit's operation: its id after a colon)
      const bool permit =
          kind == WireKind::kAcquire || kind == WireKind::kRelease || kind == WireKind::kExtend;
      AppendJoined(out, f, caller_time ? 6 : 5, permit,
                   i < g->ids.size() ? std::string_view(g->ids[i]) : std::string_view());
    }
  }
  return (head ? 4 : 0) + policies.size() + check;
}
}  // namespace

std::size_t EncodeModuleArgv(bool caller_time, const std::vector<const CoalesceInfo*>& groups,
                             std::string& out) {
  return AppendModuleArgv(caller_time, groups, out);
}

bool ModuleDecides(const StoreCheck& /*c*/, WireKind k) {
  return k == WireKind::kDecide || k == WireKind::kReserve || k == WireKind::kRefund ||
         k == WireKind::kForce || k == WireKind::kAcquire || k == WireKind::kRelease ||
         k == WireKind::kExtend || k == WireKind::kOverage || k == WireKind::kSettle;
}

std::string EncodeModuleCall(const std::string& script_wire, const CoalesceInfo& merge,
                             bool caller_time) {
  std::string argv;
  const CoalesceInfo* const group = &merge;
  // One check with one key on the server's clock: SLUICE.DECIDE1 (module/wire.h), its
  // key, its policy and the check.
  const bool single =
      !caller_time && merge.nkeys == 1 && merge.data.size() == 1 + kWireCheckNumbers;
  const std::size_t nargs = AppendModuleArgv(caller_time, {&group, 1}, argv, !single);
  std::string out;
  if (single) {
    out.reserve(32 + (merge.keys_end - merge.keys_begin) + argv.size());
    out.append("*4\r\n");
    AppendBulk(out, kModuleSingleCommand);
    out.append(script_wire, merge.keys_begin, merge.keys_end - merge.keys_begin);
    out.append(argv);
    return out;
  }
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
