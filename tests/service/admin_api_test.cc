// sluiced's admin listener through the real binary on loopback (issue #24): off by
// default, /rlconfig moved off the public port (and the switch that keeps it there),
// bearer tokens (401, 403, a token file others can read refused at start), explain
// without charging (the replaced rule shown), counters, an audited reset, top limited
// keys (admin JSON and /metrics), bad and oversized admin requests answered 400 with no
// effect, and the admin listener's own rate limit.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "admin_fixture.h"
#include "process.h"

namespace sluice::testing {
namespace {

using nlohmann::json;

const char* kToken = "0123456789abcdef0123456789abcdef";

struct Admin {
  TempDir dir;
  Sluiced d;
  int port = 0;
  std::string token_file;
  httplib::Headers auth{{"Authorization", std::string("Bearer ") + kToken}};

  // sluiced with the admin listener on a free loopback port and `extra` flags.
  explicit Admin(std::vector<std::string> extra = {}) {
    WriteFile(dir.File("c.yaml"), kAdminConfig);
    token_file = dir.File("token");
    WriteTokenFile(token_file, std::string("# the console's token\n") + kToken + "\n");
    std::vector<std::string> args = {"--admin", "0", "--admin-token-file", token_file};
    args.insert(args.end(), extra.begin(), extra.end());
    d = StartSluiced(dir.File("c.yaml"), dir.File("log"), args);
    port = AdminPort(d);
  }
  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(10, 0);
    return c;
  }
  httplib::Client Public() const {
    httplib::Client c("127.0.0.1", d.http_port);
    c.set_read_timeout(10, 0);
    return c;
  }
  json Get(const std::string& path) {
    auto r = Client().Get(path, auth);
    EXPECT_TRUE(r) << path;
    if (!r) return nullptr;
    EXPECT_EQ(r->status, 200) << path << ": " << r->body;
    return json::parse(r->body, nullptr, false);
  }
  int Check(const std::string& query) {
    auto r = Public().Get("/v1/check?" + query);
    return r ? r->status : -1;
  }
};

TEST(AdminListener, OffByDefaultAndAbsentFromThePublicPort) {
  TempDir dir;
  WriteFile(dir.File("c.yaml"), kAdminConfig);
  Sluiced d = StartSluiced(dir.File("c.yaml"), dir.File("log"));
  ASSERT_GT(d.http_port, 0);
  EXPECT_NE(d.LogText().find(" admin=off"), std::string::npos) << d.LogText();
  httplib::Client c("127.0.0.1", d.http_port);
  for (const char* path : {"/rlconfig", "/admin/limits", "/admin/explain", "/admin/top", "/ui"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path;
  }
  auto r = c.Get("/rlconfig");
  EXPECT_NE(r->body.find("admin listener"), std::string::npos) << r->body;
}

TEST(AdminListener, RlconfigMovesToTheAdminListener) {
  Admin a;
  ASSERT_GT(a.port, 0) << a.d.LogText();
  auto pub = a.Public().Get("/rlconfig");
  ASSERT_TRUE(pub);
  EXPECT_EQ(pub->status, 404);
  auto anon = a.Client().Get("/rlconfig");
  ASSERT_TRUE(anon);
  EXPECT_EQ(anon->status, 401);
  auto r = a.Client().Get("/rlconfig", a.auth);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("web.user: unit=HOUR requests_per_unit=3"), std::string::npos) << r->body;
  // The API's routes are not on the admin listener either.
  auto check = a.Client().Get("/v1/check?domain=web&key=user&value=x", a.auth);
  ASSERT_TRUE(check);
  EXPECT_EQ(check->status, 404);
}

TEST(AdminListener, PublicRlconfigSwitchKeepsTheOldRoute) {
  TempDir dir;
  WriteFile(dir.File("c.yaml"), kAdminConfig);
  Sluiced d = StartSluiced(dir.File("c.yaml"), dir.File("log"), {"--public-rlconfig"});
  ASSERT_GT(d.http_port, 0);
  httplib::Client c("127.0.0.1", d.http_port);
  auto r = c.Get("/rlconfig");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("web.api_key:"), std::string::npos) << r->body;
}

