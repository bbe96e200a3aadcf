// `normalized_entropy` (TorchEasyRec tzrec/metrics/normalized_entropy.py): the summed binary
// cross-entropy of the probabilities (each log clamped to >= -100, as torch's BCE does) over
// the entropy of a constant predictor at the mean label m = S/N clamped to [eta, 1 - eta]:
// NE = CE / -(S log m + (N - S) log(1 - m)); NaN before any row. Reads "probs" (num_class 1)
// or "probs1" (num_class 2). kSum. Not thread-safe.
#include <algorithm>
#include <cmath>
#include <memory>

#include "tzrec/metrics/metric_util.h"
#include "tzrec/protos/metric.pb.h"

namespace tzrec {
namespace {

class NormalizedEntropy : public Metric {
 public:
  explicit NormalizedEntropy(double eta) : eta_(eta) {}

  void Update(const MetricInput& input) override {
    metrics_internal::CheckInput(input, 1, 1, "normalized_entropy");
    for (int64_t i = 0; i < input.rows; ++i) {
      const double p = input.preds[i], y = input.labels[i];
      const double log_p = std::max(std::log(p), -100.0);
      const double log_not_p = std::max(std::log1p(-p), -100.0);
      cross_entropy_ -= y * log_p + (1.0 - y) * log_not_p;
      label_sum_ += y;
    }
    rows_ += static_cast<double>(input.rows);
  }

  double Compute() const override {
    if (rows_ <= 0.0) return std::nan("");
    const double mean = std::clamp(label_sum_ / rows_, eta_, 1.0 - eta_);
    const double baseline =
        -(label_sum_ * std::log(mean) + (rows_ - label_sum_) * std::log1p(-mean));
    return cross_entropy_ / baseline;
  }
  void Reset() override { cross_entropy_ = label_sum_ = rows_ = 0.0; }
  MetricCombine combine() const override { return MetricCombine::kSum; }
  void AppendState(std::vector<double>* state) const override {
    state->push_back(cross_entropy_);
    state->push_back(label_sum_);
    state->push_back(rows_);
  }
  void LoadState(const std::vector<double>& state, size_t* offset) override {
    cross_entropy_ = state.at((*offset)++);
    label_sum_ = state.at((*offset)++);
    rows_ = state.at((*offset)++);
  }

 private:
  double eta_;
  double cross_entropy_ = 0.0;
  double label_sum_ = 0.0;
  double rows_ = 0.0;
};

MetricSpec MakeNormalizedEntropy(const MetricContext& ctx) {
  const auto& config = metrics_internal::ConfigAs<protos::NormalizedEntropy>(ctx);
  MetricSpec spec;
  spec.prediction = metrics_internal::BinaryPrediction(ctx, "normalized_entropy");
  const double eta = static_cast<double>(config.eta());
  if (!(eta >= 0.0 && eta < 0.5)) {
    Fail(metrics_internal::ConfigPath(ctx, "normalized_entropy", "eta"),
         ": must be in [0, 0.5) (got ", eta, ")");
  }
  spec.metric = std::make_unique<NormalizedEntropy>(eta);
  return spec;
}

}  // namespace

TZREC_REGISTER(MetricRegistry(), "normalized_entropy", MakeNormalizedEntropy, "eta");

}  // namespace tzrec
