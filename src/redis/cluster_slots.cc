#include "redis/cluster_slots.h"

#include <charconv>

namespace sluice::redis {
namespace {

// Table-driven CRC16/XMODEM, generated at compile time from the polynomial.
constexpr std::array<std::uint16_t, 256> MakeCrcTable() {
  std::array<std::uint16_t, 256> t{};
  for (int i = 0; i < 256; ++i) {
    std::uint16_t crc = static_cast<std::uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) {
      crc = (crc & 0x8000) ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<std::uint16_t>(crc << 1);
    }
    t[static_cast<std::size_t>(i)] = crc;
  }
  return t;
}
constexpr std::array<std::uint16_t, 256> kCrcTable = MakeCrcTable();

bool ParseInt(std::string_view s, long long& out) {
  if (s.empty()) return false;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// An integer that Redis may send as an integer or as a string.
bool AsInt(const Reply& r, long long& out) {
  if (r.type == REDIS_REPLY_INTEGER) {
    out = r.integer;
    return true;
  }
  if (r.type == REDIS_REPLY_STRING || r.type == REDIS_REPLY_STATUS) return ParseInt(r.str, out);
  return false;
}

bool IsText(const Reply& r) {
  return r.type == REDIS_REPLY_STRING || r.type == REDIS_REPLY_STATUS;
}

// A RESP2 flat map [k1, v1, k2, v2...]: the value of `key`, or null.
const Reply* MapGet(const Reply& map, std::string_view key) {
  if (map.type != REDIS_REPLY_ARRAY) return nullptr;
  for (std::size_t i = 0; i + 1 < map.elements.size(); i += 2) {
    if (IsText(map.elements[i]) && map.elements[i].str == key) return &map.elements[i + 1];
  }
  return nullptr;
}

bool ValidRange(long long first, long long last) {
  return first >= 0 && last >= first && last < kClusterSlots;
}

Status Malformed(std::string_view what, std::string_view why) {
  return Status::Internal("unexpected " + std::string(what) + " reply: " + std::string(why));
}

}  // namespace

std::uint16_t Crc16(std::string_view data) {
  std::uint16_t crc = 0;
  for (unsigned char c : data) {
    crc = static_cast<std::uint16_t>((crc << 8) ^ kCrcTable[((crc >> 8) ^ c) & 0xff]);
  }
  return crc;
}

int KeySlot(std::string_view key) {
  const std::size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const std::size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return Crc16(key) & (kClusterSlots - 1);
}

std::string Endpoint::ToString() const {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

std::uint16_t SlotMap::Assign(int first, int last, const Endpoint& node) {
  std::uint16_t index = kNoNode;
  for (std::size_t i = 0; i < primaries_.size(); ++i) {
    if (primaries_[i] == node) index = static_cast<std::uint16_t>(i);
  }
  if (index == kNoNode) {
    index = static_cast<std::uint16_t>(primaries_.size());
    primaries_.push_back(node);
  }
  for (int s = first; s <= last; ++s) owner_[static_cast<std::size_t>(s)] = index;
  return index;
}

int SlotMap::uncovered() const {
  int n = 0;
  for (std::uint16_t o : owner_) n += o == kNoNode;
  return n;
}

Result<SlotMap> ParseClusterShards(const Reply& reply, std::string_view fallback_host, bool tls) {
  if (reply.is_error()) return Status::Unavailable("CLUSTER SHARDS: " + reply.str);
  if (reply.type != REDIS_REPLY_ARRAY) return Malformed("CLUSTER SHARDS", "not an array");
  SlotMap map;
  for (const Reply& shard : reply.elements) {
    const Reply* slots = MapGet(shard, "slots");
    const Reply* nodes = MapGet(shard, "nodes");
    if (slots == nullptr || nodes == nullptr || slots->type != REDIS_REPLY_ARRAY ||
        nodes->type != REDIS_REPLY_ARRAY || slots->elements.size() % 2 != 0) {
      return Malformed("CLUSTER SHARDS", "a shard without slots/nodes");
    }
    if (slots->elements.empty()) continue;  // a shard without slots serves nothing
    // The primary: prefer one that is online (a failed one keeps its role for a while).
    const Reply* primary = nullptr;
    for (const Reply& node : nodes->elements) {
      const Reply* role = MapGet(node, "role");
      if (role == nullptr || role->str != "master") continue;
      const Reply* health = MapGet(node, "health");
      const bool online = health == nullptr || health->str == "online";
      if (primary == nullptr || online) primary = &node;
      if (online) break;
    }
    if (primary == nullptr) return Malformed("CLUSTER SHARDS", "a shard with slots and no primary");
    Endpoint ep;
    const Reply* endpoint = MapGet(*primary, "endpoint");
    const Reply* ip = MapGet(*primary, "ip");
    if (endpoint != nullptr && IsText(*endpoint) && !endpoint->str.empty() &&
        endpoint->str != "?") {
      ep.host = endpoint->str;
    } else if (ip != nullptr && IsText(*ip) && !ip->str.empty() && ip->str != "?") {
      ep.host = ip->str;
    } else {
      ep.host = std::string(fallback_host);
    }
    long long port = 0;
    // A node with both lists "port" (plain) and "tls-port": take the one the client
    // speaks, the other only when it is the only one given.
    const char* first_choice = tls ? "tls-port" : "port";
    const char* second_choice = tls ? "port" : "tls-port";
    const Reply* p = MapGet(*primary, first_choice);
    if (p == nullptr) p = MapGet(*primary, second_choice);
    if (p == nullptr || !AsInt(*p, port) || port <= 0 || port > 65535) {
      return Malformed("CLUSTER SHARDS", "a primary without a valid port");
    }
    ep.port = static_cast<int>(port);
    for (std::size_t i = 0; i < slots->elements.size(); i += 2) {
      long long first = 0, last = 0;
      if (!AsInt(slots->elements[i], first) || !AsInt(slots->elements[i + 1], last) ||
          !ValidRange(first, last)) {
        return Malformed("CLUSTER SHARDS", "a bad slot range");
      }
      map.Assign(static_cast<int>(first), static_cast<int>(last), ep);
    }
  }
  return map;
}

Result<SlotMap> ParseClusterSlots(const Reply& reply, std::string_view fallback_host) {
  if (reply.is_error()) return Status::Unavailable("CLUSTER SLOTS: " + reply.str);
  if (reply.type != REDIS_REPLY_ARRAY) return Malformed("CLUSTER SLOTS", "not an array");
  SlotMap map;
  for (const Reply& range : reply.elements) {
    long long first = 0, last = 0, port = 0;
    if (range.type != REDIS_REPLY_ARRAY || range.elements.size() < 3 ||
        !AsInt(range.elements[0], first) || !AsInt(range.elements[1], last) ||
        !ValidRange(first, last)) {
      return Malformed("CLUSTER SLOTS", "a bad slot range");
    }
    const Reply& node = range.elements[2];
    if (node.type != REDIS_REPLY_ARRAY || node.elements.size() < 2 || !IsText(node.elements[0]) ||
        !AsInt(node.elements[1], port) || port <= 0 || port > 65535) {
      return Malformed("CLUSTER SLOTS", "a bad node entry");
    }
    Endpoint ep;
    ep.host = node.elements[0].str.empty() || node.elements[0].str == "?"
                  ? std::string(fallback_host)
                  : node.elements[0].str;
    ep.port = static_cast<int>(port);
    map.Assign(static_cast<int>(first), static_cast<int>(last), ep);
  }
  return map;
}

}  // namespace sluice::redis
