// The API routes of sluiced's HTTP front end (service/http_server.h serves them): each
// handler answers through `respond` exactly once, inline or from the store's thread.
#pragma once

#include <boost/beast/http.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "service/engine.h"
#include "service/params.h"

namespace sluice::service::http_routes {

using Request = boost::beast::http::request<boost::beast::http::string_body>;

// What a handler answers; turned into a Beast response by the connection.
struct Reply {
  int status = 200;
  std::string content_type;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  bool close = false;  // close the connection after this answer
};

using Respond = std::function<void(Reply)>;

// JSON text of `j`, newline-terminated. Never throws: bytes that are not UTF-8 (user
// input echoed in errors) are replaced.
std::string Dump(const nlohmann::json& j);
// {"error": why} with `status`.
Reply JsonError(int status, const std::string& why);

// The percent-decoded path of `req`'s target and its raw query (after '?'). False for
// a malformed escape in the path.
bool SplitTarget(const Request& req, std::string* path, std::string_view* query);
// 405 naming the method and `path`, with `allowed` in the text and the Allow header.
Reply NotAllowed(const Request& req, const std::string& path, const char* allowed);
// The parameters of `req` (service/params.h): its query's or its form body's.
Result<Params> FormParams(const Request& req, std::string_view query);
// nginx auth_request's descriptors: one [{key, value}] for each header of
// settings.nginx_headers that `header` finds with a value (the views are its values).
void NginxDescriptors(const Settings& settings,
                      const std::function<std::string_view(const std::string&)>& header,
                      RateLimitRequest& r);

// POST /json: envoyproxy/ratelimit's JSON request (service/json_api.h).
void Json(Engine& engine, const Request& req, Respond respond);
// POST /v1/report: /json's request with "usage" as every descriptor's cost, charged
// under each rule's overage (issue #21).
void Report(Engine& engine, const Request& req, Respond respond);
// /v1/check: one descriptor from the query or a form body (service/params.h).
void Check(Engine& engine, const Request& req, std::string_view query, Respond respond);
// nginx auth_request: descriptors from the headers named in settings.nginx_headers.
void Nginx(Engine& engine, const Request& req, const std::string& domain, Respond respond);
// POST /v1/acquire: a permit of every concurrency limit the descriptor matches.
void Acquire(Engine& engine, const Request& req, std::string_view query, Respond respond);
// POST /v1/release (op kRelease), /v1/extend (kExtend): `permit=TOKEN`.
void PermitCall(Engine& engine, const Request& req, std::string_view query, StoreOp op,
                Respond respond);

}  // namespace sluice::service::http_routes
