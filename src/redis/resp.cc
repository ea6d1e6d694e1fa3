#include "redis/resp.h"

#include <charconv>
#include <cstdio>

namespace sluice::redis {
namespace {

// `kind`, `n` in decimal and CRLF, formatted in place: every argument of every call
// comes through here (AppendBulk), most of them on a connection's I/O thread.
std::size_t FormatLength(char (&buf)[24], char kind, std::size_t n) {
  buf[0] = kind;
  char* end = std::to_chars(buf + 1, buf + sizeof(buf) - 2, n).ptr;
  *end++ = '\r';
  *end++ = '\n';
  return static_cast<std::size_t>(end - buf);
}

}  // namespace

CommandBuilder::CommandBuilder(std::size_t argc) {
  char buf[24];
  wire_.append(buf, FormatLength(buf, '*', argc));
}

void AppendBulk(std::string& out, std::string_view arg) {
  char buf[24];
  const std::size_t head = FormatLength(buf, '$', arg.size());
  out.append(buf, head);
  out.append(arg);
  out.append("\r\n", 2);
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
