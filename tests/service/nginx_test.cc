// Real nginx (Debian's binary) with auth_request in front of a small upstream, asking
// sluiced's /nginx/auth/<domain>: requests past the limit get 429 with rate-limit headers,
// and the upstream never sees them.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "process.h"

namespace sluice::testing {
namespace {

const char* kSluicedConfig = R"(sluiced:
  reload_poll: 0
domain: web
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 3, algorithm: sliding_window_log}
  - key: api_key
    rate_limit: {unit: day, requests_per_unit: 1, algorithm: sliding_window_log}
)";

std::string NginxConfig(const std::string& prefix, int port, int sluiced_port, int upstream_port) {
  std::string c = R"(daemon off;
master_process off;
worker_processes 1;
error_log PREFIX/error.log info;
pid PREFIX/nginx.pid;
events { worker_connections 128; }
http {
  access_log off;
  client_body_temp_path PREFIX/tmp/body;
  proxy_temp_path PREFIX/tmp/proxy;
  fastcgi_temp_path PREFIX/tmp/fastcgi;
  uwsgi_temp_path PREFIX/tmp/uwsgi;
  scgi_temp_path PREFIX/tmp/scgi;
  server {
    listen 127.0.0.1:PORT;
    location = /nginx-ready { return 204; }
    location / {
      auth_request /_sluice;
      auth_request_set $rl_limit $upstream_http_x_ratelimit_limit;
      auth_request_set $rl_remaining $upstream_http_x_ratelimit_remaining;
      auth_request_set $rl_reset $upstream_http_x_ratelimit_reset;
      auth_request_set $rl_retry_after $upstream_http_retry_after;
      add_header X-RateLimit-Limit $rl_limit always;
      add_header X-RateLimit-Remaining $rl_remaining always;
      add_header X-RateLimit-Reset $rl_reset always;
      error_page 403 = @rate_limited;
      proxy_pass http://127.0.0.1:UPSTREAM;
    }
    location = /_sluice {
      internal;
      proxy_pass http://127.0.0.1:SLUICED/nginx/auth/web;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header X-Real-IP $remote_addr;
      proxy_set_header X-Api-Key $http_x_api_key;
    }
    location @rate_limited {
      add_header X-RateLimit-Limit $rl_limit always;
      add_header X-RateLimit-Remaining $rl_remaining always;
      add_header X-RateLimit-Reset $rl_reset always;
      add_header Retry-After $rl_retry_after always;
      default_type text/plain;
      return 429 "rate limited\n";
    }
  }
}
)";
  auto replace = [&c](const std::string& from, const std::string& to) {
    for (std::size_t p; (p = c.find(from)) != std::string::npos;) c.replace(p, from.size(), to);
  };
  replace("PREFIX", prefix);
  replace("UPSTREAM", std::to_string(upstream_port));
  replace("SLUICED", std::to_string(sluiced_port));
  replace("PORT", std::to_string(port));
  return c;
}

class NginxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    struct stat st {};
    ASSERT_EQ(::stat(NGINX_BINARY, &st), 0)
        << NGINX_BINARY << " is missing: install Debian's nginx (scripts/deps.sh)";
    // The upstream: counts what reaches it.
    upstream.Get("/.*", [this](const httplib::Request&, httplib::Response& r) {
      upstream_hits.fetch_add(1);
      r.set_content("hello from upstream\n", "text/plain");
    });
    upstream_port = upstream.bind_to_any_port("127.0.0.1");
    ASSERT_GT(upstream_port, 0);
    upstream_thread = std::thread([this] { upstream.listen_after_bind(); });

    WriteFile(dir.File("sluiced.yaml"), kSluicedConfig);
    sluiced = StartSluiced(dir.File("sluiced.yaml"), dir.File("sluiced.log"));
    ASSERT_GT(sluiced.http_port, 0);

    std::filesystem::create_directories(dir.File("tmp"));
    nginx_port = FreePort();
    WriteFile(dir.File("nginx.conf"),
              NginxConfig(dir.path(), nginx_port, sluiced.http_port, upstream_port));
    nginx = Process::Spawn({NGINX_BINARY, "-p", dir.path() + "/", "-c", dir.File("nginx.conf"),
                            "-e", dir.File("error.log")},
                           dir.File("nginx.out"));
    ASSERT_TRUE(nginx);
    httplib::Client probe("127.0.0.1", nginx_port);
    ASSERT_TRUE(WaitFor([&] {
      auto r = probe.Get("/nginx-ready");
      return (r && r->status == 204) || !nginx->running();
    }));
    ASSERT_TRUE(nginx->running()) << ReadFile(dir.File("nginx.out"))
                                  << ReadFile(dir.File("error.log"));
  }
  void TearDown() override {
    if (nginx) {
      nginx->Signal(SIGQUIT);
      nginx->Wait(std::chrono::seconds(5));
    }
    upstream.stop();
    if (upstream_thread.joinable()) upstream_thread.join();
  }

  TempDir dir;
  httplib::Server upstream;
  std::thread upstream_thread;
  std::atomic<int> upstream_hits{0};
  int upstream_port = 0;
  int nginx_port = 0;
  Sluiced sluiced;
  std::unique_ptr<Process> nginx;
};

TEST_F(NginxTest, RequestsPastTheLimitGet429AndNeverReachTheUpstream) {
  httplib::Client c("127.0.0.1", nginx_port);
  for (int i = 1; i <= 3; ++i) {
    auto r = c.Get("/page");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << i;
    EXPECT_EQ(r->body, "hello from upstream\n");
    EXPECT_EQ(r->get_header_value("X-RateLimit-Limit"), "3");
    EXPECT_EQ(r->get_header_value("X-RateLimit-Remaining"), std::to_string(3 - i));
    EXPECT_FALSE(r->get_header_value("X-RateLimit-Reset").empty());
  }
  for (int i = 0; i < 4; ++i) {
    auto r = c.Get("/page");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 429);
    EXPECT_EQ(r->get_header_value("X-RateLimit-Limit"), "3");
    EXPECT_EQ(r->get_header_value("X-RateLimit-Remaining"), "0");
    const std::string retry = r->get_header_value("Retry-After");
    ASSERT_FALSE(retry.empty());
    EXPECT_GT(std::stoi(retry), 0);
    EXPECT_LE(std::stoi(retry), 3600);
  }
  EXPECT_EQ(upstream_hits.load(), 3);
}

TEST_F(NginxTest, ApiKeyLimitFromAHeader) {
  httplib::Client c("127.0.0.1", nginx_port);
  httplib::Headers key = {{"X-Api-Key", "k-123"}};
  auto r = c.Get("/a", key);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = c.Get("/a", key);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 429);
  // The binding limit (the key's 1/day), then both descriptors' limits and windows.
  EXPECT_EQ(r->get_header_value("X-RateLimit-Limit"), "1, 1;w=86400, 3;w=3600");
  // The denied request consumed nothing of the address's budget (all or nothing): two
  // more requests without the key pass.
  EXPECT_EQ(c.Get("/b")->status, 200);
  EXPECT_EQ(c.Get("/b")->status, 200);
  EXPECT_EQ(c.Get("/b")->status, 429);
  EXPECT_EQ(upstream_hits.load(), 3);
}

}  // namespace
}  // namespace sluice::testing
