#include "redis/cross_slot.h"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "redis/cluster_slots.h"

namespace sluice::redis {
namespace {

constexpr std::size_t kMaxChecks = kMaxBatchChecks;

struct Group {
  int slot = 0;
  std::vector<std::size_t> index;  // positions in the caller's batch
  std::vector<StoreCheck> checks;
  Status status;
  bool allowed = false;
};

// Owned copies of the keys, and the checks grouped by slot (pointing into them).
struct Grouped {
  std::vector<std::string> keys;
  std::vector<Group> groups;
};

void GroupBySlot(std::span<const StoreCheck> checks, Grouped& g) {
  g.keys.reserve(checks.size());  // no reallocation: the checks point into it
  for (std::size_t i = 0; i < checks.size(); ++i) {
    g.keys.emplace_back(checks[i].key);
    const int slot = KeySlot(g.keys.back());
    Group* group = nullptr;
    for (Group& existing : g.groups) {
      if (existing.slot == slot) group = &existing;
    }
    if (group == nullptr) {
      g.groups.emplace_back();
      group = &g.groups.back();
      group->slot = slot;
    }
    group->index.push_back(i);
    // The whole check (a reservation's max_wait and every other field), with the key
    // it owns.
    StoreCheck part = checks[i];
    part.key = g.keys.back();
    group->checks.push_back(part);
  }
}

// A check that keeps what it took when its batch is denied: its policy's overage
// charges (Policy::overage; a check that fits is charged its whole cost).
bool Charges(const StoreCheck& c) {
  return c.cost > 0 && c.policy->overage != Overage::kReject;
}

// The checks of a group that consumed something to give back (a peek consumes
// nothing; an overage check keeps it).
std::vector<StoreCheck> Consumed(const Group& g) {
  std::vector<StoreCheck> out;
  for (const StoreCheck& c : g.checks) {
    if (c.cost > 0 && !Charges(c)) out.push_back(c);
  }
  return out;
}

struct Reservation : Grouped {
  Deadline deadline;
  SlotRefund refund;
  EvaluateCallback done;
  std::mutex mu;
  std::size_t pending = 0;
  Decision decisions[kMaxChecks];
  std::size_t n = 0;
};

void Complete(const std::shared_ptr<Reservation>& r) {
  Status error;
  bool all_allowed = true;
  for (const Group& g : r->groups) {
    if (!g.status.ok() && error.ok()) error = g.status;
    all_allowed = all_allowed && g.status.ok() && g.allowed;
  }
  if (all_allowed) {
    r->done(Status::Ok(), std::span<const Decision>(r->decisions, r->n));
    return;
  }
  // Give back what the allowed slots took, then answer. Their overage checks keep
  // their cost, as one slot's denied batch charges them (denied, `charged`).
  std::vector<std::size_t> to_refund;
  for (std::size_t i = 0; i < r->groups.size(); ++i) {
    const Group& g = r->groups[i];
    for (std::size_t j = 0; g.status.ok() && g.allowed && j < g.checks.size(); ++j) {
      if (!Charges(g.checks[j])) continue;
      Decision& d = r->decisions[g.index[j]];
      d.allowed = false;
      d.charged = g.checks[j].cost;
    }
    if (g.status.ok() && g.allowed && !Consumed(g).empty()) to_refund.push_back(i);
  }
  auto finish = [r, error] {
    if (!error.ok()) {
      r->done(error, {});
    } else {
      r->done(Status::Ok(), std::span<const Decision>(r->decisions, r->n));
    }
  };
  if (to_refund.empty()) {
    finish();
    return;
  }
  // A refund that fails leaves the reservation taken: conservative, never over.
  struct Refunds {
    std::mutex mu;
    std::size_t pending;
    std::vector<std::vector<StoreCheck>> checks;
  };
  auto refunds = std::make_shared<Refunds>();
  refunds->pending = to_refund.size();
  for (std::size_t i : to_refund) refunds->checks.push_back(Consumed(r->groups[i]));
  for (std::size_t k = 0; k < to_refund.size(); ++k) {
    r->refund(refunds->checks[k], r->deadline, [refunds, finish](const Status&) {
      bool last;
      {
        std::lock_guard<std::mutex> lock(refunds->mu);
        last = --refunds->pending == 0;
      }
      if (last) finish();
    });
  }
}

}  // namespace

int CountSlots(std::span<const StoreCheck> checks) {
  if (checks.empty()) return 1;
  int slots[kMaxChecks];
  int n = 0;
  for (const StoreCheck& c : checks) {
    const int s = KeySlot(c.key);
    bool seen = false;
    for (int i = 0; i < n; ++i) seen = seen || slots[i] == s;
    if (!seen && n < static_cast<int>(kMaxChecks)) slots[n++] = s;
  }
  return n;
}

void EvaluateAcrossSlots(std::span<const StoreCheck> checks, Deadline deadline,
                         SlotEvaluate evaluate, SlotRefund refund, EvaluateCallback done) {
  if (checks.size() > kMaxChecks) {
    done(ValidateBatch(StoreBatch{.checks = checks}), {});
    return;
  }
  auto r = std::make_shared<Reservation>();
  GroupBySlot(checks, *r);
  r->deadline = deadline;
  r->refund = std::move(refund);
  r->done = std::move(done);
  r->n = checks.size();
  r->pending = r->groups.size();
  for (std::size_t gi = 0; gi < r->groups.size(); ++gi) {
    evaluate(r->groups[gi].checks, deadline,
             [r, gi](const Status& s, std::span<const Decision> decisions) {
               bool last;
               {
                 std::lock_guard<std::mutex> lock(r->mu);
                 Group& g = r->groups[gi];
                 g.status = s;
                 if (s.ok() && decisions.size() != g.checks.size()) {
                   g.status = Status::Internal("a slot answered the wrong number of decisions");
                 }
                 g.allowed = g.status.ok();
                 for (std::size_t j = 0; g.status.ok() && j < decisions.size(); ++j) {
                   r->decisions[g.index[j]] = decisions[j];  // a denied slot reports all
                   g.allowed = g.allowed && decisions[j].allowed;
                 }
                 last = --r->pending == 0;
               }
               if (last) Complete(r);
             });
  }
}

void RefundAcrossSlots(std::span<const StoreCheck> checks, Deadline deadline,
                       const SlotRefund& refund, RefundCallback done) {
  struct State : Grouped {
    std::mutex mu;
    std::size_t pending = 0;
    Status first_error;
    RefundCallback done;
  };
  auto st = std::make_shared<State>();
  GroupBySlot(checks, *st);
  st->pending = st->groups.size();
  st->done = std::move(done);
  if (st->groups.empty()) {
    st->done(Status::Ok());
    return;
  }
  for (const Group& g : st->groups) {
    refund(g.checks, deadline, [st](const Status& s) {
      bool last;
      {
        std::lock_guard<std::mutex> lock(st->mu);
        if (!s.ok() && st->first_error.ok()) st->first_error = s;
        last = --st->pending == 0;
      }
      if (last) st->done(st->first_error);
    });
  }
}

}  // namespace sluice::redis
