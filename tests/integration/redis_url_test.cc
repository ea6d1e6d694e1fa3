// Every URL form of docs/redis.md ("URLs"), the malformed combinations, the
// RedisStoreOptions fields that complete a URL, and the reply classification routers
// act on. Pure logic: no server.
#include <gtest/gtest.h>

#include "redis/reply.h"
#include "redis/url.h"
#include "sluice/redis_store.h"

namespace sluice::testing {
namespace {

using redis::ParseUrl;
using redis::Topology;

TEST(RedisUrlForms, TlsStandalone) {
  auto u = ParseUrl("rediss://alice:pw@cache.example.com:6380/3?tls_ca=%2Fetc%2Fca.pem");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->topology, Topology::kStandalone);
  EXPECT_TRUE(u->tls.enabled);
  EXPECT_EQ(u->host, "cache.example.com");
  EXPECT_EQ(u->port, 6380);
  EXPECT_EQ(u->db, 3);
  EXPECT_EQ(u->user, "alice");
  EXPECT_EQ(u->password, "pw");
  EXPECT_EQ(u->tls.ca_file, "/etc/ca.pem");
  EXPECT_FALSE(u->tls.insecure);
  EXPECT_EQ(u->Describe(), "rediss://cache.example.com:6380/3");

  u = ParseUrl(
      "rediss://h?tls_cert=/c.pem&tls_key=/k.pem&tls_sni=redis.internal&tls_insecure=1&db=2");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->port, 6379);
  EXPECT_EQ(u->tls.cert_file, "/c.pem");
  EXPECT_EQ(u->tls.key_file, "/k.pem");
  EXPECT_EQ(u->tls.sni, "redis.internal");
  EXPECT_TRUE(u->tls.insecure);
  EXPECT_EQ(u->db, 2);
}

TEST(RedisUrlForms, ClusterSeeds) {
  auto u = ParseUrl("redis-cluster://:pw@10.0.0.1:7000,10.0.0.2:7001,[::1]:7002");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->topology, Topology::kCluster);
  EXPECT_FALSE(u->tls.enabled);
  ASSERT_EQ(u->endpoints.size(), 3u);
  EXPECT_EQ(u->endpoints[0].host, "10.0.0.1");
  EXPECT_EQ(u->endpoints[1].port, 7001);
  EXPECT_EQ(u->endpoints[2].host, "::1");
  EXPECT_EQ(u->host, "10.0.0.1");
  EXPECT_EQ(u->port, 7000);
  EXPECT_EQ(u->password, "pw");
  EXPECT_EQ(u->Describe(), "redis-cluster://10.0.0.1:7000,10.0.0.2:7001,[::1]:7002");

  u = ParseUrl("rediss-cluster://h1:7000?tls_insecure=1");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->topology, Topology::kCluster);
  EXPECT_TRUE(u->tls.enabled);
  EXPECT_TRUE(u->tls.insecure);
  // A trailing slash is no database.
  EXPECT_TRUE(ParseUrl("redis-cluster://h1:7000/").ok());
}

TEST(RedisUrlForms, SentinelGroup) {
  auto u = ParseUrl(
      "redis-sentinel://:datapw@s1:26379,s2,s3:26380/mymaster?db=4&sentinel_user=mon&"
      "sentinel_password=s%26pw");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->topology, Topology::kSentinel);
  ASSERT_EQ(u->endpoints.size(), 3u);
  EXPECT_EQ(u->endpoints[1].host, "s2");
  EXPECT_EQ(u->endpoints[1].port, 26379) << "sentinels default to 26379";
  EXPECT_EQ(u->endpoints[2].port, 26380);
  EXPECT_EQ(u->master_name, "mymaster");
  EXPECT_EQ(u->db, 4);
  EXPECT_EQ(u->password, "datapw");
  EXPECT_EQ(u->sentinel_user, "mon");
  EXPECT_EQ(u->sentinel_password, "s&pw");
  EXPECT_EQ(u->Describe(), "redis-sentinel://s1:26379,s2:26379,s3:26380/mymaster?db=4");

  u = ParseUrl("rediss-sentinel://s1/m?tls_ca=/ca.pem");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_TRUE(u->tls.enabled);
  EXPECT_EQ(u->master_name, "m");
}

TEST(RedisUrlForms, DatabaseInTheQueryOfAPlainUrl) {
  auto u = ParseUrl("redis://h:1?db=7");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->db, 7);
}