TEST(AdminAuth, NoToken401WrongToken403) {
  Admin a;
  ASSERT_GT(a.port, 0);
  for (const char* path : {"/admin/limits", "/admin/stats", "/admin/top",
                           "/admin/explain?domain=web&key=user&value=x"}) {
    auto none = a.Client().Get(path);
    ASSERT_TRUE(none) << path;
    EXPECT_EQ(none->status, 401) << path;
    EXPECT_EQ(none->get_header_value("WWW-Authenticate"), "Bearer realm=\"sluiced-admin\"");
    auto wrong =
        a.Client().Get(path, {{"Authorization", "Bearer 0123456789abcdef0123456789abcdeX"}});
    ASSERT_TRUE(wrong) << path;
    EXPECT_EQ(wrong->status, 403) << path;
    auto basic = a.Client().Get(path, {{"Authorization", std::string("Basic ") + kToken}});
    ASSERT_TRUE(basic);
    EXPECT_EQ(basic->status, 403) << path;
  }
  // A reset with a wrong token does nothing.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.Check("domain=web&key=user&value=eve"), 200);
  auto reset =
      a.Client().Post("/admin/reset", {{"Authorization", "Bearer wrong-token-wrong-token"}},
                      "domain=web&key=user&value=eve", "application/x-www-form-urlencoded");
  ASSERT_TRUE(reset);
  EXPECT_EQ(reset->status, 403);
  EXPECT_EQ(a.Check("domain=web&key=user&value=eve"), 429);
  EXPECT_NE(a.d.LogText().find("event=admin_auth_failed peer=127.0.0.1:"), std::string::npos);
}

TEST(AdminAuth, TokenFileOthersCanReadIsRefusedAtStart) {
  TempDir dir;
  WriteFile(dir.File("c.yaml"), kAdminConfig);
  const std::string token = dir.File("token");
  WriteFile(token, std::string(kToken) + "\n");
  ::chmod(token.c_str(), 0644);
  auto p = Process::Spawn({SluicedBinary(), "--config", dir.File("c.yaml"), "--http", "127.0.0.1:0",
                           "--grpc", "127.0.0.1:0", "--admin", "0", "--admin-token-file", token},
                          dir.File("log"));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->Wait(std::chrono::seconds(20)), 1);
  const std::string log = ReadFile(dir.File("log"));
  EXPECT_NE(log.find("admin token file " + token + " has mode 0644"), std::string::npos) << log;
  EXPECT_EQ(log.find(kToken), std::string::npos) << "the token must never be logged";

  // --admin without a token file, and a token too short to be a secret.
  auto q = Process::Spawn({SluicedBinary(), "--config", dir.File("c.yaml"), "--http", "127.0.0.1:0",
                           "--grpc", "127.0.0.1:0", "--admin", "0"},
                          dir.File("log2"));
  ASSERT_TRUE(q);
  EXPECT_EQ(q->Wait(std::chrono::seconds(20)), 1);
  EXPECT_NE(ReadFile(dir.File("log2")).find("needs --admin-token-file"), std::string::npos);
  WriteTokenFile(token, "short\n");
  auto s = Process::Spawn({SluicedBinary(), "--config", dir.File("c.yaml"), "--http", "127.0.0.1:0",
                           "--grpc", "127.0.0.1:0", "--admin", "0", "--admin-token-file", token},
                          dir.File("log3"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->Wait(std::chrono::seconds(20)), 1);
  EXPECT_NE(ReadFile(dir.File("log3")).find(token + ":1: a token needs at least 16 bytes"),
            std::string::npos)
      << ReadFile(dir.File("log3"));
}

