// Admin tokens (service/admin_auth.h).
#include "service/admin_auth.h"

#include <sys/stat.h>

#include <cstdio>

#include "core/hash.h"
#include "service/launch.h"

namespace sluice::service {
namespace {

constexpr std::size_t kMinTokenBytes = 16;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Every byte of the longer input is looked at, whatever the others are.
  const std::size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  // The compiler cannot turn this into an early exit: `diff` is read once, at the end.
  volatile unsigned char result = diff;
  return result == 0;
}

std::string AdminTokens::IdOf(std::string_view token) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "t%08llx",
                static_cast<unsigned long long>(Fnv1a64(token, kFnvOffsetAlt) >> 32));
  return buf;
}

Result<AdminTokens> AdminTokens::Load(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return Status::InvalidArgument("admin token file " + path + ": cannot be read (missing?)");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::InvalidArgument("admin token file " + path + " has mode " + mode +
                                   ": the group or others may read or write it; chmod 600 " + path);
  }
  auto text = ReadSecretFile(path);
  if (!text.ok()) return Status::InvalidArgument("admin token file: " + text.status().message());
  AdminTokens out;
  std::string_view rest = *text;
  int line = 0;
  while (!rest.empty()) {
    ++line;
    const std::size_t nl = rest.find('\n');
    const std::string_view raw = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    const std::string_view t = Trim(raw);
    if (t.empty() || t.front() == '#') continue;
    if (t.size() < kMinTokenBytes) {
      return Status::InvalidArgument("admin token file " + path + ":" + std::to_string(line) +
                                     ": a token needs at least " + std::to_string(kMinTokenBytes) +
                                     " bytes (e.g. openssl rand -hex 32)");
    }
    out.tokens_.push_back(Token{std::string(t), IdOf(t)});
  }
  if (out.tokens_.empty()) {
    return Status::InvalidArgument("admin token file " + path + ": no token in it");
  }
  return out;
}

std::string AdminTokens::Match(std::string_view authorization) const {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() <= kBearer.size()) return {};
  // The scheme is case-insensitive (RFC 9110 11.1).
  for (std::size_t i = 0; i < kBearer.size(); ++i) {
    const char c = authorization[i];
    const char lower = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    const char want = kBearer[i] >= 'A' && kBearer[i] <= 'Z'
                          ? static_cast<char>(kBearer[i] - 'A' + 'a')
                          : kBearer[i];
    if (lower != want) return {};
  }
  const std::string_view presented = Trim(authorization.substr(kBearer.size()));
  // Every token is compared, so the time does not tell which one (or whether any) matched.
  std::string id;
  for (const Token& t : tokens_) {
    if (ConstantTimeEquals(presented, t.secret) && id.empty()) id = t.id;
  }
  return id;
}

}  // namespace sluice::service