// The native module (docs/redis.md): on unless module=off; any topology, and unix://.
TEST(RedisUrlForms, ModuleOffForcesLua) {
  for (const char* url : {"redis://h:1", "redis://h:1?module=on", "unix:///s?module=on"}) {
    auto u = ParseUrl(url);
    ASSERT_TRUE(u.ok()) << url << " " << u.status().ToString();
    EXPECT_TRUE(u->module) << url;
  }
  for (const char* url : {"redis://h:1?module=off", "redis-cluster://h:1?module=off",
                          "redis-sentinel://s/m?module=off&db=1", "unix:///s?module=off"}) {
    auto u = ParseUrl(url);
    ASSERT_TRUE(u.ok()) << url << " " << u.status().ToString();
    EXPECT_FALSE(u->module) << url;
  }
}

TEST(RedisUrlForms, MalformedCombinationsNameThePart) {
  const std::pair<const char*, const char*> bad[] = {
      {"redis://h:1?tls_ca=/ca.pem", "tls_ca needs TLS"},
      {"redis://h:1?tls_insecure=1", "tls_insecure needs TLS"},
      {"redis-cluster://h:1?tls_sni=x", "tls_sni needs TLS"},
      {"rediss://h:1?tls_cert=/c.pem", "tls_cert needs tls_key"},
      {"rediss://h:1?tls_key=/k.pem", "tls_key needs tls_cert"},
      {"rediss://h:1?tls_insecure=yes", "tls_insecure must be 1 or 0"},
      {"rediss://h:1?tls_ca=", "'tls_ca' is empty"},
      {"redis-sentinel://s1:26379", "needs the master name"},
      {"redis-sentinel://s1:26379/", "needs the master name"},
      {"redis-cluster://h:7000/2", "only database 0"},
      {"redis-cluster://h:7000?db=1", "only database 0"},
      {"redis://h:1?sentinel_password=x", "need a redis-sentinel:// URL"},
      {"redis-sentinel://s/m?sentinel_user=u", "sentinel_user needs sentinel_password"},
      {"redis://a:1,b:2", "one host only"},
      {"redis://h:1/2?db=3", "database is given twice"},
      {"redis://h:1?db=1&db=2", "given twice"},
      {"redis://h:1?timeout=5", "unknown parameter 'timeout'"},
      {"redis://h:1?db", "has no value"},
      {"redis-cluster://h:1,,h2:2", "missing host"},
      {"redis-cluster://h:1,h2:x", "port 'x'"},
      {"redis-sentinel://s/m?sentinel_password=%zz", "%-escape in parameter"},
      {"rediss+cluster://h:1", "unknown scheme"},
      {"unix:///s?tls_ca=/x", "unix:// takes only db=N"},
      {"redis://h:1?module=no", "module must be on or off"},
      {"redis://h:1?module=off&module=on", "given twice"},
  };
  for (const auto& [url, why] : bad) {
    auto u = ParseUrl(url);
    ASSERT_FALSE(u.ok()) << url;
    EXPECT_EQ(u.status().code(), ErrorCode::kInvalidArgument) << url;
    EXPECT_NE(u.status().message().find(why), std::string::npos)
        << url << " -> " << u.status().ToString();
  }
}

TEST(RedisUrlForms, PasswordsInTheQueryAreMaskedInErrors) {
  auto u = ParseUrl("redis-sentinel://:hunter2@s/m?sentinel_password=swordfish&bogus=1");
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().message().find("hunter2"), std::string::npos) << u.status().ToString();
  EXPECT_EQ(u.status().message().find("swordfish"), std::string::npos) << u.status().ToString();
}

Status CreateStatus(RedisStoreOptions o) {
  o.connect_timeout = 200'000;
  return RedisStore::Create(std::move(o)).status();
}

TEST(RedisUrlFields, FieldsAreValidatedWithTheUrl) {
  RedisStoreOptions o;
  o.url = "redis://127.0.0.1:1";
  o.tls_ca = "/etc/ca.pem";
  Status s = CreateStatus(o);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("tls_ca needs TLS"), std::string::npos) << s.ToString();

  o = {};
  o.url = "rediss://127.0.0.1:1?tls_cert=/c.pem";
  o.tls_key = "/k.pem";  // completes the URL's certificate: valid
  s = CreateStatus(o);
  EXPECT_NE(s.code(), ErrorCode::kInvalidArgument) << s.ToString();

  o = {};
  o.url = "redis://127.0.0.1:1";
  o.sentinel_password = "x";
  s = CreateStatus(o);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("sentinel"), std::string::npos) << s.ToString();
}

