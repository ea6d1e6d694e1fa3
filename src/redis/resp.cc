#include "redis/resp.h"

#include <cstdio>

namespace sluice::redis {
namespace {

void AppendLength(std::string& out, char kind, std::size_t n) {
  out.push_back(kind);
  out.append(std::to_string(n));
  out.append("\r\n");
}

}  // namespace

CommandBuilder::CommandBuilder(std::size_t argc) {
  AppendLength(wire_, '*', argc);
}

void AppendBulk(std::string& out, std::string_view arg) {
  AppendLength(out, '$', arg.size());
  out.append(arg);
  out.append("\r\n");
}

CommandBuilder& CommandBuilder::Add(std::string_view arg) {
  AppendBulk(wire_, arg);
  return *this;
}

CommandBuilder& CommandBuilder::Add(long long v) {
  char buf[24];
  const int n = std::snprintf(buf, sizeof(buf), "%lld", v);
  return Add(std::string_view(buf, static_cast<std::size_t>(n)));
}

std::string EncodeCommand(std::initializer_list<std::string_view> args) {
  CommandBuilder b(args.size());
  for (std::string_view a : args) b.Add(a);
  return b.Take();
}

}  // namespace sluice::redis
