// Structured logs: one key=value line per event on stderr, e.g.
//   ts=2026-11-30T13:00:00.123Z level=info event=config_loaded file=/etc/sluiced.yaml domains=2
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::service {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Sets the lowest level written ("debug", "info", "warn", "error"). Thread-safe.
void SetLogLevel(std::string_view level);
bool LogEnabled(LogLevel level);

// Writes one line: ts, level, event, then the fields in order. Values with spaces, quotes
// or '=' are quoted. Thread-safe; a line is written with one write(2).
void Log(LogLevel level, std::string_view event,
         std::initializer_list<std::pair<std::string_view, std::string_view>> fields = {});

}  // namespace sluice::service
