#include "tzrec/fg/normalizer.h"

#include <cmath>
#include <map>
#include <vector>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/fg/expression.h"

namespace tzrec::fg {

Normalizer::~Normalizer() = default;
Normalizer::Normalizer(Normalizer&&) noexcept = default;
Normalizer& Normalizer::operator=(Normalizer&&) noexcept = default;

Normalizer::Normalizer(const std::string& spec, const std::string& where) {
  if (Trim(spec).empty()) return;
  std::map<std::string, std::string> params;
  // expr=... may itself contain commas (e.g. min(x,1)): everything after "expr=" is the formula.
  std::string_view rest = spec;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) Fail(where, ": '", spec, "': expected key=value pairs");
    std::string key(Trim(item.substr(0, eq)));
    if (key == "expr") {
      params[key] = std::string(Trim(rest.substr(eq + 1)));
      break;
    }
    params[key] = std::string(Trim(item.substr(eq + 1)));
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  auto number = [&](const char* key, double fallback, bool required) {
    auto it = params.find(key);
    if (it == params.end()) {
      if (required) Fail(where, ": '", spec, "' needs ", key, "=...");
      return fallback;
    }
    double value;
    if (!ParseDouble(it->second, &value)) Fail(where, ": ", key, "='", it->second, "' is not a number");
    return value;
  };
  const std::string method = params.count("method") ? params["method"] : "";
  if (method == "log10") {
    method_ = Method::kLog10;
    a_ = number("threshold", 1e-10, false);
    b_ = number("default", -10, false);
  } else if (method == "zscore") {
    method_ = Method::kZscore;
    a_ = number("mean", 0, false);
    b_ = number("standard_deviation", 1, false);
    if (b_ == 0) Fail(where, ": standard_deviation must not be 0");
  } else if (method == "minmax") {
    method_ = Method::kMinMax;
    a_ = number("min", 0, true);
    b_ = number("max", 0, true);
    if (!(b_ > a_)) Fail(where, ": max must be greater than min");
  } else if (method == "expression") {
    method_ = Method::kExpression;
    if (!params.count("expr")) Fail(where, ": '", spec, "' needs expr=...");
    expression_ = Expression::Compile(params["expr"], {"x"}, where);
  } else {
    Fail(where, ": unknown normalizer method '", method, "' (known: log10, zscore, minmax, expression)");
  }
}

double Normalizer::Apply(double x) const {
  switch (method_) {
    case Method::kNone: return x;
    case Method::kLog10: return x > a_ ? std::log10(x) : b_;
    case Method::kZscore: return (x - a_) / b_;
    case Method::kMinMax: return (x - a_) / (b_ - a_);
    case Method::kExpression: {
      std::vector<double> out;
      expression_->Evaluate({ExpressionInput{&x, 1}}, &out);
      return out.empty() ? x : out[0];
    }
  }
  return x;
}

}  // namespace tzrec::fg
