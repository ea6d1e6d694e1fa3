// The admin listener (service/admin_server.h): rate limit, authentication, bounds on
// the request, then the routes of service/admin_api.h.
#include "service/admin_server.h"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>

#include "service/admin_api.h"
#include "service/admin_top_keys.h"
#include "service/json_api.h"
#include "service/log.h"

namespace sluice::service {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using http_routes::Dump;
using http_routes::JsonError;
using http_routes::Reply;
using http_routes::Request;
using http_routes::Respond;
using nlohmann::json;

Reply JsonReply(const json& j) {
  Reply r;
  r.content_type = "application/json";
  r.body = Dump(j);
  r.headers.emplace_back("Cache-Control", "no-store");
  return r;
}

Reply StatusReply(const Status& s) {
  return JsonError(s.code() == ErrorCode::kInvalidArgument ? 400 : 503, s.message());
}

// The client's IP of "ADDR:PORT" ("[v6]:PORT"): what the admin rate limit counts by.
std::string PeerIp(const std::string& peer) {
  std::string ip = peer.substr(0, peer.rfind(':'));
  if (ip.size() >= 2 && ip.front() == '[') ip = ip.substr(1, ip.size() - 2);
  return ip;
}

// explain's nginx form: a JSON object of request headers, read as nginx's auth_request
// would send them (names case-insensitive).
Status NginxFromJson(const Engine& engine, std::string_view body, json& doc, RateLimitRequest& r) {
  try {
    doc = json::parse(body);
  } catch (const json::exception& e) {
    return Status::InvalidArgument(std::string("malformed JSON: ") + e.what());
  }
  if (!doc.is_object()) {
    return Status::InvalidArgument("the body must be a JSON object of request headers");
  }
  for (const auto& [name, v] : doc.items()) {
    if (!v.is_string()) return Status::InvalidArgument("header " + name + " must be a string");
  }
  http_routes::NginxDescriptors(
      *engine.settings_ptr(),
      [&doc](const std::string& header) {
        for (const auto& [name, v] : doc.items()) {
          if (beast::iequals(name, header))
            return std::string_view(v.get_ref<const std::string&>());
        }
        return std::string_view();
      },
      r);
  if (r.descriptors.empty()) {
    return Status::InvalidArgument(
        "none of the headers nginx_headers names is in the request: nothing would be limited");
  }
  return Status::Ok();
}

}  // namespace

std::string AdminListenAddress(std::string_view flag) {
  if (!flag.empty() && flag.find(':') == std::string_view::npos) {
    return "127.0.0.1:" + std::string(flag);
  }
  if (!flag.empty() && flag.front() == ':') return "127.0.0.1" + std::string(flag);
  return std::string(flag);
}

Result<std::unique_ptr<AdminServer>> AdminServer::Start(Engine& engine, const AdminOptions& o,
                                                        const std::atomic<bool>* store_reachable) {
  if (o.token_file.empty()) {
    return Status::InvalidArgument(
        "the admin listener needs --admin-token-file FILE (bearer tokens, one per line, mode "
        "600)");
  }
  if (Status s = ValidateListenAddress(o.addr); !s.ok()) {
    return Status::InvalidArgument("--admin: " + s.message());
  }
  if (o.requests_per_minute == 0) {
    return Status::InvalidArgument("--admin-rate must be at least 1 (requests per minute)");
  }
  auto tokens = AdminTokens::Load(o.token_file);
  if (!tokens.ok()) return tokens.status();
  std::unique_ptr<AdminServer> a(new AdminServer(engine, std::move(*tokens)));
  a->options_ = o;
  a->store_reachable_ = store_reachable;
  LimiterOptions lo;
  lo.policies = {Policy::TokenBucket("admin", o.requests_per_minute, o.requests_per_minute,
                                     std::chrono::minutes(1))};
  lo.key_prefix = "sluiced_admin";
  auto limiter = Limiter::Create(std::move(lo));
  if (!limiter.ok()) return limiter.status();
  a->limiter_ = std::move(*limiter);
  HttpOptions ho;
  ho.io_threads = 1;
  ho.max_connections = 64;
  ho.max_body_bytes = 64 * 1024;  // past the admin bound: answered 400 by Handle
  ho.max_header_bytes = 8 * 1024;
  ho.oversize_status = 400;
  AdminServer* self = a.get();
  auto http =
      HttpServer::Start(engine, o.addr, ho, nullptr,
                        [self](const Request& req, const std::string& peer, Respond respond) {
                          self->Handle(req, peer, std::move(respond));
                        });
  if (!http.ok()) {
    return Status(http.status().code(), "admin listener: " + http.status().message());
  }
  a->http_ = std::move(*http);
  return a;
}

AdminServer::~AdminServer() {
  Stop();
}

void AdminServer::Stop() {
  if (http_) http_->Stop();
}

