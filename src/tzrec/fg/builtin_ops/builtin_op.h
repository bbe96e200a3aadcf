// Operators of the built-in custom_feature library (libtzrec_fg_builtin_ops.so), which speaks
// the C ABI of tzrec_fg_custom_op.h like any third-party operator library would:
//   EditDistance  Levenshtein distance between two texts (bytes, or code points with
//                 operator_params {encoding: "utf-8"})
//   RegexReplace  each value of one input with std::regex (ECMAScript) matches replaced
//   SeqExpr       arithmetic formula over the inputs element-wise, or "spherical_distance"
// TorchEasyRec's pyfg/lib/lib{edit_distance,regex_replace,seq_expr}.so map to this library
// (custom_op.cc). Internal to the library: tzrec itself only sees the C ABI.
//
// Ops are immutable after construction and Compute is const: every op here is thread-safe,
// so `is_op_thread_safe: true` is fine with them.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tzrec/fg/tzrec_fg_custom_op.h"

namespace tzrec::fg::builtin_ops {

// A message for the caller: bad params at creation, bad input values at compute.
class OpError : public std::runtime_error {
 public:
  explicit OpError(const std::string& message) : std::runtime_error(message) {}
};

class Op {
 public:
  virtual ~Op() = default;
  virtual int32_t output_kind() const = 0;
  // Appends this row's values to `out`; throws OpError for bad input values.
  virtual void Compute(const tzrec_fg_input* inputs, size_t num_inputs,
                       const tzrec_fg_output& out) const = 0;
};

// Factories: throw OpError for bad params or a wrong number of inputs.
using Factory = std::unique_ptr<Op> (*)(const nlohmann::json& params,
                                        const std::vector<std::string>& input_names);
std::unique_ptr<Op> CreateEditDistance(const nlohmann::json& params,
                                       const std::vector<std::string>& input_names);
std::unique_ptr<Op> CreateRegexReplace(const nlohmann::json& params,
                                       const std::vector<std::string>& input_names);
std::unique_ptr<Op> CreateSeqExpr(const nlohmann::json& params,
                                  const std::vector<std::string>& input_names);

inline std::string_view View(const tzrec_fg_string& s) { return {s.data, s.size}; }

// operator_params[key] as a string; `fallback` when absent; OpError when not a string.
std::string StringParam(const nlohmann::json& params, const char* key, const char* fallback);

// Fails unless the op got `expected` inputs.
void CheckInputCount(const char* op, const std::vector<std::string>& input_names, size_t expected,
                     const char* what);

// Parses a number ("10", " -1.5e3 "); OpError naming the input otherwise.
double ParseNumber(std::string_view text, const std::string& input_name);

}  // namespace tzrec::fg::builtin_ops
