// HTTP endpoints on cpp-httplib.
#include "service/http_server.h"

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "service/json_api.h"
#include "service/log.h"

namespace sluice::service {
namespace {

// Never throws: bytes that are not UTF-8 (user input echoed in errors) are replaced.
std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

void JsonError(httplib::Response& res, int status, const std::string& why) {
  res.status = status;
  res.set_content(Dump(nlohmann::json{{"error", why}}), "application/json");
}

void SetRateLimitHeaders(httplib::Response& res, const RateLimitResponse& r) {
  for (const auto& [k, v] : r.response_headers) {
    // Canonical capitalisation for clients and nginx's $upstream_http_* alike.
    if (k == "x-ratelimit-limit") {
      res.set_header("X-RateLimit-Limit", v);
    } else if (k == "x-ratelimit-remaining") {
      res.set_header("X-RateLimit-Remaining", v);
    } else if (k == "x-ratelimit-reset") {
      res.set_header("X-RateLimit-Reset", v);
    } else if (k == "retry-after") {
      res.set_header("Retry-After", v);
    } else {
      res.set_header(k, v);
    }
  }
}

const char* CodeName(Code c) {
  switch (c) {
    case Code::kOk:
      return "OK";
    case Code::kOverLimit:
      return "OVER_LIMIT";
    default:
      return "UNKNOWN";
  }
}

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  const std::atomic<bool>* ready;
  httplib::Server server;
  std::thread thread;
  int port = 0;

  Impl(Engine& e, const std::atomic<bool>* r) : engine(e), ready(r) {}

  void Json(const httplib::Request& req, httplib::Response& res) {
    JsonRequest parsed;
    Status s = ParseJsonRequest(req.body, engine.settings_ptr()->max_descriptors, &parsed);
    RateLimitResponse out;
    if (s.ok()) s = engine.ShouldRateLimit(parsed.request, &out);
    if (!s.ok()) {
      const bool invalid = s.code() == ErrorCode::kInvalidArgument;
      engine.metrics().CountRequest(Api::kJson,
                                    invalid ? RequestOutcome::kInvalid : RequestOutcome::kError);
      Log(LogLevel::kWarn, "bad_request", {{"api", "json"}, {"error", s.message()}});
      JsonError(res, invalid ? 400 : 500, s.message());
      return;
    }
    const bool over = out.overall_code == Code::kOverLimit;
    engine.metrics().CountRequest(Api::kJson,
                                  over ? RequestOutcome::kOverLimit : RequestOutcome::kOk);
    res.status = over ? 429 : 200;
    res.set_content(RenderJsonResponse(out), "application/json");
  }

  // /v1/check?domain=D&key=K&value=V[&key=K2&value=V2...][&hits=N]: one descriptor whose
  // entries are the key/value pairs in order. 200 allowed, 429 over limit.
  void Check(const httplib::Request& req, httplib::Response& res) {
    const std::string domain = req.get_param_value("domain");
    if (domain.empty()) {
      engine.metrics().CountRequest(Api::kCheck, RequestOutcome::kInvalid);
      JsonError(res, 400, "missing query parameter 'domain'");
      return;
    }
    const std::size_t nk = req.get_param_value_count("key");
    const std::size_t nv = req.get_param_value_count("value");
    if (nk == 0 || nk != nv) {
      engine.metrics().CountRequest(Api::kCheck, RequestOutcome::kInvalid);
      JsonError(res, 400,
                "give one or more key=K&value=V pairs (got " + std::to_string(nk) + " key and " +
                    std::to_string(nv) + " value parameters)");
      return;
    }
    std::vector<std::string> keys(nk), values(nk);
    RateLimitRequest r;
    r.domain = domain;
    r.descriptors.resize(1);
    for (std::size_t i = 0; i < nk; ++i) {
      keys[i] = req.get_param_value("key", i);
      values[i] = req.get_param_value("value", i);
      r.descriptors[0].entries.push_back(Entry{keys[i], values[i]});
    }
    if (req.has_param("hits")) {
      const std::string h = req.get_param_value("hits");
      char* end = nullptr;
      const unsigned long long v = std::strtoull(h.c_str(), &end, 10);
      if (h.empty() || *end != '\0' || h[0] == '-' || v > 0xffffffffULL) {
        engine.metrics().CountRequest(Api::kCheck, RequestOutcome::kInvalid);
        JsonError(res, 400, "hits must be an integer in 0..4294967295 (got '" + h + "')");
        return;
      }
      r.hits_addend = static_cast<std::uint32_t>(v);
    }
    RateLimitResponse out;
    if (Status s = engine.ShouldRateLimit(r, &out); !s.ok()) {
      engine.metrics().CountRequest(Api::kCheck, RequestOutcome::kInvalid);
      JsonError(res, 400, s.message());
      return;
    }
    const DescriptorStatus& st = out.statuses[0];
    const bool over = out.overall_code == Code::kOverLimit;
    engine.metrics().CountRequest(Api::kCheck,
                                  over ? RequestOutcome::kOverLimit : RequestOutcome::kOk);
    nlohmann::json j{{"allowed", !over}, {"code", CodeName(st.code)}, {"limited", st.has_limit}};
    if (st.has_limit) {
      j["limit"] = st.requests_per_unit;
      j["unit"] = UnitName(st.unit);
      j["remaining"] = st.limit_remaining;
      j["reset_after_ms"] = (st.duration_until_reset + 999) / 1000;
      j["retry_after_ms"] = (st.retry_after + 999) / 1000;
      if (!st.name.empty()) j["name"] = st.name;
    }
    SetRateLimitHeaders(res, out);
    res.status = over ? 429 : 200;
    res.set_content(Dump(j), "application/json");
  }

