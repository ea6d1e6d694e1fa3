// Internal: the pure parts of Redis Cluster routing, without any I/O.
//
// - Crc16 / KeySlot: which of the 16384 hash slots a key belongs to (CRC16/XMODEM of
//   the key, or of its hash tag: the bytes between the first '{' and the next '}' when
//   that span is not empty), as Redis computes it (cluster.c keyHashSlot).
// - SlotMap: slot -> primary endpoint, parsed from CLUSTER SHARDS (Redis 7) or, for
//   older servers, CLUSTER SLOTS. Only primaries are kept: sluice decides on primaries.
// - ParseRedirect: the MOVED / ASK error replies that tell a client where a slot went.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "redis/reply.h"
#include "sluice/status.h"

namespace sluice::redis {

inline constexpr int kClusterSlots = 16384;

// CRC16/XMODEM (polynomial 0x1021, initial value 0, no reflection), as Redis uses it.
std::uint16_t Crc16(std::string_view data);

// The hash slot of `key` (0..16383), honouring the hash-tag rule.
int KeySlot(std::string_view key);

// A node's address as the cluster announces it.
struct Endpoint {
  std::string host;
  int port = 0;
  bool operator==(const Endpoint&) const = default;
  std::string ToString() const;  // "host:port" ("[v6]:port" for an IPv6 literal)
};

// Which primary serves each slot. Node indexes refer to primaries(); kNoNode marks a
// slot that no primary serves (the cluster is then not fully covered).
class SlotMap {
 public:
  static constexpr std::uint16_t kNoNode = 0xffff;

  SlotMap() { owner_.fill(kNoNode); }

  const std::vector<Endpoint>& primaries() const { return primaries_; }
  // The primary index serving `slot`, or kNoNode.
  std::uint16_t owner(int slot) const { return owner_[static_cast<std::size_t>(slot)]; }
  // Assigns [first, last] to `node` (added to primaries() if new); returns its index.
  std::uint16_t Assign(int first, int last, const Endpoint& node);
  // Slots served by nobody.
  int uncovered() const;
  // Serves `slot` from `node` from now on (a MOVED reply): the rest is unchanged.
  void Patch(int slot, const Endpoint& node) { Assign(slot, slot, node); }

 private:
  std::vector<Endpoint> primaries_;
  std::array<std::uint16_t, kClusterSlots> owner_;
};

// Parses a CLUSTER SHARDS reply (RESP2: an array of shards, each a flat map with
// "slots" [start, end, start, end...] and "nodes" [maps with "ip"/"endpoint",
// "port"/"tls-port", "role", "health"]). `fallback_host` replaces an endpoint that the
// node announces as "?" or empty (the seed's address, as redis-cli does).
// `tls`: the client connects over TLS, so a node's "tls-port" is preferred to its
// "port" (a node with `tls-cluster yes` and a plain port lists both).
Result<SlotMap> ParseClusterShards(const Reply& reply, std::string_view fallback_host,
                                   bool tls = false);

// Parses a CLUSTER SLOTS reply: [[start, end, [ip, port, id...], replicas...]...].
Result<SlotMap> ParseClusterSlots(const Reply& reply, std::string_view fallback_host);

}  // namespace sluice::redis
