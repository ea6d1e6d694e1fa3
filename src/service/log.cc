// key=value logging to stderr.
#include "service/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>

namespace sluice::service {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    default:
      return "error";
  }
}

void AppendValue(std::string& out, std::string_view v) {
  bool quote = v.empty();
  for (char c : v) quote = quote || c == ' ' || c == '"' || c == '=' || c == '\n' || c == '\t';
  if (!quote) {
    out.append(v);
    return;
  }
  out.push_back('"');
  for (char c : v) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out.append("\\n");
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

}  // namespace

void SetLogLevel(std::string_view level) {
  LogLevel l = LogLevel::kInfo;
  if (level == "debug") l = LogLevel::kDebug;
  if (level == "warn") l = LogLevel::kWarn;
  if (level == "error") l = LogLevel::kError;
  g_level.store(static_cast<int>(l), std::memory_order_relaxed);
}

bool LogEnabled(LogLevel level) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed);
}

void Log(LogLevel level, std::string_view event,
         std::initializer_list<std::pair<std::string_view, std::string_view>> fields) {
  if (!LogEnabled(level)) return;
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[64];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  std::string line = "ts=";
  line += ts;
  line += " level=";
  line += LevelName(level);
  line += " event=";
  AppendValue(line, event);
  for (const auto& [k, v] : fields) {
    line.push_back(' ');
    line.append(k);
    line.push_back('=');
    AppendValue(line, v);
  }
  line.push_back('\n');
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace sluice::service
