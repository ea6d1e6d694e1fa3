// Redis URL parsing (RedisStoreOptions::url, `--redis`, sluiced's store: setting). An
// accepted URL has a usable address.
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "redis/url.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto url = sluice::redis::ParseUrl(text);
  if (!url.ok()) {
    FUZZ_CHECK(!url.status().message().empty());
    return 0;
  }
  FUZZ_CHECK(url->db >= 0);
  if (url->unix_socket) {
    FUZZ_CHECK(!url->path.empty());
  } else {
    FUZZ_CHECK(!url->host.empty());
    FUZZ_CHECK(url->port >= 1 && url->port <= 65535);
  }
  FUZZ_CHECK(!url->Describe().empty());
  return 0;
}
