// The Redis reply path: bytes from the server, as a connection reads them, through
// hiredis's RESP reader (with the connection's size cap), then everything sluice does
// with a reply: the owned copy, error classification, MOVED/ASK parsing and the
// decoding of the decide scripts' answer. A reply that decodes is a sane decision.
#include <hiredis/hiredis.h>

#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "redis/connection.h"
#include "redis/reply.h"

namespace {

void Inspect(const redisReply& r) {
  const auto copy = sluice::redis::Reply::From(r);
  FUZZ_CHECK(copy.type == r.type);
  const sluice::redis::ErrorKind kind = sluice::redis::Classify(&r);
  if (r.type == REDIS_REPLY_ERROR) {
    sluice::redis::Redirect redirect;
    if (sluice::redis::ParseRedirect(std::string_view(r.str, r.len), &redirect)) {
      FUZZ_CHECK(redirect.slot >= 0 && redirect.slot < 16384);
      FUZZ_CHECK(redirect.port >= 1 && redirect.port <= 65535);
      FUZZ_CHECK(kind == sluice::redis::ErrorKind::kMoved ||
                 kind == sluice::redis::ErrorKind::kAsk);
    }
  } else {
    FUZZ_CHECK(kind == sluice::redis::ErrorKind::kNone);
  }
  if (r.type == REDIS_REPLY_INTEGER) {
    // A one-check script's packed allowed decision (lua/single_tail.lua).
    const std::uint64_t capacity[1] = {1000};
    sluice::Decision out[1];
    if (sluice::redis::DecodeDecisions(r, 1, capacity, out).ok()) {
      FUZZ_CHECK(out[0].allowed && out[0].limit == 1000 && out[0].remaining <= 1000);
      FUZZ_CHECK(out[0].reset_after >= 0 && out[0].retry_after == 0);
    }
  }
  if (r.type == REDIS_REPLY_ARRAY && r.elements % 4 == 0 && r.elements <= 64) {
    const std::size_t n = r.elements / 4;
    std::uint64_t capacity[16];
    sluice::Decision out[16];
    for (std::size_t i = 0; i < n; ++i) capacity[i] = 100 + i;
    if (sluice::redis::DecodeDecisions(r, n, capacity, out).ok()) {
      for (std::size_t i = 0; i < n; ++i) FUZZ_CHECK(out[i].limit == 100 + i);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The reader every connection uses (bounded array headers).
  sluice::redis::ReaderPtr owned = sluice::redis::NewReader();
  redisReader* reader = owned.get();
  FUZZ_CHECK(reader != nullptr);
  // Fed in two pieces, as a socket may split a reply anywhere.
  const std::size_t half = size / 2;
  const char* bytes = reinterpret_cast<const char*>(data);
  bool ok = redisReaderFeed(reader, bytes, half) == REDIS_OK &&
            redisReaderFeed(reader, bytes + half, size - half) == REDIS_OK;
  while (ok) {
    void* r = nullptr;
    if (redisReaderGetReply(reader, &r) != REDIS_OK || r == nullptr) break;
    Inspect(*static_cast<redisReply*>(r));
    freeReplyObject(r);
    // What the connection keeps buffered stays under its cap.
    if (reader->len - reader->pos > sluice::redis::kMaxReplyBytes) break;
  }
  return 0;
}
