// Command-line flags in argparse style: `--name=value` or `--name value`, boolean switches
// without a value, and unknown flags ignored with a warning (as parse_known_args does).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tzrec {

struct FlagSpec {
  std::string name;  // without leading dashes
  std::string help;
  bool is_switch = false;  // store_true flag: takes no value
  std::string default_value;
};

class Flags {
 public:
  Flags(std::string command, std::string description, std::vector<FlagSpec> specs);

  // Parses argv (after the subcommand). Returns false if --help was given (help printed).
  bool Parse(const std::vector<std::string>& args);
  bool Has(const std::string& name) const;  // given on the command line
  std::string Get(const std::string& name) const;
  bool GetSwitch(const std::string& name) const;
  int64_t GetInt(const std::string& name) const;
  std::string Help() const;
  const std::vector<std::string>& unknown() const { return unknown_; }

 private:
  const FlagSpec* Find(const std::string& name) const;

  std::string command_;
  std::string description_;
  std::vector<FlagSpec> specs_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> unknown_;
};

}  // namespace tzrec
