// `tzrec` command-line entry point: dispatches to subcommands.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "tzrec/cli/commands.h"
#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/kernels/blas_core.h"
#include "tzrec/train/runtime.h"
#include "tzrec/version.h"

int main(int argc, char** argv) {
  tzrec::EnsureFastRuntimeEnvironment(argv);  // may restart the process, so before anything else
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(tzrec::CommandsHelp().c_str(), stdout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version" || args[0] == "version") {
    std::printf("tzrec-cpp %s\n", tzrec::kTzrecVersion);
    return 0;
  }
  std::string command = args[0];
  args.erase(args.begin());
  try {
    tzrec::InitRuntime();
    return tzrec::RunCommand(command, args);
  } catch (const tzrec::Error& e) {
    LOG_ERROR << e.what();
    return 1;
  } catch (const std::exception& e) {
    LOG_ERROR << "unexpected error: " << e.what();
    return 1;
  }
}
