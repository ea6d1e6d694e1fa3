#include "sluice/key.h"

#include "core/key_escape.h"

namespace sluice {
void AppendEscaped(std::string& out, std::string_view part) {
  const std::size_t start = out.size();
  out.resize(start + 3 * part.size());
  char* end = key_internal::WriteEscaped(out.data() + start, part);
  out.resize(static_cast<std::size_t>(end - out.data()));
}

std::string JoinKey(std::initializer_list<std::string_view> parts) {
  std::string out;
  bool first = true;
  for (std::string_view p : parts) {
    if (!first) out.push_back(':');
    first = false;
    AppendEscaped(out, p);
  }
  return out;
}

Result<std::string> StoreKey(std::string_view prefix, std::string_view key,
                             std::string_view policy_name) {
  if (key.empty()) return Status::InvalidArgument("key must not be empty");
  if (key.size() > kMaxKeyBytes) {
    return Status::InvalidArgument("key is " + std::to_string(key.size()) + " bytes; at most " +
                                   std::to_string(kMaxKeyBytes) + " are allowed");
  }
  std::string out;
  out.reserve(prefix.size() + key.size() * 3 + policy_name.size() + 4);
  out.append(prefix);
  out.append(":{");
  AppendEscaped(out, key);
  out.append("}:");
  out.append(policy_name);
  return out;
}

}  // namespace sluice
