// POST /v1/report (issue #21) on a real sluiced: usage charged after the fact by a
// service that is not behind Envoy, under each rule's `overage`, and bad usage values
// answered 400 with the reason, charging nothing.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "process.h"

namespace sluice::testing {
namespace {

using nlohmann::json;

// Token buckets of 1000 a day: one token comes back every 86.4 s, so nothing refills
// while a test runs, and no window boundary can fall between two requests.
const char* kConfig = R"(sluiced:
  reload_poll: 0
  default_algorithm: token_bucket
domain: llm
descriptors:
  - key: dropped
    rate_limit: {unit: day, requests_per_unit: 1000}
)";

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(dir.File("sluiced.yaml"), kConfig);
    d = StartSluiced(dir.File("sluiced.yaml"), dir.File("sluiced.log"));
    ASSERT_GT(d.http_port, 0);
  }
  httplib::Result Post(const std::string& path, const std::string& body) {
    httplib::Client c("127.0.0.1", d.http_port);
    c.set_read_timeout(10);
    return c.Post(path.c_str(), body, "application/json");
  }
  httplib::Result Report(const std::string& key, const std::string& usage) {
    return Post("/v1/report", R"({"domain":"llm","usage":)" + usage +
                                  R"(,"descriptors":[{"entries":[{"key":")" + key +
                                  R"(","value":"k1"}]}]})");
  }
  // What /json says is left for `key` (a descriptor hits_addend of 0 only looks).
  long Remaining(const std::string& key) {
    auto r = Post("/json", R"({"domain":"llm","descriptors":[{"entries":[{"key":")" + key +
                               R"(","value":"k1"}],"hits_addend":0}]})");
    if (!r) return -1;
    const json j = json::parse(r->body, nullptr, false);
    if (j.is_discarded() || !j.contains("statuses")) return -2;
    return j["statuses"][0].value("limitRemaining", 0L);
  }

  TempDir dir;
  Sluiced d;
};

TEST_F(ReportTest, AReportWithinTheBudgetIsCharged) {
  auto r = Report("dropped", "600");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["overallCode"], "OK") << r->body;
  EXPECT_EQ(Remaining("dropped"), 400);
  // A usage as a decimal string is the same (protobuf JSON's integers).
  ASSERT_TRUE(Report("dropped", "\"100\""));
  EXPECT_EQ(Remaining("dropped"), 300);
}

TEST_F(ReportTest, OverageRejectDropsAnOvershoot) {
  ASSERT_EQ(Report("dropped", "600")->status, 200);
  auto r = Report("dropped", "900");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["overallCode"], "OVER_LIMIT") << r->body;
  EXPECT_EQ(Remaining("dropped"), 400) << "reject: the report took nothing";
}

TEST_F(ReportTest, BadUsageIs400WithTheReasonAndChargesNothing) {
  const std::string d = R"("descriptors":[{"entries":[{"key":"dropped","value":"k1"}]}])";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"domain":"llm","usage":-5,)" + d + "}", "usage must not be negative"},
      {R"({"domain":"llm","usage":"lots",)" + d + "}", "usage must be a non-negative integer"},
      {R"({"domain":"llm","usage":1.5,)" + d + "}", "usage must be a non-negative integer"},
      {R"({"domain":"llm","usage":4294967297,)" + d + "}", "usage is larger than 4294967296"},
      {R"({"domain":"llm",)" + d + "}",
       "missing field \"usage\": the units to charge (a whole number 0-4294967296)"},
      {R"({"domain":"llm","usage":5,"hits_addend":2,)" + d + "}",
       "a report's cost is its \"usage\": hits_addend does not apply"},
  };
  for (const auto& [body, why] : cases) {
    auto r = Post("/v1/report", body);
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, 400) << body;
    EXPECT_EQ(json::parse(r->body, nullptr, false).value("error", ""), why) << body;
  }
  EXPECT_EQ(Remaining("dropped"), 1000);
  httplib::Client c("127.0.0.1", this->d.http_port);
  auto get = c.Get("/v1/report");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
}

}  // namespace
}  // namespace sluice::testing
