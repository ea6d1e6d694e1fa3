// POST /json's request parsing and response rendering (protobuf's JSON mapping, as
// envoyproxy/ratelimit speaks it).
#include "service/json_api.h"

#include <gtest/gtest.h>

#include "sluice/memory_store.h"

namespace sluice::service {
namespace {

Status Parse(const std::string& body, JsonRequest* out) {
  return ParseJsonRequest(body, 16, out);
}

TEST(JsonApi, ParsesProtoAndCamelCaseNames) {
  JsonRequest j;
  ASSERT_TRUE(Parse(R"({"domain":"d","hits_addend":"3","descriptors":[
      {"entries":[{"key":"a","value":"1"},{"key":"b"}],"hitsAddend":0},
      {"entries":[{"key":"c","value":"2"}],"limit":{"requestsPerUnit":5,"unit":"HOUR"}},
      {"entries":[{"key":"e","value":"3"}],"limit":{"requests_per_unit":"6","unit":4},"hits_addend":7}]})",
                    &j)
                  .ok());
  const RateLimitRequest& r = j.request;
  EXPECT_EQ(r.domain, "d");
  EXPECT_EQ(r.hits_addend, 3u);
  ASSERT_EQ(r.descriptors.size(), 3u);
  ASSERT_EQ(r.descriptors[0].entries.size(), 2u);
  EXPECT_EQ(r.descriptors[0].entries[1].key, "b");
  EXPECT_EQ(r.descriptors[0].entries[1].value, "");
  EXPECT_TRUE(r.descriptors[0].has_hits_addend);
  EXPECT_EQ(r.descriptors[0].hits_addend, 0u);
  EXPECT_TRUE(r.descriptors[1].has_override);
  EXPECT_EQ(r.descriptors[1].override_requests_per_unit, 5u);
  EXPECT_EQ(r.descriptors[1].override_unit, 3);
  EXPECT_EQ(r.descriptors[2].override_requests_per_unit, 6u);
  EXPECT_EQ(r.descriptors[2].override_unit, 4);
  EXPECT_EQ(r.descriptors[2].hits_addend, 7u);
  EXPECT_FALSE(r.descriptors[1].has_hits_addend);
}

TEST(JsonApi, ErrorsNameTheProblem) {
  auto err = [](const std::string& body) {
    JsonRequest j;
    Status s = Parse(body, &j);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << body;
    return s.message();
  };
  EXPECT_NE(err(R"({"domain":"d",)").find("invalid JSON request: parse error at line 1"),
            std::string::npos);
  EXPECT_EQ(err(R"([1,2])"), "invalid JSON request: not an object");
  EXPECT_EQ(err(R"({"domain":"d","extra":1})"), "unknown field \"extra\" in the request");
  EXPECT_EQ(err(R"({"domain":5})"), "domain must be a string");
  EXPECT_EQ(err(R"({"hits_addend":-1})"), "hits_addend must not be negative");
  EXPECT_EQ(err(R"({"hits_addend":4294967296})"), "hits_addend is larger than 4294967295");
  EXPECT_EQ(err(R"({"hits_addend":1.5})"), "hits_addend must be a non-negative integer");
  EXPECT_EQ(err(R"({"descriptors":[{"hits_addend":4294967297}]})"),
            "descriptors[0].hits_addend is larger than 4294967296");
  EXPECT_EQ(err(R"({"descriptors":{}})"), "descriptors must be an array");
  EXPECT_EQ(err(R"({"descriptors":[{"entries":[{"key":1}]}]})"),
            "descriptors[0].entries[0].key must be a string");
  EXPECT_EQ(err(R"({"descriptors":[{"entries":[{"key":"a","colour":"red"}]}]})"),
            "descriptors[0].entries[0] has an unknown field \"colour\"");
  EXPECT_EQ(err(R"({"descriptors":[{"limit":{"unit":"FORTNIGHT"}}]})"),
            "descriptors[0].limit.unit must be SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR "
            "(got \"FORTNIGHT\")");
  EXPECT_EQ(err(R"({"descriptors":[{"limit":{"unit":8}}]})"),
            "descriptors[0].limit.unit is larger than 7");
  std::string many = R"({"descriptors":[)";
  for (int i = 0; i < 17; ++i) many += std::string(i ? "," : "") + "{}";
  EXPECT_EQ(err(many + "]}"), "too many descriptors: 17 (at most 16)");
}

