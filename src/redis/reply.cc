#include "redis/reply.h"

#include <algorithm>
#include <charconv>

namespace sluice::redis {
namespace {

bool FirstWordIs(std::string_view text, std::string_view word) {
  return text.starts_with(word) && (text.size() == word.size() || text[word.size()] == ' ');
}

bool ToInt(std::string_view s, int min, int max, int* out) {
  if (s.empty()) return false;
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < min || v > max) return false;
  *out = v;
  return true;
}

// hiredis's own object functions (static in hiredis.c, reachable through a reader).
const redisReplyObjectFunctions& DefaultFunctions() {
  static const redisReplyObjectFunctions fn = [] {
    redisReader* r = redisReaderCreate();
    redisReplyObjectFunctions copy = *r->fn;
    redisReaderFree(r);
    return copy;
  }();
  return fn;
}

void* CreateBoundedArray(const redisReadTask* task, int elements) {
  if (elements < 0 || elements > kMaxReplyElements) return nullptr;  // the reader's error
  return DefaultFunctions().createArray(task, elements);
}

const redisReplyObjectFunctions& BoundedFunctions() {
  static const redisReplyObjectFunctions fn = [] {
    redisReplyObjectFunctions f = DefaultFunctions();
    f.createArray = CreateBoundedArray;
    return f;
  }();
  return fn;
}

}  // namespace

ReaderPtr NewReader() {
  // The functions table is only read by the reader, never written.
  return ReaderPtr(
      redisReaderCreateWithFunctions(const_cast<redisReplyObjectFunctions*>(&BoundedFunctions())));
}

std::string ReaderErrorText(const redisReader& r) {
  if (r.err == REDIS_ERR_OOM) {
    return "an array reply declared more than " + std::to_string(kMaxReplyElements) + " elements";
  }
  return r.errstr;
}

Reply Reply::From(const redisReply& r) {
  Reply out;
  out.type = r.type;
  out.integer = r.integer;
  if (r.str != nullptr) out.str.assign(r.str, r.len);
  out.elements.reserve(r.elements);
  for (std::size_t i = 0; i < r.elements; ++i) out.elements.push_back(From(*r.element[i]));
  return out;
}

ErrorKind ClassifyError(std::string_view e) {
  if (FirstWordIs(e, "MOVED")) return ErrorKind::kMoved;
  if (FirstWordIs(e, "ASK")) return ErrorKind::kAsk;
  if (FirstWordIs(e, "TRYAGAIN")) return ErrorKind::kTryAgain;
  if (FirstWordIs(e, "CLUSTERDOWN")) return ErrorKind::kClusterDown;
  if (FirstWordIs(e, "NOSCRIPT")) return ErrorKind::kNoScript;
  if (FirstWordIs(e, "READONLY")) return ErrorKind::kReadOnly;
  if (FirstWordIs(e, "LOADING")) return ErrorKind::kLoading;
  return ErrorKind::kOther;
}

ErrorKind Classify(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_ERROR) return ErrorKind::kNone;
  return ClassifyError(std::string_view(r->str, r->len));
}

ErrorKind Classify(const Reply& r) {
  return r.is_error() ? ClassifyError(r.str) : ErrorKind::kNone;
}

bool ProvesNotRun(ErrorKind k) {
  switch (k) {
    case ErrorKind::kMoved:
    case ErrorKind::kAsk:
    case ErrorKind::kTryAgain:
    case ErrorKind::kClusterDown:
    case ErrorKind::kNoScript:
    case ErrorKind::kReadOnly:
    case ErrorKind::kLoading:
      return true;
    default:
      return false;
  }
}

bool ParseRedirect(std::string_view e, Redirect* out) {
  Redirect r;
  r.kind = ClassifyError(e);
  if (r.kind != ErrorKind::kMoved && r.kind != ErrorKind::kAsk) return false;
  // "MOVED " / "ASK " and then something: a bare "MOVED" has nothing to parse.
  const std::size_t prefix = r.kind == ErrorKind::kMoved ? 6 : 4;
  if (e.size() <= prefix) return false;
  e.remove_prefix(prefix);
  const std::size_t space = e.find(' ');
  if (space == std::string_view::npos) return false;
  if (!ToInt(e.substr(0, space), 0, 16383, &r.slot)) return false;
  std::string_view addr = e.substr(space + 1);
  const std::size_t colon = addr.rfind(':');
  if (colon == std::string_view::npos) return false;
  std::string_view host = addr.substr(0, colon);
  if (host.starts_with('[') && host.ends_with(']')) host = host.substr(1, host.size() - 2);
  if (!ToInt(addr.substr(colon + 1), 1, 65535, &r.port)) return false;
  r.host = std::string(host);
  *out = std::move(r);
  return true;
}

