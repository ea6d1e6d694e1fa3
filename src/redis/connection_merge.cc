// Connection's coalescing (connection.h, "Coalescing"): which queued calls merge, their
// merged wire, group commit (Hold) and the split of a merged call's reply.
#include <algorithm>

#include "redis/connection.h"
#include "redis/module/wire.h"

namespace sluice::redis {

bool Connection::Mergeable(const Queued& q) {
  return q.coalesce.target != nullptr && q.coalesce.target->max_groups > 1;
}

void Connection::EmitOne(Queued& q, std::string& out, std::deque<Pending>& inflight) {
  const bool module = !q.module_wire.empty() && module_.load(std::memory_order_relaxed);
  out.append(module ? q.module_wire : q.wire);
  for (ReplyCallback& cb : q.callbacks) {
    Pending p{q.deadline, std::move(cb)};
    p.module = module;
    inflight.push_back(std::move(p));
  }
}

std::shared_ptr<Connection::Merged> Connection::Merge(const std::vector<Queued*>& lane,
                                                      std::size_t from, std::size_t to,
                                                      bool module) {
  const CoalesceTarget& target = *lane[from]->coalesce.target;
  auto m = std::make_shared<Merged>();
  m->target = &target;
  m->module = module;
  std::size_t nkeys = 0;
  std::vector<const CoalesceInfo*> infos;
  infos.reserve(to - from);
  for (std::size_t i = from; i < to; ++i) {
    nkeys += lane[i]->coalesce.nkeys;
    infos.push_back(&lane[i]->coalesce);
  }
  std::string argv;
  argv.reserve(128 + 64 * nkeys);  // (about what a check's arguments take)
  const std::size_t nargs = module ? target.encode_module(infos, argv) : target.encode(infos, argv);
  std::string& w = m->wire;
  w.reserve(64 + argv.size() + 64 * nkeys);
  w.push_back('*');
  w.append(std::to_string((module ? 2 : 3) + nkeys + nargs));
  w.append("\r\n");
  if (module) {
    AppendBulk(w, kModuleCommand);
  } else {
    AppendBulk(w, "EVALSHA");
    AppendBulk(w, target.sha);
  }
  AppendBulk(w, std::to_string(nkeys));
  for (std::size_t i = from; i < to; ++i) {
    // (the keys of a module wire are the script wire's: one per check, in order)
    const CoalesceInfo& c = lane[i]->coalesce;
    w.append(lane[i]->wire, c.keys_begin, c.keys_end - c.keys_begin);
  }
  w.append(argv);
  return m;
}

void Connection::Emit(std::vector<Queued>& batch, std::string& out, std::deque<Pending>& inflight) {
  // Mergeable calls, by (target, slot, module wire or not), in the order they were queued.
  const bool has_module = module_.load(std::memory_order_relaxed);
  auto module_lane = [&](const Queued& q) {
    return has_module && !q.module_wire.empty() && q.coalesce.target->encode_module != nullptr;
  };
  std::vector<std::vector<Queued*>> lanes;
  for (Queued& q : batch) {
    if (Mergeable(q)) {
      bool placed = false;
      for (auto& lane : lanes) {
        const Queued& f = *lane.front();
        // (module commands share a lane whatever their script: one SLUICE.DECIDE takes
        // every algorithm's groups)
        const bool module = module_lane(q);
        if (module_lane(f) == module && f.coalesce.slot == q.coalesce.slot &&
            (module || f.coalesce.target == q.coalesce.target)) {
          lane.push_back(&q);
          placed = true;
          break;
        }
      }
      if (!placed) lanes.push_back({&q});
      continue;
    }
    EmitOne(q, out, inflight);
  }
  for (auto& lane : lanes) {
    const CoalesceTarget& target = *lane.front()->coalesce.target;
    const bool module = module_lane(*lane.front());
    for (std::size_t from = 0; from < lane.size(); from += target.max_groups) {
      const std::size_t to = std::min(lane.size(), from + target.max_groups);
      // (min_groups is the grouped script's: a merged module command has no fixed cost
      // that two groups would not already outweigh)
      const std::size_t min_groups = module ? 2 : std::max<std::size_t>(2, target.min_groups);
      if (to - from < min_groups) {  // their own calls
        for (std::size_t i = from; i < to; ++i) {
          EmitOne(*lane[i], out, inflight);
          inflight.back().coalescible = true;
        }
        continue;
      }
      std::shared_ptr<Merged> m = Merge(lane, from, to, module);
      Deadline last = lane[from]->deadline;
      for (std::size_t i = from; i < to; ++i) {
        Queued& q = *lane[i];
        last = std::max(last, q.deadline);
        m->groups.push_back(Group{q.deadline, std::move(q.callbacks.front()), q.coalesce.nreplies});
      }
      stats_->coalesced_calls.fetch_add(1, std::memory_order_relaxed);
      stats_->coalesced_groups.fetch_add(to - from, std::memory_order_relaxed);
      out.append(m->wire);
      Pending p{last, nullptr};
      p.module = module;
      p.coalescible = true;
      p.merged = std::move(m);
      inflight.push_back(std::move(p));
    }
  }
}

void Connection::DeliverMerged(Merged& m, const Status& s, const redisReply* r) {
  // Each group's part: [begin, end) of the reply's elements, or none when the reply does
  // not split into exactly the groups' units.
  std::vector<std::pair<std::size_t, std::size_t>> parts;
  bool split = s.ok() && r->type == REDIS_REPLY_ARRAY;
  std::size_t at = 0;
  for (const Group& g : m.groups) {
    if (!split) break;
    const std::size_t begin = at;
    for (std::uint32_t u = 0; u < g.nreplies && split; ++u) {
      const std::size_t size =
          at < r->elements
              ? (m.target->unit_size == nullptr ? 1 : m.target->unit_size(*r->element[at]))
              : 0;
      split = size > 0 && at + size <= r->elements;
      at += size;
    }
    parts.emplace_back(begin, at);
  }
  split = split && at == r->elements;
  const bool whole = !s.ok() || r->type == REDIS_REPLY_ERROR;
  const Status bad = Status::Internal(
      "unexpected reply to a coalesced call: it does not split into its callers' parts");
  for (std::size_t i = 0; i < m.groups.size(); ++i) {
    Group& g = m.groups[i];
    if (g.done) continue;
    g.done = true;
    if (split) {
      // The caller's part, as an array reply of its own (valid during the callback).
      redisReply part{};
      part.type = REDIS_REPLY_ARRAY;
      part.elements = parts[i].second - parts[i].first;
      part.element = r->element + parts[i].first;
      g.callback(s, &part);
    } else if (whole) {
      g.callback(s, r);
    } else {
      g.callback(bad, nullptr);
    }
    g.callback = nullptr;
  }
}

void Connection::Hold(std::vector<Queued>& held, std::vector<Queued>& batch,
                      const std::deque<Pending>& inflight) {
  const bool busy =
      std::any_of(inflight.begin(), inflight.end(), [](const Pending& p) { return p.coalescible; });
  std::size_t full = 0;  // held calls that make a whole merged call
  if (busy) {
    std::vector<Queued> now;
    for (Queued& q : batch) {
      if (Mergeable(q)) {
        held.push_back(std::move(q));
      } else {
        now.push_back(std::move(q));
      }
    }
    batch.swap(now);
    for (const Queued& q : held) full = std::max(full, q.coalesce.target->max_groups);
    // Enough held for a whole merged call: waiting longer would not merge it further.
    if (held.size() < full) return;
  }
  // Nothing of theirs in flight (or a whole call's worth held): the held calls go first,
  // in the order they were queued.
  if (held.empty()) return;
  for (Queued& q : batch) held.push_back(std::move(q));
  batch.swap(held);
  held.clear();
}

}  // namespace sluice::redis
