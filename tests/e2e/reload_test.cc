// A config reload (SIGHUP) while Envoy carries load: no request fails, and the new
// limits apply from the next decision on.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "e2e.h"
#include "wait.h"

namespace sluice::testing {
namespace {

using nlohmann::json;

// `probe_limit` an hour for each x-probe value; the load's descriptor never runs out.
std::string Config(int probe_limit) {
  return "sluiced:\n"
         "  reload_poll: 0\n"
         "domain: e2e\n"
         "descriptors:\n"
         "  - key: generic_key\n"
         "    value: load\n"
         "    rate_limit: {unit: hour, requests_per_unit: 1000000, algorithm: token_bucket}\n"
         "  - key: probe\n"
         "    rate_limit: {unit: hour, requests_per_unit: " +
         std::to_string(probe_limit) + ", algorithm: sliding_window_log}\n";
}

TEST(EnvoyReload, SighupUnderLoadFailsNoRequest) {
  EnvoyOptions o;
  o.rate_limits = json::parse(R"([
      {"actions": [{"generic_key": {"descriptor_value": "load"}}]},
      {"actions": [{"request_headers": {"header_name": "x-probe", "descriptor_key": "probe"}}]}])");
  // Deny on error: a reload that made sluiced miss one answer would show as a 500.
  o.filter = {{"failure_mode_deny", true}};
  auto s = StartStack(Config(1), o);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->Get("/", {{"x-probe", "p"}})->status, 200);
  EXPECT_EQ(s->Get("/", {{"x-probe", "p"}})->status, 429);

  // Bounded load: two keep-alive clients, at most 2000 requests each, stopped by the test.
  constexpr int kMaxPerClient = 2000;
  std::atomic<bool> stop{false};
  std::atomic<int> done{0}, failed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 2; ++t) {
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", s->envoy->port());
      c.set_keep_alive(true);
      c.set_read_timeout(10);
      for (int i = 0; i < kMaxPerClient && !stop.load(); ++i) {
        auto r = c.Get("/");
        if (!r || r->status != 200) failed.fetch_add(1);
        done.fetch_add(1);
      }
    });
  }
  const std::string ok_reloads = R"(sluiced_config_reloads_total{result="ok"})";
  ASSERT_TRUE(WaitUntil([&] { return done.load() >= 50; }, std::chrono::seconds(30)));
  for (int reload = 1; reload <= 3; ++reload) {
    WriteFile(s->config(), Config(reload % 2 == 1 ? 3 : 1));
    const int before = done.load();
    s->sluiced.process->Signal(SIGHUP);
    EXPECT_TRUE(
        WaitUntil([&] { return s->Metric(ok_reloads) == reload; }, std::chrono::seconds(30)))
        << "reload " << reload << " not applied; log:\n"
        << s->sluiced.LogText();
    // Load went on across the reload.
    EXPECT_TRUE(WaitUntil([&] { return done.load() >= before + 20; }, std::chrono::seconds(30)));
  }
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0) << "of " << done.load();
  RecordProperty("requests_under_load", done.load());
  EXPECT_LE(s->envoy->Counter("cluster.upstream.ratelimit.error"), 0);
  // The last config (probe limit 3) is the one deciding: a changed limit is a new
  // counter, so "p" has 3 again.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s->Get("/", {{"x-probe", "p"}})->status, 200) << i;
  EXPECT_EQ(s->Get("/", {{"x-probe", "p"}})->status, 429);
}

}  // namespace
}  // namespace sluice::testing
