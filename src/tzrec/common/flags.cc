#include "tzrec/common/flags.h"

#include <cstdio>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"

namespace tzrec {

Flags::Flags(std::string command, std::string description, std::vector<FlagSpec> specs)
    : command_(std::move(command)), description_(std::move(description)),
      specs_(std::move(specs)) {}

const FlagSpec* Flags::Find(const std::string& name) const {
  for (const auto& spec : specs_) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

bool Flags::Parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(Help().c_str(), stdout);
      return false;
    }
    if (!StartsWith(arg, "--")) {
      unknown_.push_back(arg);
      LOG_WARNING << "ignoring unexpected argument '" << arg << "'";
      continue;
    }
    std::string body = arg.substr(2);
    std::string name = body, value;
    bool has_inline_value = false;
    size_t eq = body.find('=');
    if (eq != std::string::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_inline_value = true;
    }
    // argparse accepts dashes in place of underscores.
    for (auto& c : name) {
      if (c == '-') c = '_';
    }
    const FlagSpec* spec = Find(name);
    if (!spec) {
      unknown_.push_back(arg);
      LOG_WARNING << "ignoring unknown flag '" << arg << "'";
      // Skip its value too, as parse_known_args leaves it unconsumed but harmless.
      if (!has_inline_value && i + 1 < args.size() && !StartsWith(args[i + 1], "--")) ++i;
      continue;
    }
    if (spec->is_switch) {
      if (has_inline_value) Fail("flag --", name, " takes no value");
      values_[name] = "true";
      continue;
    }
    if (!has_inline_value) {
      if (i + 1 >= args.size()) Fail("flag --", name, " needs a value");
      value = args[++i];
    }
    values_[name] = value;
  }
  return true;
}

bool Flags::Has(const std::string& name) const { return values_.count(name) > 0; }

std::string Flags::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end()) return it->second;
  const FlagSpec* spec = Find(name);
  TZREC_CHECK(spec != nullptr, "flag ", name, " is not declared");
  return spec->default_value;
}

bool Flags::GetSwitch(const std::string& name) const { return Has(name); }

int64_t Flags::GetInt(const std::string& name) const {
  std::string text = Get(name);
  int64_t value;
  if (!ParseInt64(text, &value)) Fail("flag --", name, " must be an integer, got '", text, "'");
  return value;
}

std::string Flags::Help() const {
  std::string text = StrCat("usage: tzrec ", command_, " [flags]\n\n", description_, "\n\nflags:\n");
  for (const auto& spec : specs_) {
    std::string left = "  --" + spec.name + (spec.is_switch ? "" : " VALUE");
    if (left.size() < 34) left.resize(34, ' ');
    else left += "\n" + std::string(34, ' ');
    text += left + spec.help;
    if (!spec.default_value.empty()) text += " (default: " + spec.default_value + ")";
    text += "\n";
  }
  return text;
}

}  // namespace tzrec