TEST(RedisUrlFields, TopologiesNotBuiltYetAreUnimplementedNamingTheScheme) {
  for (const char* url : {"redis-cluster://127.0.0.1:1", "redis-sentinel://127.0.0.1:1/m",
                          "rediss://127.0.0.1:1", "rediss-cluster://127.0.0.1:1"}) {
    RedisStoreOptions o;
    o.url = url;
    const Status s = CreateStatus(o);
    const std::string scheme = std::string(url).substr(0, std::string(url).find("//") + 2);
    // Valid URLs: never InvalidArgument. Port 1 has no server, so never ok either.
    EXPECT_FALSE(s.ok()) << url;
    EXPECT_NE(s.code(), ErrorCode::kInvalidArgument) << s.ToString();
    // Until a topology is built, Create says so, naming the scheme.
    if (s.code() == ErrorCode::kUnimplemented) {
      EXPECT_NE(s.message().find(scheme), std::string::npos) << s.ToString();
    }
  }
}

TEST(RedisReply, ClassifiesTheErrorsRoutersActOn) {
  using redis::ClassifyError;
  using redis::ErrorKind;
  EXPECT_EQ(ClassifyError("MOVED 3999 127.0.0.1:6381"), ErrorKind::kMoved);
  EXPECT_EQ(ClassifyError("ASK 3999 127.0.0.1:6381"), ErrorKind::kAsk);
  EXPECT_EQ(ClassifyError("TRYAGAIN Multiple keys request during rehashing of slot"),
            ErrorKind::kTryAgain);
  EXPECT_EQ(ClassifyError("CLUSTERDOWN The cluster is down"), ErrorKind::kClusterDown);
  EXPECT_EQ(ClassifyError("NOSCRIPT No matching script. Please use EVAL."), ErrorKind::kNoScript);
  EXPECT_EQ(ClassifyError("READONLY You can't write against a read only replica."),
            ErrorKind::kReadOnly);
  EXPECT_EQ(ClassifyError("LOADING Redis is loading the dataset in memory"), ErrorKind::kLoading);
  EXPECT_EQ(ClassifyError("OOM command not allowed"), ErrorKind::kOther);
  EXPECT_EQ(ClassifyError("ASKING"), ErrorKind::kOther) << "a word that starts like ASK";
  EXPECT_EQ(ClassifyError("ERR Error running script"), ErrorKind::kOther);
  EXPECT_TRUE(redis::ProvesNotRun(ErrorKind::kMoved));
  EXPECT_TRUE(redis::ProvesNotRun(ErrorKind::kNoScript));
  EXPECT_FALSE(redis::ProvesNotRun(ErrorKind::kOther));
  EXPECT_FALSE(redis::ProvesNotRun(ErrorKind::kNone));
}

TEST(RedisReply, ParsesRedirects) {
  redis::Redirect r;
  ASSERT_TRUE(redis::ParseRedirect("MOVED 3999 127.0.0.1:6381", &r));
  EXPECT_EQ(r.kind, redis::ErrorKind::kMoved);
  EXPECT_EQ(r.slot, 3999);
  EXPECT_EQ(r.host, "127.0.0.1");
  EXPECT_EQ(r.port, 6381);
  ASSERT_TRUE(redis::ParseRedirect("ASK 0 [::1]:7000", &r));
  EXPECT_EQ(r.kind, redis::ErrorKind::kAsk);
  EXPECT_EQ(r.host, "::1");
  ASSERT_TRUE(redis::ParseRedirect("MOVED 1 :6380", &r)) << "unknown endpoint: same host";
  EXPECT_EQ(r.host, "");
  for (const char* bad :
       {"MOVED", "MOVED x 1.2.3.4:1", "MOVED 16384 h:1", "MOVED 1 h", "ASK 1 h:0", "NOSCRIPT x"}) {
    EXPECT_FALSE(redis::ParseRedirect(bad, &r)) << bad;
  }
}

// The decide scripts answer 4 integers per check; a reply of another shape (a hostile
// or confused peer, a script of another version) must never become a decision.
redis::ReplyPtr ReadOne(std::string_view wire) {
  redis::ReaderPtr reader = redis::NewReader();
  EXPECT_EQ(redisReaderFeed(reader.get(), wire.data(), wire.size()), REDIS_OK);
  void* r = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader.get(), &r), REDIS_OK);
  return redis::ReplyPtr(static_cast<redisReply*>(r));
}