TEST(JsonApi, RendersLikeProtobufJson) {
  RateLimitResponse r;
  r.overall_code = Code::kOverLimit;
  DescriptorStatus a;
  a.code = Code::kOverLimit;
  a.has_limit = true;
  a.requests_per_unit = 10;
  a.unit = Unit::kMinute;
  a.name = "per \"ip\"";
  a.limit_remaining = 0;
  a.duration_until_reset = 1'500'000;
  DescriptorStatus b;  // no limit: code only
  DescriptorStatus c;
  c.has_limit = true;
  c.requests_per_unit = 1;
  c.unit = Unit::kDay;
  c.limit_remaining = 1;
  c.duration_until_reset = 60'000'001;
  r.statuses = {a, b, c};
  r.response_headers = {{"retry-after", "2"}};
  EXPECT_EQ(
      RenderJsonResponse(r),
      R"({"overallCode":"OVER_LIMIT","statuses":[)"
      R"({"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":10,"unit":"MINUTE","name":"per \"ip\""},"durationUntilReset":"1.500s"},)"
      R"({"code":"OK"},)"
      R"({"code":"OK","currentLimit":{"requestsPerUnit":1,"unit":"DAY"},"limitRemaining":1,"durationUntilReset":"60.000001s"}],)"
      R"("responseHeadersToAdd":[{"key":"retry-after","value":"2"}]})"
      "\n");
  EXPECT_EQ(RenderJsonResponse(RateLimitResponse{}), "{\"overallCode\":\"OK\"}\n");
}

// Defect 7: a number too large for a double (1e400) anywhere threw out of the parser
// (HTTP 500 "internal error", not counted); it is bad input with a reason.
TEST(JsonApi, NumberOverflowIsInvalidArgumentWithAReason) {
  for (const char* body :
       {R"({"domain":"d","descriptors":[{"entries":[{"key":"a"}]}],"x":1e400})",
        R"({"domain":"d","hits_addend":1e400,"descriptors":[]})", R"([-1e400])"}) {
    JsonRequest j;
    Status s = Status::Ok();
    EXPECT_NO_THROW(s = Parse(body, &j)) << body;
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << body;
    EXPECT_NE(s.message().find("1e400"), std::string::npos) << s.message();
  }
}

// The json_request fuzzer: a count that fits a double but not a uint64 (2.2e40) was cast
// anyway (undefined behaviour; UBSan stopped it), and a 20-digit decimal string wrapped.
TEST(JsonApi, CountsBeyondUint64AreOutOfRange) {
  for (
      const char* body :
      {R"({"domain":"api","hits_addend":22222222222222222222222222222222222222223,"descriptors":[]})",
       R"({"domain":"api","hits_addend":"99999999999999999999","descriptors":[]})"}) {
    JsonRequest j;
    Status s = Parse(body, &j);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << body;
    EXPECT_NE(s.message().find("out of range"), std::string::npos) << s.message();
  }
}

// /v1/check's body is written by hand for speed; it must stay what nlohmann::json wrote
// before (keys sorted, the same numbers and escapes).
TEST(JsonApi, CheckResponseMatchesTheJsonLibrary) {
  auto reference = [](const RateLimitResponse& out) {
    const DescriptorStatus& st = out.statuses[0];
    auto limit = [](const DescriptorStatus& l, nlohmann::json& j) {
      j["limit"] = l.capacity;
      j["unit"] = UnitName(l.unit);
      j["remaining"] = l.limit_remaining;
      j["reset_after_ms"] = (l.duration_until_reset + 999) / 1000;
      j["retry_after_ms"] = (l.retry_after + 999) / 1000;
      if (!l.name.empty()) j["name"] = l.name;
    };
    const char* code = st.code == Code::kOverLimit ? "OVER_LIMIT" : "OK";
    nlohmann::json j{{"allowed", out.overall_code != Code::kOverLimit},
                     {"code", code},
                     {"limited", st.has_limit}};
    if (st.has_limit) {
      limit(st, j);
      if (!st.limits.empty()) {
        nlohmann::json all = nlohmann::json::array();
        for (const DescriptorStatus& l : st.limits) {
          nlohmann::json x{{"code", l.code == Code::kOverLimit ? "OVER_LIMIT" : "OK"}};
          limit(l, x);
          all.push_back(x);
        }
        j["limits"] = all;
      }
    }
    return j.dump() + "\n";
  };
  RateLimitResponse r;
  r.statuses.resize(1);
  EXPECT_EQ(RenderCheckResponse(r), reference(r));
  DescriptorStatus& st = r.statuses[0];
  st.has_limit = true;
  st.requests_per_unit = 100;
  st.capacity = 100;
  st.unit = Unit::kMinute;
  st.limit_remaining = 7;
  st.duration_until_reset = 1'500'001;
  EXPECT_EQ(RenderCheckResponse(r), reference(r));
  st.name = "a \"quoted\"\\ name\x01";
  st.code = Code::kOverLimit;
  r.overall_code = Code::kOverLimit;
  st.retry_after = 999;
  EXPECT_EQ(RenderCheckResponse(r), reference(r));
  DescriptorStatus a = st, b = st;
  b.name.clear();
  b.code = Code::kOk;
  b.unit = Unit::kDay;
  st.limits = {a, b};
  EXPECT_EQ(RenderCheckResponse(r), reference(r));
}

}  // namespace
}  // namespace sluice::service

