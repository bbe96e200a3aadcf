// The C ABI entry points of the built-in operator library (see builtin_op.h).
#include <algorithm>
#include <charconv>
#include <cstring>
#include <exception>
#include <utility>

#include "tzrec/fg/builtin_ops/builtin_op.h"

namespace tzrec::fg::builtin_ops {
namespace {

struct Entry {
  const char* name;
  Factory create;
};
constexpr Entry kOps[] = {
    {"EditDistance", CreateEditDistance},
    {"RegexReplace", CreateRegexReplace},
    {"SeqExpr", CreateSeqExpr},
};

void CopyError(const std::string& message, char* error, size_t error_len) {
  if (!error || error_len == 0) return;
  size_t n = std::min(message.size(), error_len - 1);
  std::memcpy(error, message.data(), n);
  error[n] = '\0';
}

}  // namespace

std::string StringParam(const nlohmann::json& params, const char* key, const char* fallback) {
  auto it = params.find(key);
  if (it == params.end() || it->is_null()) return fallback;
  if (!it->is_string()) throw OpError(std::string("param '") + key + "' must be a string, got " + it->dump());
  return it->get<std::string>();
}

void CheckInputCount(const char* op, const std::vector<std::string>& input_names, size_t expected,
                     const char* what) {
  if (input_names.size() == expected) return;
  throw OpError(std::string(op) + " needs " + std::to_string(expected) + " inputs (" + what + "), got " +
                std::to_string(input_names.size()));
}

double ParseNumber(std::string_view text, const std::string& input_name) {
  std::string_view t = text;
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.remove_suffix(1);
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  double value = 0;
  auto result = std::from_chars(t.data(), t.data() + t.size(), value);
  if (t.empty() || result.ec != std::errc() || result.ptr != t.data() + t.size()) {
    throw OpError("input '" + input_name + "': '" + std::string(text) + "' is not a number");
  }
  return value;
}

}  // namespace tzrec::fg::builtin_ops

using tzrec::fg::builtin_ops::kOps;
using tzrec::fg::builtin_ops::Op;

extern "C" {

uint32_t tzrec_fg_op_abi_version(void) { return TZREC_FG_OP_ABI_VERSION; }

void* tzrec_fg_op_create(const char* operator_name, const char* params_json,
                         const char* const* input_names, size_t num_inputs, char* error,
                         size_t error_len) {
  using tzrec::fg::builtin_ops::CopyError;
  try {
    const std::string name = operator_name ? operator_name : "";
    for (const auto& entry : kOps) {
      if (name != entry.name) continue;
      nlohmann::json params = nlohmann::json::parse(params_json && *params_json ? params_json : "{}");
      if (!params.is_object()) throw tzrec::fg::builtin_ops::OpError("operator_params must be a JSON object");
      std::vector<std::string> inputs(input_names, input_names + num_inputs);
      return entry.create(params, inputs).release();
    }
    std::string known;
    for (const auto& entry : kOps) known += std::string(known.empty() ? "" : ", ") + entry.name;
    CopyError("unknown operator '" + name + "'; known: " + known, error, error_len);
  } catch (const std::exception& e) {
    CopyError(e.what(), error, error_len);
  } catch (...) {
    CopyError("unknown error", error, error_len);
  }
  return nullptr;
}

int32_t tzrec_fg_op_output_kind(const void* op) { return static_cast<const Op*>(op)->output_kind(); }

int32_t tzrec_fg_op_compute(void* op, const tzrec_fg_input* inputs, size_t num_inputs,
                            const tzrec_fg_output* out) {
  try {
    static_cast<const Op*>(op)->Compute(inputs, num_inputs, *out);
    return 0;
  } catch (const std::exception& e) {
    out->set_error(out->context, e.what(), std::strlen(e.what()));
  } catch (...) {
    out->set_error(out->context, "unknown error", 13);
  }
  return 1;
}

void tzrec_fg_op_destroy(void* op) { delete static_cast<Op*>(op); }

}  // extern "C"
