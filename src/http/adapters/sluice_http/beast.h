// sluice_http/beast.h: rate limiting for Boost.Beast servers (optional adapter).
//
// Header-only, in the target sluice::http_beast; it includes Boost.Beast headers, which
// the application provides (Debian: libboost-dev). Beast has no middleware chain, so the
// adapter wraps the application's request handler:
//
//   auto limited = sluice::http::BeastLimit(mw, [](const auto& req) { return MyHandler(req); });
//   ...
//   auto res = limited(req, socket.remote_endpoint().address());   // instead of MyHandler(req)
//
// or, step by step: BeastCheck -> (BeastReject | Wait + handler + BeastApply + BeastCharge).
// A route charged after the response (Route::after, issue #21) is charged by BeastCharge
// with the handler's response.
//
// Issue #12: a route with max_delay waits (Middleware::Wait) before the handler runs. A
// route with a concurrency limit holds a permit in the Verdict: it is released when the
// Verdict is destroyed. `limited(req, peer)` returns the response, so the permit is
// released before you write it; `limited(req, peer, send)` calls `send(response)` while
// the permit is held and releases it once `send` returns (pass a function that writes the
// response, e.g. [&](auto&& res) { http::write(socket, res); }).
#pragma once

#include <boost/asio/ip/address.hpp>
#include <boost/beast/http.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "sluice/http.h"

namespace sluice::http {

// HeaderReader over a Beast header container (boost::beast::http::fields).
template <class Fields>
class BeastHeaders final : public HeaderReader {
 public:
  explicit BeastHeaders(const Fields& fields) : fields_(fields) {}
  bool Get(std::string_view name, std::size_t index, std::string_view* value) const override {
    const auto range = fields_.equal_range(::boost::beast::string_view(name.data(), name.size()));
    for (auto it = range.first; it != range.second; ++it) {
      if (index-- == 0) {
        const auto v = it->value();
        *value = std::string_view(v.data(), v.size());
        return true;
      }
    }
    return false;
  }

 private:
  const Fields& fields_;
};

// Decides `req` from the TCP peer `peer`. `path` is what routes match; by default the
// request target up to '?', as received (not percent-decoded: pass the decoded path if
// the application's routing decodes it, so that routes cannot be dodged by encoding).
template <class Body, class Fields>
Verdict BeastCheck(const Middleware& mw, const ::boost::beast::http::request<Body, Fields>& req,
                   const ::boost::asio::ip::address& peer, std::string_view path = {}) {
  const BeastHeaders<Fields> headers(req.base());
  const auto method = req.method_string();
  const auto target = req.target();
  if (path.empty()) {
    path = std::string_view(target.data(), target.size());
    path = path.substr(0, path.find('?'));
  }
  const std::string peer_text = peer.to_string();
  Request view;
  view.method = std::string_view(method.data(), method.size());
  view.path = path;
  view.peer_address = peer_text;
  view.headers = &headers;
  return mw.Check(view);
}

// Adds the verdict's rate-limit headers to the application's response.
template <class Body, class Fields>
void BeastApply(const Verdict& v, ::boost::beast::http::response<Body, Fields>& res) {
  for (const auto& [name, value] : v.headers) {
    res.insert(::boost::beast::string_view(name.data(), name.size()),
               ::boost::beast::string_view(value.data(), value.size()));
  }
}

// The complete answer for a verdict that does not pass (429, 503, 400, 500).
template <class Body, class Fields>
::boost::beast::http::response<::boost::beast::http::string_body> BeastReject(
    const Verdict& v, const ::boost::beast::http::request<Body, Fields>& req) {
  ::boost::beast::http::response<::boost::beast::http::string_body> res{
      static_cast<::boost::beast::http::status>(v.status), req.version()};
  res.set(::boost::beast::http::field::content_type, v.content_type);
  BeastApply(v, res);
  res.keep_alive(req.keep_alive());
  res.body() = v.body;
  res.prepare_payload();
  return res;
}

// Route::after: charges the application's response (its status and cost header) to
// the verdict's limits, under each policy's overage (Middleware::Charge). Nothing for a
// verdict without deferred limits, and nothing the second time.
template <class Body, class Fields>
void BeastCharge(const Middleware& mw, Verdict& v,
                 const ::boost::beast::http::response<Body, Fields>& res) {
  if (v.deferred.empty()) return;
  const BeastHeaders<Fields> headers(res.base());
  (void)mw.Charge(v, static_cast<int>(res.result_int()), &headers);  // counted in Stats()
}

// The callable BeastLimit returns.
template <class Handler>
class BeastLimited {
 public:
  BeastLimited(std::shared_ptr<const Middleware> mw, Handler handler)
      : mw_(std::move(mw)), handler_(std::move(handler)) {}

  // The rejection, or the handler's response with the rate-limit headers added (after a
  // max_delay wait). A concurrency permit is released when this returns.
  template <class Request>
  auto operator()(const Request& req, const ::boost::asio::ip::address& peer) const {
    Verdict v = BeastCheck(*mw_, req, peer);
    if (!v.pass()) return BeastReject(v, req);
    mw_->Wait(v);
    auto res = handler_(req);
    BeastApply(v, res);
    BeastCharge(*mw_, v, res);
    return res;
  }

  // The same, handing the response to `send` while a concurrency permit is held: the
  // permit is released only after `send` returns (the response has been written).
  template <class Request, class Send>
  void operator()(const Request& req, const ::boost::asio::ip::address& peer, Send&& send) const {
    Verdict v = BeastCheck(*mw_, req, peer);
    if (!v.pass()) {
      auto rejection = BeastReject(v, req);
      send(rejection);
      return;
    }
    mw_->Wait(v);
    auto res = handler_(req);
    BeastApply(v, res);
    BeastCharge(*mw_, v, res);
    send(res);
  }  // v (and its permit) is destroyed here, after the response was sent

 private:
  std::shared_ptr<const Middleware> mw_;
  Handler handler_;
};

// Wraps `handler` (request -> response<string_body>): the returned callable takes
// (request, peer address[, send]) and answers either the rejection or the handler's
// response with the rate-limit headers added (see BeastLimited).
template <class Handler>
BeastLimited<Handler> BeastLimit(std::shared_ptr<const Middleware> mw, Handler handler) {
  return BeastLimited<Handler>(std::move(mw), std::move(handler));
}

}  // namespace sluice::http
