// Reading a config file, and watching it for complete changes (service/config.h).
#include <fstream>
#include <sstream>

#include "service/config.h"

namespace sluice::service {

namespace {

Result<std::string> ReadFile(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return Status::InvalidArgument(file + ": cannot open the config file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::InvalidArgument(file + ": cannot read the config file");
  return ss.str();
}

}  // namespace

Result<Config> LoadConfig(const std::string& file) {
  auto text = ReadFile(file);
  if (!text.ok()) return text.status();
  return ParseConfig(*text, file);
}

ConfigFileWatcher::ConfigFileWatcher(std::string file, Micros settle)
    : file_(std::move(file)), settle_(settle) {
  MarkLoaded();
}

void ConfigFileWatcher::MarkLoaded() {
  auto text = ReadFile(file_);
  loaded_ = text.ok() ? std::move(*text) : std::string();
  has_pending_ = false;
}

Result<Config> ConfigFileWatcher::Poll(Micros now) {
  auto text = ReadFile(file_);
  if (!text.ok()) {
    // A file briefly missing (replaced by rename) is not a change to load.
    return Status::NotFound("config file unreadable; keeping the running config");
  }
  if (*text == loaded_) {
    has_pending_ = false;
    return Status::NotFound("unchanged");
  }
  if (!has_pending_ || *text != pending_) {
    // New content: wait until it stays the same for `settle`.
    pending_ = std::move(*text);
    pending_since_ = now;
    has_pending_ = true;
    pending_reported_ = false;
    return Status::NotFound("changed; waiting for the file to settle");
  }
  if (now - pending_since_ < settle_) return Status::NotFound("waiting for the file to settle");
  auto config = ParseConfig(pending_, file_);
  if (!config.ok()) {
    // Stable but invalid: reported once; the next change starts over.
    if (pending_reported_) return Status::NotFound("unchanged invalid config");
    pending_reported_ = true;
    return config.status();
  }
  loaded_ = pending_;
  has_pending_ = false;
  return config;
}

}  // namespace sluice::service