TEST(AdminExplain, ShowsRulesReplacedKeysAndDecisionWithoutCharging) {
  Admin a;
  ASSERT_GT(a.port, 0);
  const std::string body =
      R"({"domain":"web","descriptors":[{"entries":[{"key":"api_key","value":"k1"}]},)"
      R"({"entries":[{"key":"path","value":"/x"}]}]})";
  for (int i = 0; i < 10; ++i) {
    auto r = a.Client().Post("/admin/explain", a.auth, body, "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["would_be"], "OK");
    EXPECT_EQ(j["charged"], false);
    const json& key = j["descriptors"][0]["limits"][0];
    EXPECT_EQ(key["name"], "per_key");
    EXPECT_EQ(key["algorithm"], "fixed_window");
    EXPECT_EQ(key["policy"], "fw.5.3600000.0");
    EXPECT_EQ(key["store_key"], "sluiced:{web%3Aapi_key%3Ak1}:fw.5.3600000.0");
    EXPECT_EQ(key["decision"]["remaining"], 5) << "explain must not charge: call " << i;
    const json& path = j["descriptors"][1]["limits"][0];
    EXPECT_EQ(path["name"], "per_path");
    EXPECT_EQ(path["replaced"], true);
    EXPECT_EQ(path["replaced_by"], "per_key");
    EXPECT_FALSE(path.contains("store_key"));
  }
  // Five real requests still pass: ten explains charged nothing.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a.Check("domain=web&key=api_key&value=k1"), 200) << i;
  EXPECT_EQ(a.Check("domain=web&key=api_key&value=k1"), 429);
  const json over = a.Get("/admin/explain?domain=web&key=api_key&value=k1");
  EXPECT_EQ(over["would_be"], "OVER_LIMIT");
  EXPECT_EQ(over["descriptors"][0]["limits"][0]["decision"]["remaining"], 0);

  // The nginx form: request headers as auth_request sends them (X-Api-Key -> api_key).
  auto n = a.Client().Post("/admin/explain/nginx/web", a.auth, R"({"x-api-key":"k1"})",
                           "application/json");
  ASSERT_TRUE(n);
  ASSERT_EQ(n->status, 200) << n->body;
  EXPECT_EQ(json::parse(n->body)["would_be"], "OVER_LIMIT") << n->body;
}

TEST(AdminCounters, StateResetAndAuditLine) {
  Admin a;
  ASSERT_GT(a.port, 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.Check("domain=web&key=user&value=bob"), 200);
  EXPECT_EQ(a.Check("domain=web&key=user&value=bob"), 429);
  const json c = a.Get("/admin/counters?domain=web&key=user&value=bob");
  ASSERT_EQ(c["keys"].size(), 1u) << c.dump();
  EXPECT_EQ(c["keys"][0]["remaining"], 0);
  EXPECT_EQ(c["keys"][0]["used"], 3);
  EXPECT_EQ(c["keys"][0]["limit"], 3);
  EXPECT_GT(c["keys"][0]["retry_after_ms"].get<long long>(), 0);

  auto get = a.Client().Get("/admin/reset?domain=web&key=user&value=bob", a.auth);
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405) << "a reset changes state: POST only";
  auto r = a.Client().Post("/admin/reset", a.auth, "domain=web&key=user&value=bob",
                           "application/x-www-form-urlencoded");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(a.Check("domain=web&key=user&value=bob"), 200);
  EXPECT_TRUE(
      WaitFor([&] { return a.d.LogText().find("event=admin_reset") != std::string::npos; }));
  const std::string log = a.d.LogText();
  const std::regex audit(
      R"(event=admin_reset peer=127\.0\.0\.1:\d+ token=t[0-9a-f]{8} domain=web keys=sluiced:\{web%3Auser%3Abob\}:fw\.3\.3600000\.0)");
  EXPECT_TRUE(std::regex_search(log, audit)) << log;
  EXPECT_EQ(log.find(kToken), std::string::npos);
  // Another key is untouched by the reset; a descriptor without a limit is an error.
  auto none = a.Client().Post("/admin/reset", a.auth, "domain=web&key=nothing&value=1",
                              "application/x-www-form-urlencoded");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 400) << none->body;
}

TEST(AdminTopKeys, DenialsShowPerRuleInJsonAndMetrics) {
  Admin a;
  ASSERT_GT(a.port, 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.Check("domain=web&key=user&value=mallory"), 200);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(a.Check("domain=web&key=user&value=mallory"), 429);
  for (int i = 0; i < 4; ++i) a.Check("domain=web&key=user&value=trudy");  // 1 denial
  const json top = a.Get("/admin/top");
  ASSERT_EQ(top["rules"].size(), 1u) << top.dump();
  const json& rule = top["rules"][0];
  EXPECT_EQ(rule["name"], "per_user");
  EXPECT_EQ(rule["denials"], 8);
  ASSERT_EQ(rule["keys"].size(), 2u);
  EXPECT_EQ(rule["keys"][0]["denials"], 7);
  EXPECT_EQ(rule["keys"][0]["entries"][0]["value"], "mallory");
  EXPECT_EQ(rule["keys"][1]["entries"][0]["value"], "trudy");
  auto m = a.Public().Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("sluiced_top_limited_key_denials{domain=\"web\",descriptor=\"user\","
                         "rank=\"1\",key=\"web%3Auser%3Amallory\"} 7"),
            std::string::npos)
      << m->body;
}

