// Internal: Redis replies. hiredis's redisReader parses them (a redisReply lives only
// during a callback); Reply is an owned copy for blocking callers. The Classify
// helpers read the error replies a router acts on.
#pragma once

#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/decision.h"
#include "sluice/status.h"

namespace sluice::redis {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
struct ReaderDeleter {
  void operator()(redisReader* r) const { redisReaderFree(r); }
};
struct ContextDeleter {  // for test helpers that still talk to Redis with hiredis's API
  void operator()(redisContext* c) const { redisFree(c); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;
using ReaderPtr = std::unique_ptr<redisReader, ReaderDeleter>;
using ContextPtr = std::unique_ptr<redisContext, ContextDeleter>;

// The most elements one array reply may declare. hiredis 0.14 allocates the element
// pointers as soon as it reads an array's header ("*N"), before any element arrives,
// so one hostile or corrupt header could make it allocate gigabytes; every element
// needs at least 3 bytes on the wire, so no reply within kMaxReplyBytes
// (connection.h's 8 MB) can have more than this.
inline constexpr int kMaxReplyElements = (8 * 1024 * 1024) / 3;

// A RESP reader that refuses an array header declaring more than kMaxReplyElements
// elements (or a negative count other than the nil array): the reader then fails
// with an error (REDIS_ERR, "Out of memory"), which breaks the connection like any
// protocol error. Every reply sluice reads goes through one of these.
ReaderPtr NewReader();

// What a failed NewReader() reader says, for an error message: hiredis's text, except
// for a refused array header, which hiredis reports as "Out of memory".
std::string ReaderErrorText(const redisReader& r);

// An owned copy of a reply, for blocking callers.
struct Reply {
  int type = REDIS_REPLY_NIL;
  long long integer = 0;
  std::string str;  // string, status and error replies
  std::vector<Reply> elements;

  static Reply From(const redisReply& r);
  bool is_error() const { return type == REDIS_REPLY_ERROR; }
};

// The error replies sluice acts on. Everything else is kOther (or kNone: not an error).
enum class ErrorKind {
  kNone,         // not an error reply
  kMoved,        // MOVED slot host:port — the slot lives elsewhere (cluster)
  kAsk,          // ASK slot host:port — this one command goes to host:port after ASKING
  kTryAgain,     // TRYAGAIN — a multi-key command during a slot migration
  kClusterDown,  // CLUSTERDOWN — the cluster cannot serve the slot right now
  kNoScript,     // NOSCRIPT — EVALSHA of a script this node has not loaded
  kReadOnly,     // READONLY — a replica (e.g. a demoted primary) refused a write
  kLoading,      // LOADING — the server is loading its dataset
  kOther,
};

ErrorKind ClassifyError(std::string_view error_text);
ErrorKind Classify(const redisReply* r);  // null: kNone
ErrorKind Classify(const Reply& r);

// True for the errors that prove the command was not executed, so sending it again
// (elsewhere, or after a script load) cannot apply it twice: MOVED, ASK, TRYAGAIN,
// CLUSTERDOWN, NOSCRIPT, LOADING. READONLY also proves it (the write was refused).
bool ProvesNotRun(ErrorKind kind);

// The target of a MOVED or ASK reply ("MOVED 3999 127.0.0.1:6381").
struct Redirect {
  ErrorKind kind = ErrorKind::kNone;  // kMoved or kAsk
  int slot = -1;
  std::string host;  // brackets of an IPv6 literal removed; may be empty ("MOVED 1 :6380")
  int port = 0;
};
// False when `error_text` is not a well-formed MOVED/ASK reply.
bool ParseRedirect(std::string_view error_text, Redirect* out);

// Decodes the decide scripts' reply for `n` checks (the one reply encoding of every
// script, lua/runner.lua): per check ONE integer, an allowed decision with nothing to
// wait packed as ((reset_after * (capacity + 1)) + remaining) * 2 + 1 (odd), or four:
// 2 (allowed) or 0 (denied), remaining, reset_after, retry_after (negative: an allowed
// reservation's wait). The reply is an array of them, or, for a one-check call whose
// decision is packed, that integer alone. `capacity[i]` becomes Decision::limit.
// Anything else (another shape, a non-integer, a bad flag, too few or too many
// elements) is kInternal naming what was wrong: a wrong reply never becomes a decision.
// The elements one check's decision takes in such a reply, starting at `e`: 1, 4, or 0
// when `e` cannot start one (CoalesceTarget::unit_size).
std::size_t DecisionSize(const redisReply& e);
Status DecodeDecisions(const redisReply& r, std::size_t n, const std::uint64_t* capacity,
                       Decision* out);

}  // namespace sluice::redis
