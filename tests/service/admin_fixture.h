// What the admin listener's tests share: a config with a replaced rule, a token file
// only its owner can read, and the admin port from sluiced's "started" line.
#pragma once

#include <sys/stat.h>

#include <regex>
#include <string>

#include "process.h"

namespace sluice::testing {

// per_user: 3 an hour per user; per_key replaces per_path when both match.
inline const char* kAdminConfig = R"(sluiced:
  reload_poll: 0
domain: web
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 3, name: per_user}
  - key: api_key
    rate_limit:
      name: per_key
      replaces: [{name: per_path}]
      unit: hour
      requests_per_unit: 5
  - key: path
    value: /x
    rate_limit: {unit: hour, requests_per_unit: 100, name: per_path}
)";

// Writes `text` to `path` with mode 0600.
inline void WriteTokenFile(const std::string& path, const std::string& text) {
  WriteFile(path, text);
  ::chmod(path.c_str(), 0600);
}

// The admin listener's port in sluiced's "started" line (admin=127.0.0.1:PORT), or 0.
inline int AdminPort(const Sluiced& d) {
  std::smatch m;
  const std::string log = d.LogText();
  return std::regex_search(log, m, std::regex(R"( admin=127\.0\.0\.1:(\d+))")) ? std::stoi(m[1])
                                                                               : 0;
}

}  // namespace sluice::testing
