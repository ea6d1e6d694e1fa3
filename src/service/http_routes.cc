// sluiced's HTTP API routes (service/http_routes.h): /json, /v1/report, /v1/check, nginx
// auth_request, /v1/acquire, /v1/release, /v1/extend. Each turns a request into an engine call and
// the engine's answer into a Reply.
#include "service/http_routes.h"

#include <boost/beast/core.hpp>

#include "service/json_api.h"
#include "service/log.h"
#include "service/params.h"

namespace sluice::service::http_routes {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;

void AddRateLimitHeaders(Reply& r, const RateLimitResponse& out) {
  for (const auto& [k, v] : out.response_headers) {
    // Canonical capitalisation for clients and nginx's $upstream_http_* alike.
    if (k == "x-ratelimit-limit") {
      r.headers.emplace_back("X-RateLimit-Limit", v);
    } else if (k == "x-ratelimit-remaining") {
      r.headers.emplace_back("X-RateLimit-Remaining", v);
    } else if (k == "x-ratelimit-reset") {
      r.headers.emplace_back("X-RateLimit-Reset", v);
    } else if (k == "retry-after") {
      r.headers.emplace_back("Retry-After", v);
    } else {
      r.headers.emplace_back(k, v);
    }
  }
}

}  // namespace

bool SplitTarget(const Request& req, std::string* path, std::string_view* query) {
  const std::string_view target(req.target().data(), req.target().size());
  const std::size_t q = target.find('?');
  *query = q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  return PercentDecode(target.substr(0, q), false, path);
}

Reply NotAllowed(const Request& req, const std::string& path, const char* allowed) {
  Reply r = JsonError(405, "method " + std::string(req.method_string()) + " not allowed on " +
                               path + " (use " + allowed + ")");
  r.headers.emplace_back("Allow", allowed);
  return r;
}

Result<Params> FormParams(const Request& req, std::string_view query) {
  const bool form = req.method() == http::verb::post &&
                    beast::iequals(req[http::field::content_type].substr(0, 33),
                                   "application/x-www-form-urlencoded");
  return RequestParams(query, form, req.body());
}

void NginxDescriptors(const Settings& settings,
                      const std::function<std::string_view(const std::string&)>& header,
                      RateLimitRequest& r) {
  for (const auto& [name, key] : settings.nginx_headers) {
    const std::string_view v = header(name);
    if (v.empty()) continue;
    r.descriptors.push_back(DescriptorRequest{});
    r.descriptors.back().entries.push_back(Entry{key, v});
  }
}

std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Reply JsonError(int status, const std::string& why) {
  Reply r;
  r.status = status;
  r.content_type = "application/json";
  r.body = Dump(nlohmann::json{{"error", why}});
  return r;
}

namespace {

using JsonParser = Status (*)(std::string_view, std::size_t, JsonRequest*);

// /json and /v1/report: a JSON body read by `parse`, decided by the engine and answered
// with /json's response; an OVER_LIMIT answer has status `over_status`.
void JsonCall(Engine& engine, const Request& req, Api api, const char* api_name, JsonParser parse,
              int over_status, Respond respond) {
  auto fail = [&engine, respond, api, api_name](const Status& s) {
    const bool invalid = s.code() == ErrorCode::kInvalidArgument;
    engine.metrics().CountRequest(api, invalid ? RequestOutcome::kInvalid : RequestOutcome::kError);
    Log(LogLevel::kWarn, "bad_request", {{"api", api_name}, {"error", s.message()}});
    respond(JsonError(invalid ? 400 : 500, s.message()));
  };
  JsonRequest parsed;
  if (Status s = parse(req.body(), engine.settings_ptr()->max_descriptors, &parsed); !s.ok()) {
    return fail(s);
  }
  engine.ShouldRateLimitAsync(parsed.request, [&engine, respond, fail, api, over_status](
                                                  const Status& s, RateLimitResponse& out) {
    if (!s.ok()) return fail(s);
    const bool over = out.overall_code == Code::kOverLimit;
    engine.metrics().CountRequest(api, over ? RequestOutcome::kOverLimit : RequestOutcome::kOk);
    Reply r;
    r.status = over ? over_status : 200;
    r.content_type = "application/json";
    r.body = RenderJsonResponse(out);
    respond(std::move(r));
  });
}

}  // namespace

void Json(Engine& engine, const Request& req, Respond respond) {
  JsonCall(engine, req, Api::kJson, "json", ParseJsonRequest, 429, std::move(respond));
}

// POST /v1/report (issue #21): usage charged after the fact by a service that is not
// behind Envoy. The body is /json's with "usage" (every descriptor's cost) instead of
// hits_addend; each matched rule charges it under its `overage` (charge: past the limit,
// as debt). 200 with /json's answer (the state after the report: OVER_LIMIT when the
// usage did not fit), 400 with the reason for bad input.
void Report(Engine& engine, const Request& req, Respond respond) {
  JsonCall(engine, req, Api::kReport, "report", ParseReportRequest, 200, std::move(respond));
}

// /v1/check?domain=D&key=K&value=V[&key=K2&value=V2...][&hits=N]: one descriptor whose
// entries are the key/value pairs in order (repeated keys kept). A POST may carry the
// same parameters as an application/x-www-form-urlencoded body. 200 allowed, 429 over.
void Check(Engine& engine, const Request& req, std::string_view query, Respond respond) {
  auto invalid = [&engine, respond](const std::string& why) {
    engine.metrics().CountRequest(Api::kCheck, RequestOutcome::kInvalid);
    respond(JsonError(400, why));
  };
  auto params = FormParams(req, query);
  if (!params.ok()) return invalid(params.status().message());
  RateLimitRequest r;
  if (Status st = DescriptorFromParams(*params, &r); !st.ok()) return invalid(st.message());
  engine.ShouldRateLimitAsync(
      r, [&engine, respond, invalid](const Status& s, RateLimitResponse& out) {
        if (!s.ok()) return invalid(s.message());
        const bool over = out.overall_code == Code::kOverLimit;
        engine.metrics().CountRequest(Api::kCheck,
                                      over ? RequestOutcome::kOverLimit : RequestOutcome::kOk);
        Reply rep;
        AddRateLimitHeaders(rep, out);
        rep.status = over ? 429 : 200;
        rep.content_type = "application/json";
        rep.body = RenderCheckResponse(out);
        respond(std::move(rep));
      });
}

