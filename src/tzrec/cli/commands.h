// Subcommands of the `tzrec` binary and their flags (TorchEasyRec's `python -m tzrec.<cmd>`).
#pragma once

#include <string>
#include <vector>

namespace tzrec {

// Runs `command` with its arguments; returns the process exit code. Unknown commands fail
// listing the known ones.
int RunCommand(const std::string& command, const std::vector<std::string>& args);
std::string CommandsHelp();

}  // namespace tzrec