namespace sluice::service {
namespace {

// An engine on the embedded store with `rules` (one domain "web", descriptor key "ip").
std::unique_ptr<Engine> EngineFor(const std::string& rule) {
  auto c = ParseConfig("domain: web\ndescriptors:\n  - key: ip\n    rate_limit: " + rule + "\n",
                       "check.yaml");
  EXPECT_TRUE(c.ok()) << c.status().message();
  auto e = Engine::Create(*c, Engine::Options{std::make_shared<MemoryStore>(),
                                              std::make_shared<ManualClock>(1785412800000000)});
  EXPECT_TRUE(e.ok()) << e.status().message();
  return std::move(*e);
}

RateLimitResponse CheckIp(Engine& e, std::uint64_t hits) {
  RateLimitRequest req;
  req.domain = "web";
  req.descriptors.resize(1);
  req.descriptors[0].entries = {{"ip", "192.0.2.1"}};
  req.descriptors[0].has_hits_addend = true;
  req.descriptors[0].hits_addend = hits;
  RateLimitResponse r;
  const Status s = e.ShouldRateLimit(req, &r);
  EXPECT_TRUE(s.ok()) << s.message();
  return r;
}

std::string HeaderOf(const RateLimitResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.response_headers) {
    if (k == name) return v;
  }
  return "";
}

// Issue #20 item 5: /v1/check on a token bucket of 100/min, burst 20, answered header
// X-RateLimit-Limit: 20 and body "limit": 100. The limit is the capacity (docs/sluiced.md).
TEST(JsonApi, CheckBodyLimitIsTheCapacityAsInTheHeader) {
  auto e = EngineFor("{unit: minute, requests_per_unit: 100, algorithm: token_bucket, burst: 20}");
  const RateLimitResponse r = CheckIp(*e, 1);
  const auto j = nlohmann::json::parse(RenderCheckResponse(r));
  EXPECT_EQ(j.at("limit"), 20) << j.dump();
  EXPECT_EQ(HeaderOf(r, "x-ratelimit-limit"), "20");
  EXPECT_EQ(j.at("remaining"), 19);
}

// Issue #20 item 5: a cost above the capacity can never pass; it was answered like any
// denial, with Retry-After: 60. Now: no Retry-After, and the body says why.
TEST(JsonApi, ACostAboveTheCapacityIsDeniedWithoutRetryAfter) {
  auto e = EngineFor("{unit: minute, requests_per_unit: 5}");
  RateLimitResponse r = CheckIp(*e, 6);
  EXPECT_EQ(r.overall_code, Code::kOverLimit);
  EXPECT_EQ(HeaderOf(r, "retry-after"), "");
  auto j = nlohmann::json::parse(RenderCheckResponse(r));
  ASSERT_TRUE(j.contains("reason")) << j.dump();
  EXPECT_NE(j.at("reason").get<std::string>().find("capacity"), std::string::npos) << j.dump();
  // A cost that fits but not now: an ordinary denial, with Retry-After and no reason.
  EXPECT_EQ(CheckIp(*e, 1).overall_code, Code::kOk);
  r = CheckIp(*e, 5);
  EXPECT_EQ(r.overall_code, Code::kOverLimit);
  EXPECT_NE(HeaderOf(r, "retry-after"), "");
  EXPECT_FALSE(nlohmann::json::parse(RenderCheckResponse(r)).contains("reason"));
}

}  // namespace
}  // namespace sluice::service
