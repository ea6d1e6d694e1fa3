// Helpers for the HTTP middleware tests: a header map, a limiter on a manual clock, and
// a store that always fails.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sluice/http.h"
#include "sluice/limiter.h"
#include "sluice/memory_store.h"

namespace sluice::http::testing {

inline constexpr Micros kSec = 1'000'000;
// 2026-07-30 12:00:00 UTC: a minute, hour and day boundary.
inline constexpr Micros kNoon = 1785412800LL * kSec;

inline bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// Header fields in the order received; lookups ignore case.
class FakeHeaders final : public HeaderReader {
 public:
  FakeHeaders() = default;
  FakeHeaders(std::initializer_list<std::pair<std::string, std::string>> f) : fields_(f) {}
  void Add(std::string name, std::string value) {
    fields_.emplace_back(std::move(name), std::move(value));
  }
  bool Get(std::string_view name, std::size_t index, std::string_view* value) const override {
    for (const auto& [n, v] : fields_) {
      if (EqualsIgnoreCase(n, name) && index-- == 0) {
        *value = v;
        return true;
      }
    }
    return false;
  }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

// The value of header `name` in a verdict, or "" when absent.
inline std::string HeaderOf(const Verdict& v, std::string_view name) {
  for (const auto& [n, val] : v.headers) {
    if (EqualsIgnoreCase(n, name)) return val;
  }
  return "";
}

// A store that fails every call with `code`.
class FailingStore final : public Store {
 public:
  explicit FailingStore(ErrorCode code = ErrorCode::kUnavailable) : code_(code) {}
  Status Run(const StoreBatch& batch, std::span<Decision>) override {
    (void)batch;
    return Status(code_, "store is down (test)");
  }
  Status Reset(const Policy&, std::string_view) override { return Status(code_, "down"); }
  bool IsRemote() const override { return true; }

 private:
  ErrorCode code_;
};

inline std::shared_ptr<Limiter> MakeLimiter(std::vector<Policy> policies,
                                            std::shared_ptr<const Clock> clock,
                                            std::shared_ptr<Store> store = nullptr) {
  LimiterOptions o;
  o.policies = std::move(policies);
  o.clock = std::move(clock);
  o.store = store ? std::move(store) : std::make_shared<MemoryStore>();
  auto r = Limiter::Create(std::move(o));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::shared_ptr<Limiter>(std::move(r).value()) : nullptr;
}

}  // namespace sluice::http::testing
