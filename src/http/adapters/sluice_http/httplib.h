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
// InstallHttplib takes the server's pre-routing handler and its logger (which httplib
// calls once the response has been written). An application that needs its own
// pre-routing handler calls HttplibCheck from it instead, and one with its own logger
// passes it to InstallHttplib (or calls HttplibRequestDone from it).
//
// Issue #12: a route with max_delay waits (Middleware::Wait, on the server's worker
// thread) before the handler runs; a route with a concurrency limit holds its permit
// until the response has been written: HttplibCheck parks the permit in a slot of the
// worker thread (httplib runs a request's routing, handler and write on one thread) and
// the logger releases it. Should a write fail before httplib logs, the permit is released
// by the next request on that thread, or expires after its lease.
//
// Issue #21: a route charged after the response (Route::after) parks its Verdict in the
// same way, and the logger charges it with the written response's status and headers
// (HttplibCharge). A request whose write failed before httplib logs is not charged.
#pragma once

#include <httplib.h>

#include <functional>
#include <memory>
#include <optional>
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

// The permit of the request this worker thread is serving (empty when none).
inline Permit& HttplibHeldPermit() {
  thread_local Permit held;
  return held;
}

// The verdict of the request this worker thread is serving, when its route is charged
// after the response (Route::after); empty (no deferred limits) otherwise.
inline Verdict& HttplibDeferredVerdict() {
  thread_local Verdict deferred;
  return deferred;
}

// Charges the response this thread has just answered, when its route is charged after
// the response (Route::after): its status and cost header, under each policy's
// overage. A bad cost header is counted (MiddlewareStats::bad_costs) and charges
// nothing. InstallHttplib's logger calls it; call it from your own logger otherwise.
inline void HttplibCharge(const Middleware& mw, const httplib::Response& res) {
  Verdict& v = HttplibDeferredVerdict();
  if (v.deferred.empty()) return;
  const HttplibHeaders headers(res.headers);
  (void)mw.Charge(v, res.status, &headers);  // errors are counted in Stats()
}

// Releases the permit of the request this thread has just answered (see above), and
// forgets an uncharged deferred verdict. Call it from your own logger when you set one
// without InstallHttplib's `logger` argument (after HttplibCharge).
inline void HttplibRequestDone() {
  Permit done = std::move(HttplibHeldPermit());
  (void)done;  // released here
  HttplibDeferredVerdict().deferred.clear();
}

// Decides `req`. Returns true when the request may go on to the handlers (the
// rate-limit headers are already set on `res`, a max_delay wait is over, and a
// concurrency permit is held until HttplibRequestDone), false when `res` holds the
// complete 429/503/400/500 answer.
inline bool HttplibCheck(const Middleware& mw, const httplib::Request& req,
                         httplib::Response& res) {
  HttplibRequestDone();  // a permit left by a request whose write failed
  const HttplibHeaders headers(req.headers);
  Request view;
  view.method = req.method;
  view.path = req.path;
  view.peer_address = req.remote_addr;
  view.headers = &headers;
  Verdict v = mw.Check(view);
  // Our values never contain CR/LF, so they skip set_header's check and are moved in.
  for (auto& [name, value] : v.headers) res.headers.emplace(std::string(name), std::move(value));
  if (v.pass()) {
    mw.Wait(v);
    HttplibHeldPermit() = std::move(v.permit);
    if (!v.deferred.empty()) {
      Verdict& d = HttplibDeferredVerdict();
      d.deferred = std::move(v.deferred);
      d.deferred_route = v.deferred_route;
      d.deferred_cost = v.deferred_cost;
    }
    return true;
  }
  res.status = v.status;
  res.set_content(std::move(v.body), v.content_type);
  return false;
}

// Installs `mw` as `server`'s pre-routing handler, and a logger that releases the
// request's permit after the response is written and then calls `logger` (your own,
// optional). The server keeps `mw` alive. Setting another logger later on the server
// replaces ours: pass yours here instead.
inline void InstallHttplib(httplib::Server& server, std::shared_ptr<const Middleware> mw,
                           httplib::Logger logger = nullptr) {
  server.set_pre_routing_handler([mw](const httplib::Request& req, httplib::Response& res) {
    return HttplibCheck(*mw, req, res) ? httplib::Server::HandlerResponse::Unhandled
                                       : httplib::Server::HandlerResponse::Handled;
  });
  server.set_logger(
      [mw, logger = std::move(logger)](const httplib::Request& req, const httplib::Response& res) {
        HttplibCharge(*mw, res);
        HttplibRequestDone();
        if (logger) logger(req, res);
      });
}

}  // namespace sluice::http