TEST(AdminBadInput, MalformedAndOversizedAre400WithoutEffect) {
  Admin a;
  ASSERT_GT(a.port, 0);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.Check("domain=web&key=user&value=zed"), 200);
  const std::string form = "application/x-www-form-urlencoded";
  struct Bad {
    std::string path, body, type;
  } bad[] = {
      {"/admin/reset", "domain=web&key=user&value=zed&" + std::string(8000, 'a') + "=1", form},
      {"/admin/reset", "domain=web&key=user&value=%zz", form},
      {"/admin/reset", "domain=web&domain=web&key=user&value=zed", form},
      {"/admin/reset?domain=web&key=user&value=zed", "domain=web", form},
      {"/admin/explain", "{\"domain\":\"web\",", "application/json"},
      {"/admin/explain", R"({"domain":"web","descriptors":[],"bogus":1})", "application/json"},
      {"/admin/explain/nginx/web", "[1,2]", "application/json"},
  };
  for (const Bad& b : bad) {
    auto r = a.Client().Post(b.path, a.auth, b.body, b.type.c_str());
    ASSERT_TRUE(r) << b.path;
    EXPECT_EQ(r->status, 400) << b.path << " " << b.body.substr(0, 60);
    const json j = json::parse(r->body, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("error") && !j["error"].get<std::string>().empty())
        << r->body;
  }
  // Nothing was reset.
  EXPECT_EQ(a.Check("domain=web&key=user&value=zed"), 429);
  EXPECT_EQ(a.d.LogText().find("event=admin_reset "), std::string::npos);
  auto unknown = a.Client().Get("/admin/nothing", a.auth);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
}

TEST(AdminRateLimit, AdminCallsAreLimitedPerClient) {
  Admin a({"--admin-rate", "5"});
  ASSERT_GT(a.port, 0);
  int ok = 0, limited = 0;
  std::string retry;
  for (int i = 0; i < 8; ++i) {
    auto r = a.Client().Get("/admin/limits", a.auth);
    ASSERT_TRUE(r);
    if (r->status == 200) ++ok;
    if (r->status == 429) {
      ++limited;
      retry = r->get_header_value("Retry-After");
    }
  }
  // A bucket of 5 refilled 5 per minute: at most one more comes back in the seconds
  // these calls take.
  EXPECT_GE(ok, 5);
  EXPECT_LE(ok, 6);
  EXPECT_EQ(ok + limited, 8);
  EXPECT_FALSE(retry.empty());
  // Unauthenticated calls are counted too (a token cannot be guessed at line rate).
  auto r = a.Client().Get("/admin/limits");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
}

TEST(AdminLimits, LoadedLimitsAsJson) {
  Admin a;
  ASSERT_GT(a.port, 0);
  const json j = a.Get("/admin/limits");
  ASSERT_EQ(j["limits"].size(), 3u) << j.dump();
  bool seen = false;
  for (const json& l : j["limits"]) {
    if (l["name"] != "per_key") continue;
    seen = true;
    EXPECT_EQ(l["replaces"], json::array({"per_path"}));
    EXPECT_EQ(l["capacity"], 5);
    EXPECT_EQ(l["unit"], "hour");
    EXPECT_EQ(l["failure_mode"], "fail_open");
  }
  EXPECT_TRUE(seen);
  const json s = a.Get("/admin/stats");
  EXPECT_EQ(s["store"]["reachable"], true);
  EXPECT_EQ(s["rules"].size(), 3u);
}

}  // namespace
}  // namespace sluice::testing

namespace sluice::testing {
namespace {

// The config file's `sluiced:` block has the same settings as the flags.
TEST(AdminListener, FromTheConfigFile) {
  TempDir dir;
  const std::string token = dir.File("token");
  WriteTokenFile(token, std::string(kToken) + "\n");
  const std::string settings = "sluiced:\n  admin: 127.0.0.1:0\n  admin_token_file: " + token +
                               "\n  public_rlconfig: true\n";
  WriteFile(dir.File("c.yaml"),
            settings + std::string(kAdminConfig).substr(std::string(kAdminConfig).find("\n") + 1));
  Sluiced d = StartSluiced(dir.File("c.yaml"), dir.File("log"));
  const int port = AdminPort(d);
  ASSERT_GT(port, 0) << d.LogText();
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/admin/limits", {{"Authorization", std::string("Bearer ") + kToken}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  httplib::Client pub("127.0.0.1", d.http_port);
  auto rl = pub.Get("/rlconfig");
  ASSERT_TRUE(rl);
  EXPECT_EQ(rl->status, 200) << "public_rlconfig: true";

  // A bad address names the file and line.
  WriteFile(dir.File("bad.yaml"),
            "sluiced:\n  admin: nowhere\n" +
                std::string(kAdminConfig).substr(std::string(kAdminConfig).find("\n") + 1));
  auto p = Process::Spawn({SluicedBinary(), "--config", dir.File("bad.yaml")}, dir.File("bad.log"));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->Wait(std::chrono::seconds(20)), 1);
  EXPECT_NE(ReadFile(dir.File("bad.log")).find(dir.File("bad.yaml") + ":2:"), std::string::npos)
      << ReadFile(dir.File("bad.log"));
}

}  // namespace
}  // namespace sluice::testing