// Found by the redis_reply fuzzer: hiredis allocates an array's element pointers when
// it reads the header, so "*810000500" alone made it calloc 6.5 GB. sluice's reader
// refuses a header no reply within the size cap could fill, before allocating.
TEST(RedisReply, AnArrayHeaderBeyondTheReplyCapIsAnErrorNotAnAllocation) {
  for (std::string_view wire : {"*810000500\r\n", "*2796204\r\n", "*2147483647\r\n"}) {
    redis::ReaderPtr reader = redis::NewReader();
    ASSERT_EQ(redisReaderFeed(reader.get(), wire.data(), wire.size()), REDIS_OK);
    void* r = nullptr;
    EXPECT_EQ(redisReaderGetReply(reader.get(), &r), REDIS_ERR) << wire;
    EXPECT_EQ(r, nullptr);
  }
  // At the bound and below, arrays still parse (their elements arrive later).
  redis::ReaderPtr reader = redis::NewReader();
  const std::string header = "*" + std::to_string(redis::kMaxReplyElements) + "\r\n";
  ASSERT_EQ(redisReaderFeed(reader.get(), header.data(), header.size()), REDIS_OK);
  void* r = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader.get(), &r), REDIS_OK);
  EXPECT_EQ(r, nullptr) << "waiting for the elements";
  auto nil = ReadOne("*-1\r\n");
  ASSERT_TRUE(nil);
  EXPECT_EQ(nil->type, REDIS_REPLY_NIL);
}

// Each check's decision is four integers (2 allowed or 0 denied, remaining, reset_after,
// retry_after) or one packed integer (odd); a check's kind decides, not its position.
TEST(RedisReply, DecideRepliesDecodeOnlyFromTheirEncoding) {
  const std::uint64_t capacity[3] = {10, 20, 10};
  Decision out[3];
  auto good = ReadOne("*8\r\n:2\r\n:9\r\n:1000\r\n:0\r\n:0\r\n:0\r\n:5\r\n:7\r\n");
  ASSERT_TRUE(good);
  ASSERT_TRUE(redis::DecodeDecisions(*good, 2, capacity, out).ok());
  EXPECT_TRUE(out[0].allowed);
  EXPECT_EQ(out[0].limit, 10u);
  EXPECT_EQ(out[0].remaining, 9u);
  EXPECT_FALSE(out[1].allowed);
  EXPECT_EQ(out[1].limit, 20u);
  EXPECT_EQ(out[1].retry_after, 7);

  for (std::string_view bad : {
           "*4\r\n:2\r\n$1\r\nx\r\n:0\r\n:0\r\n",  // a string where a count goes
           "*4\r\n:0\r\n$-1\r\n:0\r\n:0\r\n",      // nil
           "*4\r\n:4\r\n:1\r\n:0\r\n:0\r\n",       // allowed is 2 or 0
           "*3\r\n:2\r\n:1\r\n:0\r\n",             // too short
           "+OK\r\n",                              // not an array
           ":22018\r\n",                           // a packed decision is odd (allowed)
           ":-1\r\n",                              // and not negative
           ":9007199254740993\r\n",                // and below 2^53
       }) {
    auto r = ReadOne(bad);
    ASSERT_TRUE(r) << bad;
    Status s = redis::DecodeDecisions(*r, 1, capacity, out);
    EXPECT_EQ(s.code(), ErrorCode::kInternal) << bad;
    EXPECT_NE(s.message().find("decide script"), std::string::npos) << s.message();
  }
}

// A one-check script's allowed decision comes as one integer (lua/single_tail.lua):
// ((reset_after * (capacity + 1)) + remaining) * 2 + 1; only for one check.
TEST(RedisReply, OneCheckAllowedDecisionDecodesFromOnePackedInteger) {
  const std::uint64_t capacity[2] = {10, 20};
  Decision out[2];
  auto packed = ReadOne(":22019\r\n");  // (1000 * 11 + 9) * 2 + 1
  ASSERT_TRUE(packed);
  ASSERT_TRUE(redis::DecodeDecisions(*packed, 1, capacity, out).ok());
  EXPECT_TRUE(out[0].allowed);
  EXPECT_EQ(out[0].limit, 10u);
  EXPECT_EQ(out[0].remaining, 9u);
  EXPECT_EQ(out[0].reset_after, 1000);
  EXPECT_EQ(out[0].retry_after, 0);
  auto full = ReadOne(":21\r\n");  // remaining 10 (the capacity), reset 0
  ASSERT_TRUE(full);
  ASSERT_TRUE(redis::DecodeDecisions(*full, 1, capacity, out).ok());
  EXPECT_EQ(out[0].remaining, 10u);
  EXPECT_EQ(out[0].reset_after, 0);
  // Two checks always come as an array.
  EXPECT_EQ(redis::DecodeDecisions(*packed, 2, capacity, out).code(), ErrorCode::kInternal);
}

}  // namespace
}  // namespace sluice::testing
