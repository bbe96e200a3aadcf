// `accuracy` (torchmetrics Accuracy as TorchEasyRec rank_model.py builds it, on "probs"):
// num_class 1 is BinaryAccuracy, a row predicted positive iff prob > threshold; num_class > 1
// is micro MulticlassAccuracy with top_k, a row correct iff its label is among the top_k
// classes of probs[row, :] (ties rank the lower class first, as torch's argmax does for
// top_k 1). Value = correct rows / rows; NaN before any row. kSum. Not thread-safe.
#include <cmath>
#include <memory>

#include "tzrec/metrics/metric_util.h"
#include "tzrec/protos/metric.pb.h"

namespace tzrec {
namespace {

class Accuracy : public Metric {
 public:
  Accuracy(int num_class, float threshold, int top_k)
      : num_class_(num_class), threshold_(threshold), top_k_(top_k) {}

  void Update(const MetricInput& input) override {
    metrics_internal::CheckInput(input, num_class_, 1, "accuracy");
    for (int64_t i = 0; i < input.rows; ++i) {
      const float label = input.labels[i];
      if (num_class_ == 1) {
        correct_ += ((input.preds[i] > threshold_) == (label > 0.5f)) ? 1.0 : 0.0;
        continue;
      }
      if (!(label >= 0.0f && label < static_cast<float>(num_class_)) ||
          label != std::floor(label)) {
        Fail("accuracy: label ", label, " is not a class index in [0, ", num_class_, ")");
      }
      const int target = static_cast<int>(label);
      const float* probs = input.preds + i * num_class_;
      // The label's rank: classes ahead of it (higher prob, or equal and lower index).
      int ahead = 0;
      for (int c = 0; c < num_class_ && ahead < top_k_; ++c) {
        if (c == target) continue;
        if (metrics_internal::FloatLess(probs[target], probs[c]) ||
            (c < target && !metrics_internal::FloatLess(probs[c], probs[target]))) {
          ++ahead;
        }
      }
      correct_ += ahead < top_k_ ? 1.0 : 0.0;
    }
    rows_ += static_cast<double>(input.rows);
  }

  double Compute() const override { return rows_ > 0.0 ? correct_ / rows_ : std::nan(""); }
  void Reset() override { correct_ = rows_ = 0.0; }
  MetricCombine combine() const override { return MetricCombine::kSum; }
  void AppendState(std::vector<double>* state) const override {
    state->push_back(correct_);
    state->push_back(rows_);
  }
  void LoadState(const std::vector<double>& state, size_t* offset) override {
    correct_ = state.at((*offset)++);
    rows_ = state.at((*offset)++);
  }

 private:
  int num_class_;
  float threshold_;
  int top_k_;
  double correct_ = 0.0;
  double rows_ = 0.0;
};

MetricSpec MakeAccuracy(const MetricContext& ctx) {
  using metrics_internal::ConfigPath;
  const auto& config = metrics_internal::ConfigAs<protos::Accuracy>(ctx);
  if (ctx.num_class < 1) {
    Fail(ConfigPath(ctx, "accuracy"), ": num_class must be >= 1 (got ", ctx.num_class, ")");
  }
  // torchmetrics checks top_k only for the multi-class task; the binary one ignores it.
  if (ctx.num_class > 1 &&
      (config.top_k() < 1 || config.top_k() > static_cast<uint32_t>(ctx.num_class))) {
    Fail(ConfigPath(ctx, "accuracy", "top_k"), ": must be in [1, num_class = ", ctx.num_class,
         "] (got ", config.top_k(), ")");
  }
  MetricSpec spec;
  spec.prediction = "probs";
  spec.metric = std::make_unique<Accuracy>(ctx.num_class, config.threshold(),
                                           static_cast<int>(config.top_k()));
  return spec;
}

}  // namespace

TZREC_REGISTER(MetricRegistry(), "accuracy", MakeAccuracy, "threshold", "top_k");
TZREC_REGISTER(TrainMetricRegistry(), "accuracy", MakeAccuracy, "threshold", "top_k");

}  // namespace tzrec
