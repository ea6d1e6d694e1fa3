#include "cli/flags.h"

#include <charconv>
#include <cstdlib>

namespace sluice::cli {

int ParseFlags(CLI::App& app, const std::vector<std::string>& args, std::string_view name,
               std::ostream& out, std::ostream& err) {
  // CLI11 wants a mutable argv whose first entry is the program name.
  std::vector<std::string> storage(args.begin(), args.end());
  if (storage.empty()) storage.emplace_back(name);
  std::vector<char*> argv;
  for (std::string& a : storage) argv.push_back(a.data());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    err << name << ": " << e.what() << "\nRun '" << name << " --help' for usage.\n";
    return 2;
  }
  return -1;
}

CLI::Validator AtLeastOne(std::string hint) {
  return CLI::Validator(
      [hint](std::string& text) -> std::string {
        // Only the sign and zero are judged here; anything else that is not an
        // integer is left to the conversion, whose message names the value.
        std::int64_t n = 0;
        const char* end = text.data() + text.size();
        auto [ptr, ec] = std::from_chars(text.data(), end, n);
        const bool negative = !text.empty() && text[0] == '-';
        if ((ec == std::errc() && ptr == end && n < 1) || negative) {
          return "must be at least 1, not '" + text + "'" + (hint.empty() ? "" : " (" + hint + ")");
        }
        return {};
      },
      "INT>=1", "AT_LEAST_ONE");
}

CLI::Validator MoreThanZero() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "'" + text + "' is not a number";
        if (!(v > 0)) return "must be more than 0, not '" + text + "'";
        return {};
      },
      "NUM>0", "MORE_THAN_ZERO");
}

}  // namespace sluice::cli
