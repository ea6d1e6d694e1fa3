#include "cli/flags.h"

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

}  // namespace sluice::cli
