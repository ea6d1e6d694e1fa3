// Internal: flag parsing shared by every `sluice` subcommand.
#pragma once

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::cli {

// Parses `args` (the subcommand's own arguments, its name first; may be empty) with
// `app`. Returns an exit code when parsing already decided the outcome — 0 after
// printing --help to `out`, 2 after naming the bad flag on `err` as "<name>: ..." — or
// -1 when the command should go on.
int ParseFlags(CLI::App& app, const std::vector<std::string>& args, std::string_view name,
               std::ostream& out, std::ostream& err);

// A check for counts that must be at least 1 (--cost, --burst, --requests): 0 and
// negative values are refused as "must be at least 1, not '0'" (CLI11 puts the flag's
// name first). `hint` is appended to the message when not empty.
CLI::Validator AtLeastOne(std::string hint = {});

// A check for numbers that must be more than 0 (--target-rate): "must be more than 0,
// not '-2'".
CLI::Validator MoreThanZero();

}  // namespace sluice::cli
