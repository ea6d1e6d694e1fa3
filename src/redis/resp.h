// Internal: building commands in the Redis wire format (RESP arrays of bulk strings).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

namespace sluice::redis {

// Builds one command. Declare the argument count up front, then Add each argument.
class CommandBuilder {
 public:
  explicit CommandBuilder(std::size_t argc);
  CommandBuilder& Add(std::string_view arg);
  CommandBuilder& Add(long long v);
  // Bytes added so far (e.g. where an argument starts).
  std::size_t size() const { return wire_.size(); }
  // The wire bytes; the builder is empty afterwards.
  std::string Take() { return std::move(wire_); }

 private:
  std::string wire_;
};

// Encodes a whole command at once.
std::string EncodeCommand(std::initializer_list<std::string_view> args);

// Appends `arg` as one RESP bulk string (an argument of a command built by hand).
void AppendBulk(std::string& out, std::string_view arg);

}  // namespace sluice::redis
