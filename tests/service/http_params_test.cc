// One rule for request parameters in every sluiced entry point (issue #20 item 5): a
// parameter or JSON field that names one thing given twice, parameters in both the query
// and the body, and numbers that are not plain digits are answered 400 naming the
// parameter, never resolved one way by one API and another way by the next. Through the
// real HTTP front end in process, on the embedded store.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <memory>
#include <string>

#include "service/config.h"
#include "service/engine.h"
#include "service/http_server.h"
#include "sluice/memory_store.h"

namespace sluice::service {
namespace {

const char* kConfig = R"(domain: web
descriptors:
  - key: ip
    rate_limit: {unit: minute, requests_per_unit: 10}
---
domain: jobs
descriptors:
  - key: tenant
    rate_limit: {concurrency: 2, lease: 30s}
)";

class Front {
 public:
  Front() {
    auto c = ParseConfig(kConfig, "params.yaml");
    EXPECT_TRUE(c.ok()) << c.status().message();
    auto e = Engine::Create(*c, Engine::Options{std::make_shared<MemoryStore>(), nullptr});
    EXPECT_TRUE(e.ok()) << e.status().message();
    engine = std::move(*e);
    HttpOptions o;
    o.io_threads = 1;
    auto s = HttpServer::Start(*engine, "127.0.0.1:0", o, &ready);
    EXPECT_TRUE(s.ok()) << s.status().message();
    server = std::move(*s);
    client = std::make_unique<httplib::Client>("127.0.0.1", server->port());
  }
  // The status, with the body in `*body`.
  int Get(const std::string& target, std::string* body = nullptr) {
    return Done(client->Get(target.c_str()), body);
  }
  int Post(const std::string& target, const std::string& payload, std::string* body = nullptr,
           const char* type = "application/x-www-form-urlencoded") {
    return Done(client->Post(target.c_str(), payload, type), body);
  }

  std::atomic<bool> ready{true};
  std::unique_ptr<Engine> engine;
  std::unique_ptr<HttpServer> server;
  std::unique_ptr<httplib::Client> client;

 private:
  static int Done(const httplib::Result& r, std::string* body) {
    EXPECT_TRUE(r) << httplib::to_string(r.error());
    if (!r) return 0;
    if (body) *body = r->body;
    return r->status;
  }
};

#define EXPECT_400_NAMING(call, name)                                                 \
  do {                                                                                \
    std::string body_;                                                                \
    const int status_ = (call);                                                       \
    EXPECT_EQ(status_, 400) << body_;                                                 \
    EXPECT_NE(body_.find(name), std::string::npos) << #call << " answered " << body_; \
  } while (0)

TEST(HttpParams, ARepeatedParameterIs400NamingItInEveryEntryPoint) {
  Front f;
  // /v1/check took the first domain (an unknown one: 200, unlimited), /json the last.
  EXPECT_400_NAMING(f.Get("/v1/check?domain=zzz&domain=web&key=ip&value=1", &body_), "'domain'");
  // hits=5&hits=0 charged 5.
  EXPECT_400_NAMING(f.Get("/v1/check?domain=web&key=ip&value=1&hits=5&hits=0", &body_), "'hits'");
  EXPECT_400_NAMING(f.Post("/v1/check", "domain=web&key=ip&value=1&domain=web", &body_),
                    "'domain'");
  EXPECT_400_NAMING(f.Post("/v1/acquire?domain=jobs&key=tenant&value=t&domain=web", "", &body_),
                    "'domain'");
  EXPECT_400_NAMING(f.Post("/v1/release", "permit=a&permit=b", &body_), "'permit'");
  EXPECT_400_NAMING(f.Post("/v1/extend?permit=a&permit=b", "", &body_), "'permit'");
  const char* json = "application/json";
  EXPECT_400_NAMING(
      f.Post(
          "/json",
          R"({"domain":"zzz","domain":"web","descriptors":[{"entries":[{"key":"ip","value":"1"}]}]})",
          &body_, json),
      "\\\"domain\\\"");
  EXPECT_400_NAMING(
      f.Post(
          "/json",
          R"({"domain":"web","hits_addend":1,"hitsAddend":0,"descriptors":[{"entries":[{"key":"ip","value":"1"}]}]})",
          &body_, json),
      "hitsAddend");
  EXPECT_400_NAMING(
      f.Post(
          "/json",
          R"({"domain":"web","descriptors":[{"entries":[{"key":"ip","value":"1","value":"2"}]}]})",
          &body_, json),
      "\\\"value\\\"");
  // Repeated key=K&value=V pairs are a descriptor's entries, as documented: still fine.
  EXPECT_EQ(f.Get("/v1/check?domain=web&key=ip&value=1&key=ip&value=2"), 200);
}

TEST(HttpParams, QueryAndBodyParametersTogetherAre400) {
  Front f;
  // Merged, they made a descriptor that matched nothing: 200, unlimited.
  std::string body;
  EXPECT_EQ(f.Post("/v1/check?domain=web", "key=ip&value=1", &body), 400) << body;
  EXPECT_NE(body.find("query"), std::string::npos) << body;
  EXPECT_EQ(f.Post("/v1/acquire?domain=jobs", "key=tenant&value=t", &body), 400) << body;
  // Either alone is fine.
  EXPECT_EQ(f.Post("/v1/check", "domain=web&key=ip&value=1", &body), 200) << body;
  EXPECT_EQ(f.Post("/v1/check?domain=web&key=ip&value=1", "", &body), 200) << body;
}

TEST(HttpParams, HitsArePlainDigits) {
  Front f;
  EXPECT_400_NAMING(f.Get("/v1/check?domain=web&key=ip&value=1&hits=%2B3", &body_), "'hits'");
  EXPECT_400_NAMING(f.Get("/v1/check?domain=web&key=ip&value=1&hits=%203", &body_), "'hits'");
  EXPECT_400_NAMING(f.Get("/v1/check?domain=web&key=ip&value=1&hits=0x3", &body_), "'hits'");
  EXPECT_EQ(f.Get("/v1/check?domain=web&key=ip&value=1&hits=3"), 200);
}

}  // namespace
}  // namespace sluice::service