  // nginx auth_request: descriptors from the headers named in settings.nginx_headers.
  // 200 allowed; 403 over limit (auth_request passes only 2xx, 401 and 403; the nginx
  // config turns 403 into 429 with error_page). Rate-limit headers on both.
  void Nginx(const httplib::Request& req, httplib::Response& res) {
    const std::string domain = req.matches[1];
    const std::shared_ptr<const Settings> settings = engine.settings_ptr();
    std::vector<std::string> values;
    values.reserve(settings->nginx_headers.size());
    RateLimitRequest r;
    r.domain = domain;
    for (const auto& [header, key] : settings->nginx_headers) {
      if (!req.has_header(header)) continue;
      values.push_back(req.get_header_value(header));
      if (values.back().empty()) continue;
      r.descriptors.push_back(DescriptorRequest{});
      r.descriptors.back().entries.push_back(Entry{key, values.back()});
    }
    if (r.descriptors.empty()) {
      // Nothing identifies the caller: nothing to limit.
      engine.metrics().CountRequest(Api::kNginx, RequestOutcome::kOk);
      res.status = 200;
      return;
    }
    RateLimitResponse out;
    if (Status s = engine.ShouldRateLimit(r, &out); !s.ok()) {
      engine.metrics().CountRequest(Api::kNginx, RequestOutcome::kInvalid);
      Log(LogLevel::kWarn, "bad_request",
          {{"api", "nginx"}, {"domain", domain}, {"error", s.message()}});
      JsonError(res, 400, s.message());
      return;
    }
    const bool over = out.overall_code == Code::kOverLimit;
    engine.metrics().CountRequest(Api::kNginx,
                                  over ? RequestOutcome::kOverLimit : RequestOutcome::kOk);
    SetRateLimitHeaders(res, out);
    res.status = over ? 403 : 200;
  }
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() {
  Stop();
}
int HttpServer::port() const {
  return impl_->port;
}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(Engine& engine, const std::string& addr,
                                                      std::size_t threads,
                                                      std::size_t max_body_bytes,
                                                      const std::atomic<bool>* ready) {
  auto impl = std::make_unique<Impl>(engine, ready);
  Impl* p = impl.get();
  httplib::Server& s = impl->server;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(max_body_bytes);
  // Headers and body go out in separate writes: without TCP_NODELAY every answer waits
  // for the client's delayed ACK (~40 ms).
  s.set_tcp_nodelay(true);
  s.set_keep_alive_max_count(1'000'000);
  s.set_keep_alive_timeout(2);
  s.set_read_timeout(5, 0);
  s.set_write_timeout(5, 0);
  s.Post("/json", [p](const httplib::Request& q, httplib::Response& r) { p->Json(q, r); });
  s.Get("/v1/check", [p](const httplib::Request& q, httplib::Response& r) { p->Check(q, r); });
  s.Post("/v1/check", [p](const httplib::Request& q, httplib::Response& r) { p->Check(q, r); });
  s.Get(R"(/nginx/auth/([^/]+))",
        [p](const httplib::Request& q, httplib::Response& r) { p->Nginx(q, r); });
  s.Post(R"(/nginx/auth/([^/]+))",
         [p](const httplib::Request& q, httplib::Response& r) { p->Nginx(q, r); });
  s.Get("/metrics", [p](const httplib::Request&, httplib::Response& r) {
    r.set_content(p->engine.RenderMetrics(), "text/plain; version=0.0.4");
  });
  s.Get("/healthz",
        [](const httplib::Request&, httplib::Response& r) { r.set_content("ok\n", "text/plain"); });
  s.Get("/readyz", [p](const httplib::Request&, httplib::Response& r) {
    const bool ok = p->ready == nullptr || p->ready->load();
    r.status = ok ? 200 : 503;
    r.set_content(ok ? "ready\n" : "not ready\n", "text/plain");
  });
  s.set_error_handler([max_body_bytes](const httplib::Request& q, httplib::Response& r) {
    if (!r.body.empty()) return;
    std::string why;
    if (r.status == 413) {
      why = "request body is larger than max_body_bytes (" + std::to_string(max_body_bytes) + ")";
    } else if (r.status == 404) {
      why = "no such endpoint: " + q.method + " " + q.path;
    } else {
      why = "HTTP " + std::to_string(r.status);
    }
    r.set_content(Dump(nlohmann::json{{"error", why}}), "application/json");
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& r, std::exception_ptr) {
    r.status = 500;
    r.set_content("{\"error\":\"internal error\"}\n", "application/json");
  });

  const std::size_t colon = addr.rfind(':');
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const int want = std::atoi(addr.c_str() + colon + 1);
  if (want == 0) {
    impl->port = s.bind_to_any_port(host);
  } else {
    impl->port = s.bind_to_port(host, want) ? want : -1;
  }
  if (impl->port <= 0) return Status::Unavailable("cannot listen for HTTP on " + addr);
  impl->thread = std::thread([p] { p->server.listen_after_bind(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

void HttpServer::Stop() {
  if (!impl_->thread.joinable()) return;
  impl_->server.stop();
  impl_->thread.join();
}

}  // namespace sluice::service