void AdminServer::Handle(const Request& req, const std::string& peer, Respond respond) {
  try {
    auto d = limiter_->Acquire(PeerIp(peer));
    if (d.ok() && !d->allowed) {
      Reply r = JsonError(429, "admin requests from " + PeerIp(peer) + " are limited to " +
                                   std::to_string(options_.requests_per_minute) +
                                   " per minute (--admin-rate)");
      r.headers.emplace_back("Retry-After", std::to_string((d->retry_after + 999'999) / 1'000'000));
      return respond(std::move(r));
    }
    std::string path;
    std::string_view query;
    if (!http_routes::SplitTarget(req, &path, &query)) {
      return respond(JsonError(400, "invalid percent-encoding in path"));
    }
    if (path == "/ui" || path == "/ui/") {
      // The page holds no data: it asks for the token and sends it with every call.
      if (req.method() != http::verb::get) return respond(JsonError(405, "use GET /ui"));
      Reply r;
      r.content_type = "text/html; charset=utf-8";
      r.body = ConsolePage();
      r.headers.emplace_back("Content-Security-Policy",
                             "default-src 'none'; script-src 'unsafe-inline'; style-src "
                             "'unsafe-inline'; connect-src 'self'; img-src data:; "
                             "form-action 'none'; frame-ancestors 'none'");
      r.headers.emplace_back("X-Content-Type-Options", "nosniff");
      return respond(std::move(r));
    }
    const auto auth = req[http::field::authorization];
    if (auth.empty()) {
      Reply r = JsonError(401, "admin API: send Authorization: Bearer TOKEN (--admin-token-file)");
      r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"sluiced-admin\"");
      return respond(std::move(r));
    }
    const std::string token = tokens_.Match(std::string_view(auth.data(), auth.size()));
    if (token.empty()) {
      Log(LogLevel::kWarn, "admin_auth_failed", {{"peer", peer}, {"path", path}});
      return respond(JsonError(403, "admin API: the bearer token is not one of the admin tokens"));
    }
    if (req.body().size() > options_.max_body_bytes) {
      return respond(JsonError(400, "admin request body is " + std::to_string(req.body().size()) +
                                        " bytes; at most " +
                                        std::to_string(options_.max_body_bytes)));
    }
    Route(req, path, query, peer, token, respond);
  } catch (const std::exception& e) {
    Log(LogLevel::kError, "internal_error", {{"api", "admin"}, {"error", e.what()}});
    respond(JsonError(500, "internal error"));
  }
}

void AdminServer::Route(const Request& req, const std::string& path, std::string_view query,
                        const std::string& peer, const std::string& token, Respond& respond) {
  const bool get = req.method() == http::verb::get, post = req.method() == http::verb::post;
  auto not_allowed = [&](const char* allowed) {
    return http_routes::NotAllowed(req, path, allowed);
  };
  // The one descriptor of a query or form body (domain=D&key=K&value=V...), as /v1/check.
  Params params;
  RateLimitRequest r;
  auto from_params = [&]() -> Status {
    auto p = http_routes::FormParams(req, query);
    if (!p.ok()) return p.status();
    params = std::move(*p);
    return DescriptorFromParams(params, &r);
  };
  if (path == "/admin/limits") {
    return get ? respond(JsonReply(admin::Limits(engine_))) : respond(not_allowed("GET"));
  }
  if (path == "/rlconfig") {
    if (!get) return respond(not_allowed("GET"));
    Reply rep;
    rep.content_type = "text/plain";
    rep.body = engine_.DumpConfig();
    return respond(std::move(rep));
  }
  if (path == "/admin/stats") {
    const bool reachable = store_reachable_ == nullptr || store_reachable_->load();
    return get ? respond(JsonReply(admin::Stats(engine_, reachable))) : respond(not_allowed("GET"));
  }
  if (path == "/admin/top") {
    return get ? respond(JsonReply(admin::TopKeysJson(engine_, TopKeys::kCounters)))
               : respond(not_allowed("GET"));
  }
  if (path == "/admin/explain" || path == "/admin/counters") {
    JsonRequest parsed;
    Status s;
    const bool json_body =
        post && beast::iequals(req[http::field::content_type].substr(0, 16), "application/json");
    if (json_body && path == "/admin/explain") {
      s = ParseJsonRequest(req.body(), engine_.settings_ptr()->max_descriptors, &parsed);
    } else if (get || post) {
      s = from_params();
    } else {
      return respond(not_allowed("GET, POST"));
    }
    if (!s.ok()) return respond(JsonError(400, s.message()));
    const RateLimitRequest& rr = json_body ? parsed.request : r;
    auto out =
        path == "/admin/explain" ? admin::Explain(engine_, rr) : admin::Counters(engine_, rr);
    return respond(out.ok() ? JsonReply(*out) : StatusReply(out.status()));
  }
  constexpr std::string_view kNginx = "/admin/explain/nginx/";
  if (path.starts_with(kNginx) && path.size() > kNginx.size()) {
    if (!post) return respond(not_allowed("POST"));
    const std::string domain = path.substr(kNginx.size());
    json doc;
    r.domain = domain;
    if (Status s = NginxFromJson(engine_, req.body(), doc, r); !s.ok()) {
      return respond(JsonError(400, s.message()));
    }
    auto out = admin::Explain(engine_, r);
    return respond(out.ok() ? JsonReply(*out) : StatusReply(out.status()));
  }
  if (path == "/admin/reset") {
    if (!post) return respond(not_allowed("POST"));
    if (Status s = from_params(); !s.ok()) return respond(JsonError(400, s.message()));
    std::vector<std::string> keys;
    auto out = admin::Reset(engine_, r, &keys);
    std::string joined;
    for (const std::string& k : keys) joined += (joined.empty() ? "" : ",") + k;
    Log(out.ok() ? LogLevel::kWarn : LogLevel::kInfo,
        out.ok() ? "admin_reset" : "admin_reset_failed",
        {{"peer", peer},
         {"token", token},
         {"domain", r.domain},
         {"keys", joined},
         {"error", out.ok() ? "" : out.status().message()}});
    return respond(out.ok() ? JsonReply(*out) : StatusReply(out.status()));
  }
  respond(
      JsonError(404, "no such admin endpoint: " + std::string(req.method_string()) + " " + path));
}

}  // namespace sluice::service