// nginx auth_request: descriptors from the headers named in settings.nginx_headers.
// 200 allowed; 403 over limit (auth_request passes only 2xx, 401 and 403; the nginx
// config turns 403 into 429 with error_page). Rate-limit headers on both.
void Nginx(Engine& engine, const Request& req, const std::string& domain, Respond respond) {
  const std::shared_ptr<const Settings> settings = engine.settings_ptr();
  RateLimitRequest r;
  r.domain = domain;
  NginxDescriptors(
      *settings,
      [&req](const std::string& header) {
        const auto it = req.find(header);
        return it == req.end() ? std::string_view()
                               : std::string_view(it->value().data(), it->value().size());
      },
      r);
  if (r.descriptors.empty()) {
    // Nothing identifies the caller: nothing to limit.
    engine.metrics().CountRequest(Api::kNginx, RequestOutcome::kOk);
    return respond(Reply{});
  }
  engine.ShouldRateLimitAsync(
      r, [&engine, respond, domain](const Status& s, RateLimitResponse& out) {
        if (!s.ok()) {
          engine.metrics().CountRequest(Api::kNginx, RequestOutcome::kInvalid);
          Log(LogLevel::kWarn, "bad_request",
              {{"api", "nginx"}, {"domain", domain}, {"error", s.message()}});
          return respond(JsonError(400, s.message()));
        }
        const bool over = out.overall_code == Code::kOverLimit;
        engine.metrics().CountRequest(Api::kNginx,
                                      over ? RequestOutcome::kOverLimit : RequestOutcome::kOk);
        Reply rep;
        AddRateLimitHeaders(rep, out);
        rep.status = over ? 403 : 200;
        respond(std::move(rep));
      });
}

// --- concurrency limits (issue #12) ---------------------------------------------

// POST /v1/acquire: /v1/check's parameters; takes a permit from every concurrency limit
// the descriptor matches (and its rate limits), atomically. 200 with the permit token,
// 429 with Retry-After (until the earliest held permit expires) when none is free.
void Acquire(Engine& engine, const Request& req, std::string_view query, Respond respond) {
  auto invalid = [&engine, respond](const std::string& why) {
    engine.metrics().CountRequest(Api::kPermit, RequestOutcome::kInvalid);
    respond(JsonError(400, why));
  };
  auto params = FormParams(req, query);
  if (!params.ok()) return invalid(params.status().message());
  RateLimitRequest r;
  if (Status st = DescriptorFromParams(*params, &r); !st.ok()) return invalid(st.message());
  engine.AcquireAsync(r, [&engine, respond, invalid](const Status& s, PermitResponse& out) {
    if (!s.ok()) return invalid(s.message());
    const bool over = out.rate.overall_code == Code::kOverLimit;
    engine.metrics().CountRequest(Api::kPermit,
                                  over ? RequestOutcome::kOverLimit : RequestOutcome::kOk);
    Reply rep;
    AddRateLimitHeaders(rep, out.rate);
    rep.status = over ? 429 : 200;
    rep.content_type = "application/json";
    rep.body = RenderAcquireResponse(out);
    respond(std::move(rep));
  });
}

// POST /v1/release, /v1/extend: `permit=TOKEN` (query or form body). 200; 404 when the
// permit is not held (unknown, released already, expired); 400 for a missing or
// malformed token.
void PermitCall(Engine& engine, const Request& req, std::string_view query, StoreOp op,
                Respond respond) {
  auto fail = [&engine, respond](int status, const std::string& why) {
    engine.metrics().CountRequest(
        Api::kPermit, status == 400 ? RequestOutcome::kInvalid : RequestOutcome::kError);
    respond(JsonError(status, why));
  };
  auto params = FormParams(req, query);
  if (!params.ok()) return fail(400, params.status().message());
  const std::string* token = nullptr;
  if (Status st = OneParam(*params, "permit", &token); !st.ok()) return fail(400, st.message());
  if (token == nullptr || token->empty()) {
    return fail(400, "missing parameter 'permit' (the token /v1/acquire returned)");
  }
  engine.PermitAsync(
      op, *token, [&engine, respond, fail, op](const Status& s, PermitResponse& out) {
        if (!s.ok()) {
          const int status = s.code() == ErrorCode::kInvalidArgument ? 400
                             : s.code() == ErrorCode::kNotFound      ? 404
                                                                     : 503;
          if (status == 404) {
            engine.metrics().CountRequest(Api::kPermit, RequestOutcome::kInvalid);
            return respond(JsonError(404, s.message()));
          }
          return fail(status, s.message());
        }
        engine.metrics().CountRequest(Api::kPermit, RequestOutcome::kOk);
        Reply rep;
        rep.content_type = "application/json";
        if (op == sluice::StoreOp::kExtend) {
          rep.body =
              Dump(nlohmann::json{{"extended", true}, {"lease_ms", (out.lease + 999) / 1000}});
        } else {
          rep.body = Dump(nlohmann::json{{"released", true}});
        }
        respond(std::move(rep));
      });
}

}  // namespace sluice::service::http_routes
