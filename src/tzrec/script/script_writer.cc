#include "tzrec/script/script_writer.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "tzrec/common/error.h"

namespace tzrec {
namespace {

std::string Sanitise(const std::string& hint) {
  std::string out;
  for (char c : hint) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (out.empty() || std::isdigit(static_cast<unsigned char>(out[0]))) out = "t_" + out;
  return out;
}

}  // namespace

std::string ScriptFloat(double value) {
  if (std::isnan(value)) return "float(\"nan\")";
  if (std::isinf(value)) return value > 0 ? "float(\"inf\")" : "float(\"-inf\")";
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  std::string text(buffer);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string ScriptIntList(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

void ScriptWriter::Unsupported(const std::string& why) { throw ScriptUnsupported(why); }

std::string ScriptWriter::Unique(const std::string& hint) {
  std::string base = Sanitise(hint);
  // Locals and attributes share one namespace; "data", "device", "out" and "self" are taken.
  std::string name = base;
  for (int i = 1; names_.count(name) || name == "data" || name == "device" || name == "out" ||
                  name == "self" || name == "torch";
       ++i) {
    name = base + "_" + std::to_string(i);
  }
  names_.insert(name);
  return name;
}

std::string ScriptWriter::Tensor(const std::string& hint, const at::Tensor& tensor,
                                 const std::string& key) {
  if (!key.empty()) {
    auto it = tensor_keys_.find(key);
    if (it != tensor_keys_.end()) return it->second;
  }
  const std::string name = Unique(hint);
  tensors_.emplace_back(name, tensor.detach().contiguous().clone());
  std::string ref = "self." + name;
  if (!key.empty()) tensor_keys_[key] = ref;
  return ref;
}

std::string ScriptWriter::Let(const std::string& hint, const std::string& expression) {
  const std::string local = Unique(hint);
  body_.push_back(local + " = " + expression);
  return local;
}

std::string ScriptWriter::Input(const std::string& name) {
  for (char c : name) {
    if (c == '"' || c == '\\' || c == '\n') Unsupported("input name '" + name + "' cannot be quoted");
  }
  inputs_.insert(name);
  return "data[\"" + name + "\"]";
}

void ScriptWriter::Output(const std::string& name, const std::string& local) { outputs_[name] = local; }

std::string ScriptWriter::TakeOutput(const std::string& name) {
  auto it = outputs_.find(name);
  TZREC_CHECK(it != outputs_.end(), "no scripted output '", name, "'");
  std::string local = it->second;
  outputs_.erase(it);
  return local;
}

void ScriptWriter::Method(const std::string& name, const std::string& source) {
  methods_.emplace(name, source);
}

std::vector<std::string> ScriptWriter::output_names() const {
  std::vector<std::string> names;
  for (const auto& [name, local] : outputs_) names.push_back(name);
  return names;
}

std::string ScriptWriter::Source() const {
  std::ostringstream out;
  for (const auto& [name, source] : methods_) out << source << "\n";
  out << "def forward(self, data: Dict[str, Tensor], device: str = \"cpu\") -> Dict[str, Tensor]:\n";
  for (const std::string& line : body_) out << "    " << line << "\n";
  out << "    out: Dict[str, Tensor] = {}\n";
  for (const auto& [name, local] : outputs_) out << "    out[\"" << name << "\"] = " << local << "\n";
  out << "    return out\n";
  return out.str();
}

}  // namespace tzrec
