// Formula evaluation for expr_feature and the `expression` normalizer (no LibTorch).
//
// A formula such as `u_age == i_age ? 1 : 0` or `dot(a, b) / (l2_norm(a) + 1)` is compiled
// once against a list of variable names and then evaluated per row. Scalar arithmetic,
// comparison/logical operators, `?:` and scalar functions come from muParser (its built-ins
// plus rnd, floor, ceil, trunc, round (half away from zero), roundp(x, digits), sigmoid,
// sphere_dist and haversine (lng1, lat1, lng2, lat2 in degrees; kilometres on a sphere of
// radius 6371 km), and `|`/`&` as bitwise or/and of the operands rounded to integers). The
// vector functions TorchEasyRec lists (len, l2_norm, squared_norm, dot, euclid_dist,
// std_dev, pop_std_dev, variance, pop_variance, reduce_min/max/sum/mean/prod) are ours,
// applied to whole variables named as their arguments; std_dev/variance divide by n and the
// pop_ ones by n - 1, as TorchEasyRec documents.
//
// Without vector functions, multi-value variables broadcast element-wise (a one-value
// variable broadcasts against an n-value one; two different lengths other than 1 are an
// error), so an empty variable yields no values. With vector functions, the variables used
// outside them must hold one value (none: no output). Assignment (`x = 1`) and comma lists
// are rejected.
//
// Thread safety: a compiled Expression is immutable; Evaluate may be called concurrently
// (each thread evaluates with its own parser, kept for the Expression's lifetime).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace tzrec::fg {

// One variable's values for one row (a scalar is a vector of one value).
struct ExpressionInput {
  const double* values = nullptr;
  size_t size = 0;
};

class Expression {
 public:
  virtual ~Expression() = default;

  // Compiles `formula` over `variables` (the names the formula uses, in input order). A
  // syntax error, an unknown function or an unknown variable throws tzrec::Error whose
  // message starts with `where` (e.g. "feature_configs[3].expr_feature 'age_match'") and
  // names the function or variable.
  static std::unique_ptr<Expression> Compile(const std::string& formula,
                                             const std::vector<std::string>& variables,
                                             const std::string& where);

  // Evaluates for one row; inputs[i] binds variables[i]. Replaces *out with 1 value, or n
  // values when element-wise broadcasting over n-value variables (0 when a variable is
  // empty). Throws tzrec::Error (prefixed with `where`) for incompatible lengths.
  virtual void Evaluate(const std::vector<ExpressionInput>& inputs,
                        std::vector<double>* out) const = 0;
};

}  // namespace tzrec::fg
