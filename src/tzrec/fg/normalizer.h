// `normalizer` of raw-valued features: "method=log10,threshold=1e-10,default=-10",
// "method=zscore,mean=0.0,standard_deviation=10.0", "method=minmax,min=2.1,max=2.2" or
// "method=expression,expr=sign(x)" (the variable is x). An empty string is no-op.
// Immutable after construction; Apply is thread-safe.
#pragma once

#include <memory>
#include <string>

namespace tzrec::fg {

class Expression;

class Normalizer {
 public:
  Normalizer() = default;
  // `where` prefixes errors (e.g. "feature_configs[1].raw_feature.normalizer").
  Normalizer(const std::string& spec, const std::string& where);
  ~Normalizer();
  Normalizer(Normalizer&&) noexcept;
  Normalizer& operator=(Normalizer&&) noexcept;

  bool active() const { return method_ != Method::kNone; }
  double Apply(double x) const;

 private:
  enum class Method { kNone, kLog10, kZscore, kMinMax, kExpression };
  Method method_ = Method::kNone;
  double a_ = 0, b_ = 0;  // log10: threshold, default; zscore: mean, std; minmax: min, max
  std::unique_ptr<Expression> expression_;
};

}  // namespace tzrec::fg
