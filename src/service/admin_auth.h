// Who may use sluiced's admin listener (issue #24): bearer tokens read from a file that
// only its owner can read, compared in constant time.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::service {

class AdminTokens {
 public:
  // Reads `path`: one token per line (empty lines and lines starting with '#' are
  // skipped; surrounding spaces trimmed), at least 16 bytes each. Errors name the path:
  // missing or unreadable, no token, a token shorter than 16 bytes, or a mode that
  // lets the group or others read or write it ("mode 0644 ...: chmod 600 FILE").
  static Result<AdminTokens> Load(const std::string& path);

  // The id of the token `authorization` carries ("Bearer TOKEN"), or empty when it
  // names none. The comparison takes the same time whatever bytes differ.
  std::string Match(std::string_view authorization) const;

  std::size_t size() const { return tokens_.size(); }

  // A token's id in logs: "t" and 8 hex digits of its hash (the token is never logged).
  static std::string IdOf(std::string_view token);

 private:
  struct Token {
    std::string secret;
    std::string id;
  };
  std::vector<Token> tokens_;
};

// True when `a` and `b` are equal; the time taken depends only on their lengths.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace sluice::service
