// The admin listener as an attacker meets it (issue #24 item 5), through the real binary
// on loopback: nothing of it on the public port, tokens that are almost right, requests
// too large or malformed (400, nothing changes), the console page without data, and a
// bare port on loopback only.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "admin_fixture.h"
#include "process.h"

namespace sluice::testing {
namespace {

const char* kToken = "security-test-token-0123456789abcdef";

class AdminSecurity : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(dir_.File("c.yaml"), kAdminConfig);
    WriteTokenFile(dir_.File("token"), std::string(kToken) + "\n");
    d_ = StartSluiced(dir_.File("c.yaml"), dir_.File("log"),
                      {"--admin", ":0", "--admin-token-file", dir_.File("token")});
    admin_ = AdminPort(d_);
    ASSERT_GT(admin_, 0) << d_.LogText();
  }
  httplib::Client Admin() const {
    httplib::Client c("127.0.0.1", admin_);
    c.set_read_timeout(10, 0);
    return c;
  }
  int Check() {
    httplib::Client c("127.0.0.1", d_.http_port);
    auto r = c.Get("/v1/check?domain=web&key=user&value=victim");
    return r ? r->status : -1;
  }
  // The key is used up: a reset that took effect would make it pass again.
  void UseUpTheKey() {
    for (int i = 0; i < 3; ++i) ASSERT_EQ(Check(), 200);
    ASSERT_EQ(Check(), 429);
  }
  void ExpectNoReset() {
    EXPECT_EQ(Check(), 429);
    EXPECT_EQ(d_.LogText().find("event=admin_reset "), std::string::npos) << d_.LogText();
  }
  // Sends `bytes` on a fresh connection and returns what comes back until close.
  std::string Raw(const std::string& bytes) const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(admin_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string out;
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      char buf[4096];
      for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, n);
    }
    ::close(fd);
    return out;
  }
  httplib::Headers Auth() const { return {{"Authorization", std::string("Bearer ") + kToken}}; }

  TempDir dir_;
  Sluiced d_;
  int admin_ = 0;
};

TEST_F(AdminSecurity, NothingOfItIsOnThePublicPort) {
  httplib::Client pub("127.0.0.1", d_.http_port);
  for (const char* path : {"/ui", "/rlconfig", "/admin/limits", "/admin/stats", "/admin/top",
                           "/admin/counters?domain=web&key=user&value=victim",
                           "/admin/explain?domain=web&key=user&value=victim"}) {
    auto r = pub.Get(path, Auth());
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path;
  }
  UseUpTheKey();
  auto reset = pub.Post("/admin/reset", Auth(), "domain=web&key=user&value=victim",
                        "application/x-www-form-urlencoded");
  ASSERT_TRUE(reset);
  EXPECT_EQ(reset->status, 404);
  ExpectNoReset();
}

TEST_F(AdminSecurity, AlmostRightTokensAreRefused) {
  const std::string t = kToken;
  const std::vector<std::string> almost = {"Bearer " + t.substr(0, t.size() - 1),
                                           "Bearer " + t + "x",
                                           "Bearer x" + t,
                                           "Bearer ",
                                           "Bearer",
                                           t,
                                           "Token " + t,
                                           "Bearer " + std::string(t.size(), 'a')};
  for (const std::string& header : almost) {
    auto r = Admin().Get("/admin/limits", {{"Authorization", header}});
    ASSERT_TRUE(r) << header;
    EXPECT_EQ(r->status, 403) << header;
    EXPECT_EQ(r->body.find(kToken), std::string::npos);
  }
  // A token in the query string or a cookie is not a bearer token.
  auto q = Admin().Get(std::string("/admin/limits?token=") + kToken);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->status, 401);
  auto c = Admin().Get("/admin/limits", {{"Cookie", std::string("token=") + kToken}});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->status, 401);
  // The scheme is case-insensitive (RFC 9110).
  auto ok = Admin().Get("/admin/limits", {{"Authorization", std::string("bearer ") + kToken}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST_F(AdminSecurity, TooLargeRequestsAre400AndChangeNothing) {
  UseUpTheKey();
  const std::string form = "application/x-www-form-urlencoded";
  const std::string reset = "domain=web&key=user&value=victim";
  // Over the admin bound (4096), over the transport's (64 KiB), a header section over 8 KiB.
  for (std::size_t pad : {std::size_t{5000}, std::size_t{100000}}) {
    auto r =
        Admin().Post("/admin/reset", Auth(), reset + "&pad=" + std::string(pad, 'p'), form.c_str());
    ASSERT_TRUE(r) << pad;
    EXPECT_EQ(r->status, 400) << pad << " " << r->body;
    EXPECT_NE(r->body.find("\"error\""), std::string::npos) << r->body;
  }
  httplib::Headers big = Auth();
  big.emplace("X-Pad", std::string(20000, 'h'));
  auto h = Admin().Post("/admin/reset", big, reset, form.c_str());
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 400) << h->body;
  ExpectNoReset();
}

TEST_F(AdminSecurity, MalformedRequestsAre400AndChangeNothing) {
  UseUpTheKey();
  for (const char* bad : {"GET /admin/limits HTTP/9.9\r\n\r\n", "G\x01T / HTTP/1.1\r\n\r\n"}) {
    const std::string raw = Raw(bad);
    EXPECT_EQ(raw.rfind("HTTP/1.1 400", 0), 0u) << raw;
  }
  const std::string bad_path = Raw("GET /admin/%zz HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                                   std::string(kToken) + "\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(bad_path.rfind("HTTP/1.1 400", 0), 0u) << bad_path;
  for (const std::string& body :
       {std::string("domain=web&key=user&value=victim&value=x"), std::string("domain=&key=user"),
        std::string("domain=web&key=user&value=victim&hits=-1"),
        std::string("domain=web&key=user&value=%ZZ")}) {
    auto r = Admin().Post("/admin/reset", Auth(), body, "application/x-www-form-urlencoded");
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, 400) << body << " " << r->body;
  }
  ExpectNoReset();
}

TEST_F(AdminSecurity, ConsolePageHoldsNoDataAndAllowsNothingExternal) {
  auto r = Admin().Get("/ui");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
  const std::string csp = r->get_header_value("Content-Security-Policy");
  EXPECT_EQ(csp.rfind("default-src 'none';", 0), 0u) << csp;
  EXPECT_NE(csp.find("connect-src 'self'"), std::string::npos) << csp;
  EXPECT_NE(csp.find("frame-ancestors 'none'"), std::string::npos) << csp;
  EXPECT_EQ(r->body.find("per_user"), std::string::npos) << "the page must not carry rules";
  EXPECT_EQ(r->body.find("http://"), std::string::npos) << "nothing fetched from elsewhere";
  EXPECT_EQ(r->body.find("https://"), std::string::npos);
}

}  // namespace
}  // namespace sluice::testing