namespace {

// An allowed decision packed into one integer (lua/runner.lua).
Status UnpackDecision(long long v, std::uint64_t capacity, Decision& d) {
  constexpr long long kMaxPacked = 1LL << 53;
  if (v < 0 || v >= kMaxPacked || (v & 1) == 0 ||
      capacity >= static_cast<std::uint64_t>(kMaxPacked)) {
    return Status::Internal("unexpected reply to the decide script: integer " + std::to_string(v) +
                            " is not a packed allowed decision");
  }
  const std::uint64_t rest = static_cast<std::uint64_t>(v) >> 1;
  d.allowed = true;
  d.limit = capacity;
  d.remaining = rest % (capacity + 1);
  d.reset_after = static_cast<Micros>(rest / (capacity + 1));
  d.retry_after = 0;
  d.wait = 0;
  d.charged = 0;
  return Status::Ok();
}

}  // namespace

std::size_t DecisionSize(const redisReply& e) {
  if (e.type != REDIS_REPLY_INTEGER) return 0;
  if ((e.integer & 1) != 0) return 1;
  return (e.integer & 4) != 0 ? 5 : 4;  // 4: Decision::charged follows (overage)
}

Status DecodeDecisions(const redisReply& r, std::size_t n, const std::uint64_t* capacity,
                       Decision* out) {
  if (n == 1 && r.type == REDIS_REPLY_INTEGER)
    return UnpackDecision(r.integer, capacity[0], out[0]);
  if (r.type != REDIS_REPLY_ARRAY) {
    return Status::Internal("unexpected reply to the decide script: expected an array");
  }
  std::size_t at = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t size =
        at < r.elements && r.element[at] != nullptr ? DecisionSize(*r.element[at]) : 0;
    if (size == 0 || at + size > r.elements) {
      return Status::Internal("unexpected reply to the decide script: check " + std::to_string(i) +
                              " has no decision at element " + std::to_string(at));
    }
    const redisReply* const* e = r.element + at;
    at += size;
    if (size == 1) {
      if (Status s = UnpackDecision(e[0]->integer, capacity[i], out[i]); !s.ok()) return s;
      continue;
    }
    for (std::size_t j = 1; j < size; ++j) {
      if (e[j] == nullptr || e[j]->type != REDIS_REPLY_INTEGER) {
        return Status::Internal("unexpected reply to the decide script: check " +
                                std::to_string(i) + " has a non-integer field");
      }
    }
    if (e[0]->integer < 0 || e[0]->integer > 6) {
      return Status::Internal("unexpected reply to the decide script: check " + std::to_string(i) +
                              " is neither allowed (2) nor denied (0), with charged (+4) or not");
    }
    Decision& d = out[i];
    d.allowed = (e[0]->integer & 2) != 0;
    d.charged = size == 5 ? static_cast<std::uint64_t>(std::max<long long>(0, e[4]->integer)) : 0;
    d.limit = capacity[i];
    d.remaining = static_cast<std::uint64_t>(std::max<long long>(0, e[1]->integer));
    d.reset_after = e[2]->integer;
    d.retry_after = e[3]->integer;
    d.wait = 0;
    // An allowed reservation answers its wait as a negative retry_after
    // (lua/token_bucket.lua, lua/gcra.lua).
    if (d.allowed && d.retry_after < 0) {
      d.wait = -d.retry_after;
      d.retry_after = 0;
    }
  }
  if (at != r.elements) {
    return Status::Internal(
        "unexpected reply to the decide script: " + std::to_string(r.elements - at) +
        " elements beyond its " + std::to_string(n) + " checks");
  }
  return Status::Ok();
}

}  // namespace sluice::redis
