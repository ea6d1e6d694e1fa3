// How sluiced is launched by an operator: an environment variable for every flag,
// secrets from files, --version and --check-config. main() declares its own flags and
// hands the parser to Launch; docs/deploy.md describes the result.
//
// Precedence, for every setting: command-line flag > environment variable > the config
// file's `sluiced:` block > built-in default.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "service/daemon.h"
#include "sluice/status.h"

namespace CLI {
class App;
}

namespace sluice::service {

// "--redis-password-file" -> "SLUICED_REDIS_PASSWORD_FILE".
std::string EnvName(std::string_view long_flag);

// Reads a secret from `path`: the whole file minus one trailing newline ("\n" or
// "\r\n"). Errors name the path and why (missing, unreadable, empty, over 64 KiB),
// never the content.
Result<std::string> ReadSecretFile(const std::string& path);

// `url` with its password set to `password` (percent-encoded, so any byte is allowed;
// an ACL user in the URL is kept, a password in the URL is replaced). Errors for
// memory:// (or empty) and unix:// stores, which take no password. Messages never
// contain the password.
Result<std::string> WithRedisPassword(const std::string& url, const std::string& password);

// Applies the password file to `options`: the store URL is the --redis value when given,
// else the config file's sluiced.redis (read here). A config file that does not load is
// left for the caller to report (startup names FILE:LINE).
Status ApplyRedisPasswordFile(const std::string& path, DaemonOptions& options);

// Validates `options` exactly as Daemon::Start and a reload do (listen addresses, the
// config file, the command-line overrides, the store URL, every limit's policy), without
// binding ports or contacting Redis. Prints what was loaded to `out` and returns 0, or
// prints "sluiced: FILE:LINE: why" to `err` (the message startup prints) and returns 1.
// `password_file`, when not empty, is only named in the summary.
int CheckConfig(const DaemonOptions& options, const std::string& password_file, std::FILE* out,
                std::FILE* err);

// Tells the service manager about a state change (sd_notify(3)'s protocol, without
// libsystemd): sends `state` ("READY=1", ...) as one datagram to the
// AF_UNIX socket named by $NOTIFY_SOCKET (a path, or "@name" for the abstract
// namespace). Does nothing when the variable is unset; returns false only when it is
// set and the message could not be sent. With the unit's Type=notify, systemd counts
// sluiced as started once READY=1 arrives, i.e. once both servers listen.
bool NotifyServiceManager(std::string_view state);

// The launch flags of one sluiced process, attached to main()'s parser.
class Launch {
 public:
  // Call before parsing (main()'s flags may be declared before or after). Adds --version,
  // --check-config FILE and --redis-password-file FILE; gives every long flag --foo-bar
  // (but --help, --version and --check-config) the environment variable SLUICED_FOO_BAR,
  // read when the flag is absent; makes --config optional when --check-config names the
  // file. `argv` tells flags from environment values in error messages.
  static std::unique_ptr<Launch> Attach(CLI::App& app, int argc, char** argv);

  // Call after parsing, once main() copied its flags into `options`. Applies the
  // password file and runs --check-config. Returns -1 when the daemon should start, or
  // the process's exit code (0 or 1) after printing why to stderr.
  int Finish(DaemonOptions& options);

 private:
  Launch() = default;
  void Validate(CLI::App& app);
  // "--http" or "SLUICED_HTTP", whichever gave the value.
  std::string Source(const std::vector<std::string>& names, const std::string& env) const;

  std::vector<std::string> argv_;
  std::string check_config_;
  std::string password_file_;
  std::string password_file_source_;
  bool version_ = false;
  bool config_flag_ = false;  // --config was on the command line (not from the environment)
};

}  // namespace sluice::service
