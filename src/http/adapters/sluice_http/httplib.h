// sluice_http/httplib.h: rate limiting for cpp-httplib servers (optional adapter).
//
// Header-only, in the target sluice::http_httplib; it includes <httplib.h>, which the
// application provides (Debian: libcpp-httplib-dev). Every request, routed or not
// (404s too), is checked before any handler runs:
//
//   auto mw = std::shared_ptr(sluice::http::Middleware::Create(std::move(options)).value());
//   httplib::Server server;
//   sluice::http::InstallHttplib(server, mw);
//   server.Get("/hello", ...);
//
// InstallHttplib takes the server's pre-routing handler. An application that needs its
// own pre-routing handler calls HttplibCheck from it instead.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "sluice/http.h"

namespace sluice::http {

// HeaderReader over httplib's case-insensitive header multimap.
class HttplibHeaders final : public HeaderReader {
 public:
  explicit HttplibHeaders(const httplib::Headers& headers) : headers_(headers) {}
  bool Get(std::string_view name, std::size_t index, std::string_view* value) const override {
    const auto range = headers_.equal_range(std::string(name));
    for (auto it = range.first; it != range.second; ++it) {
      if (index-- == 0) {
        *value = it->second;
        return true;
      }
    }
    return false;
  }

 private:
  const httplib::Headers& headers_;
};

// Decides `req`. Returns true when the request may go on to the handlers (the
// rate-limit headers are already set on `res`), false when `res` holds the complete
// 429/503/400/500 answer.
inline bool HttplibCheck(const Middleware& mw, const httplib::Request& req,
                         httplib::Response& res) {
  const HttplibHeaders headers(req.headers);
  Request view;
  view.method = req.method;
  view.path = req.path;
  view.peer_address = req.remote_addr;
  view.headers = &headers;
  Verdict v = mw.Check(view);
  // Our values never contain CR/LF, so they skip set_header's check and are moved in.
  for (auto& [name, value] : v.headers) res.headers.emplace(std::string(name), std::move(value));
  if (v.pass()) return true;
  res.status = v.status;
  res.set_content(std::move(v.body), v.content_type);
  return false;
}

// Installs `mw` as `server`'s pre-routing handler. The server keeps `mw` alive.
inline void InstallHttplib(httplib::Server& server, std::shared_ptr<const Middleware> mw) {
  server.set_pre_routing_handler(
      [mw = std::move(mw)](const httplib::Request& req, httplib::Response& res) {
        return HttplibCheck(*mw, req, res) ? httplib::Server::HandlerResponse::Unhandled
                                           : httplib::Server::HandlerResponse::Handled;
      });
}

}  // namespace sluice::http
