#include "sluice/key.h"

namespace sluice {
namespace {

bool Plain(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-' || c == '@' || c == '/' || c == '+' || c == '=';
}

}  // namespace

void AppendEscaped(std::string& out, std::string_view part) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : part) {
    if (Plain(c)) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
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
