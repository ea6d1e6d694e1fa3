// The RateLimitService answers bytes that are not a RateLimitRequest (truncated, a bad
// varint, 5000 nested groups) with INVALID_ARGUMENT and a reason (issue #20 item 5); they
// got UNIMPLEMENTED with no message, as if the method did not exist. In process, over
// loopback, with a generic stub sending raw bytes.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <string>

#include "service/config.h"
#include "service/engine.h"
#include "service/grpc_service.h"
#include "sluice/memory_store.h"

namespace sluice::service {
namespace {

// Sends `bytes` to ShouldRateLimit; the call's status (bounded wait).
grpc::Status CallRaw(int port, const std::string& bytes, std::string* reply = nullptr) {
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                 grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status s) { done.set_value(std::move(s)); });
  auto f = done.get_future();
  if (f.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "no answer within 60 s";
    ctx.TryCancel();
    return f.get();
  }
  grpc::Status s = f.get();
  if (reply != nullptr && s.ok()) {
    std::vector<grpc::Slice> slices;
    (void)response.Dump(&slices);
    reply->clear();
    for (const grpc::Slice& x : slices)
      reply->append(reinterpret_cast<const char*>(x.begin()), x.size());
  }
  return s;
}

TEST(DaemonGrpc, MalformedProtobufIsInvalidArgumentWithAReason) {
  auto c = ParseConfig(
      "domain: web\ndescriptors:\n  - key: ip\n    rate_limit: {unit: minute, "
      "requests_per_unit: 1}\n",
      "grpc.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto e = Engine::Create(*c, Engine::Options{std::make_shared<MemoryStore>(), nullptr});
  ASSERT_TRUE(e.ok()) << e.status().message();
  auto server = GrpcServer::Start(**e, "127.0.0.1:0", 1 << 20);
  ASSERT_TRUE(server.ok()) << server.status().message();
  const int port = (*server)->port();

  // A good request still works over the raw path: domain "web", one descriptor ip=1.
  pb::RateLimitRequest good;
  good.set_domain("web");
  auto* entry = good.add_descriptors()->add_entries();
  entry->set_key("ip");
  entry->set_value("1");
  std::string reply;
  ASSERT_TRUE(CallRaw(port, good.SerializeAsString(), &reply).ok());
  pb::RateLimitResponse resp;
  ASSERT_TRUE(resp.ParseFromString(reply));
  EXPECT_EQ(resp.overall_code(), pb::RateLimitResponse::OK);
  ASSERT_TRUE(CallRaw(port, good.SerializeAsString(), &reply).ok());
  ASSERT_TRUE(resp.ParseFromString(reply));
  EXPECT_EQ(resp.overall_code(), pb::RateLimitResponse::OVER_LIMIT);

  const std::string serialized = good.SerializeAsString();
  std::string nested;
  for (int i = 0; i < 5000; ++i) nested.push_back('\x1b');  // field 3, start group
  const std::string bad[] = {
      serialized.substr(0, serialized.size() - 1),                      // truncated
      std::string("\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 11),  // a varint too long
      nested,
  };
  for (const std::string& b : bad) {
    const grpc::Status s = CallRaw(port, b);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find("RateLimitRequest"), std::string::npos) << s.error_message();
  }
}

}  // namespace
}  // namespace sluice::service
