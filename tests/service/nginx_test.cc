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

// The recipe of docs/sluiced.md: a keepalive upstream for the auth subrequests, short
// timeouts, and what a down sluiced means. Server PORT fails open (sluiced down or slow:
// the request goes through); server PORT_CLOSED fails closed (503).
std::string NginxServer(const std::string& port, bool fail_open) {
  std::string s = R"(
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
      ON_AUTH_ERROR
      proxy_pass http://127.0.0.1:UPSTREAM;
    }
    location = /_sluice {
      internal;
      proxy_pass http://sluiced/nginx/auth/web;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_connect_timeout 200ms;
      proxy_send_timeout 500ms;
      proxy_read_timeout 500ms;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header X-Real-IP $remote_addr;
      proxy_set_header X-Api-Key $http_x_api_key;
      ON_SLUICED_ERROR
    }
    location @sluice_unavailable {
      FALLBACK
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
)";
  auto replace = [&s](const std::string& from, const std::string& to) {
    for (std::size_t p; (p = s.find(from)) != std::string::npos;) s.replace(p, from.size(), to);
  };
  replace("PORT", port);
  if (fail_open) {
    // The subrequest's own error (sluiced refused, timed out, 5xx) becomes a 204: allowed.
    replace("ON_SLUICED_ERROR", "error_page 500 502 503 504 = @sluice_unavailable;");
    replace("ON_AUTH_ERROR", "");
    replace("FALLBACK", "return 204;");
  } else {
    // auth_request turns a failed subrequest into a 500; answer 503 with a reason instead.
    replace("ON_SLUICED_ERROR", "");
    replace("ON_AUTH_ERROR", "error_page 500 = @sluice_unavailable;");
    replace("FALLBACK", "default_type text/plain; return 503 \"rate limiter unavailable\\n\";");
  }
  return s;
}

std::string NginxConfig(const std::string& prefix, int port, int closed_port, int sluiced_port,
                        int upstream_port) {
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
  upstream sluiced {
    server 127.0.0.1:SLUICED;
    keepalive 16;
  }
)" + NginxServer(std::to_string(port), true) +
                  NginxServer(std::to_string(closed_port), false) + "}\n";
  auto replace = [&c](const std::string& from, const std::string& to) {
    for (std::size_t p; (p = c.find(from)) != std::string::npos;) c.replace(p, from.size(), to);
  };
  replace("PREFIX", prefix);
  replace("UPSTREAM", std::to_string(upstream_port));
  replace("SLUICED", std::to_string(sluiced_port));
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
    closed_port = FreePort();
    WriteFile(dir.File("nginx.conf"),
              NginxConfig(dir.path(), nginx_port, closed_port, sluiced.http_port, upstream_port));
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
  int closed_port = 0;
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

int Get(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(10, 0);
  auto r = c.Get(path);
  return r ? r->status : 0;
}

// Both recipes limit while sluiced is up; when it hangs (SIGSTOP: connections accepted by
// the kernel, never answered) or is gone, the fail-open one lets requests through after
// its timeouts and the fail-closed one answers 503, and neither answers 500.
TEST_F(NginxTest, DownSluicedFailsOpenOrClosedAsConfigured) {
  EXPECT_EQ(Get(nginx_port, "/x"), 200);
  EXPECT_EQ(Get(closed_port, "/x"), 200);
  EXPECT_EQ(Get(closed_port, "/x"), 200);
  EXPECT_EQ(Get(closed_port, "/x"), 429);  // one address, 3 an hour, shared by both
  EXPECT_EQ(upstream_hits.load(), 3);

  sluiced.process->Signal(SIGSTOP);
  EXPECT_EQ(Get(nginx_port, "/hung"), 200);
  EXPECT_EQ(Get(closed_port, "/hung"), 503);
  sluiced.process->Signal(SIGCONT);

  sluiced.process->Signal(SIGKILL);
  sluiced.process->Wait(std::chrono::seconds(10));
  EXPECT_EQ(Get(nginx_port, "/gone"), 200);
  httplib::Client c("127.0.0.1", closed_port);
  auto r = c.Get("/gone");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "rate limiter unavailable\n");
  EXPECT_EQ(upstream_hits.load(), 5);
}

}  // namespace
}  // namespace sluice::testing
