// `multiclass_auc`: torchmetrics' MulticlassAUROC with binned thresholds (TorchEasyRec
// rank_model.py builds torchmetrics.AUROC(task="multiclass", thresholds=...)). One-vs-rest
// binned ROC per class on probs[:, c], trapezoid area, then "macro" (mean over classes) or
// "weighted" (by class support, the rows labelled c). Binned rates divide safely, so a class
// with no positive or no negative rows has area 0 and stays in the average, exactly as in
// torchmetrics 1.0.3 (its NaN filter in _reduce_auroc never fires on binned rates). kSum.
// Not thread-safe.
#include <cmath>
#include <memory>
#include <string>

#include "tzrec/metrics/auc.h"
#include "tzrec/metrics/metric_util.h"
#include "tzrec/protos/metric.pb.h"

namespace tzrec {
namespace {

class MulticlassAuc : public Metric {
 public:
  MulticlassAuc(int num_class, int num_thresholds, bool weighted)
      : num_class_(num_class), weighted_(weighted) {
    for (int c = 0; c < num_class; ++c) per_class_.emplace_back(num_thresholds);
  }

  void Update(const MetricInput& input) override {
    metrics_internal::CheckInput(input, num_class_, 1, "multiclass_auc");
    std::vector<float> probs(input.rows), is_class(input.rows);
    for (int64_t i = 0; i < input.rows; ++i) {
      CheckLabel(input.labels[i]);
    }
    for (int c = 0; c < num_class_; ++c) {
      for (int64_t i = 0; i < input.rows; ++i) {
        probs[i] = input.preds[i * num_class_ + c];
        is_class[i] = static_cast<int>(input.labels[i]) == c ? 1.0f : 0.0f;
      }
      per_class_[c].Update(probs.data(), is_class.data(), input.rows);
    }
  }

  double Compute() const override {
    double sum = 0.0, weight_sum = 0.0;
    for (int c = 0; c < num_class_; ++c) {
      double auc = per_class_[c].Compute();
      double weight = weighted_ ? per_class_[c].positives() : 1.0;
      sum += auc * weight;
      weight_sum += weight;
    }
    // No rows at all: torchmetrics' safe division gives 0 for weighted.
    if (weighted_) return weight_sum > 0.0 ? sum / weight_sum : 0.0;
    return sum / num_class_;
  }

  void Reset() override {
    for (BinnedAuc& auc : per_class_) auc.Reset();
  }
  MetricCombine combine() const override { return MetricCombine::kSum; }
  void AppendState(std::vector<double>* state) const override {
    for (const BinnedAuc& auc : per_class_) auc.AppendState(state);
  }
  void LoadState(const std::vector<double>& state, size_t* offset) override {
    for (BinnedAuc& auc : per_class_) auc.LoadState(state, offset);
  }

 private:
  void CheckLabel(float label) const {
    if (!(label >= 0.0f && label < static_cast<float>(num_class_)) || label != std::floor(label)) {
      Fail("multiclass_auc: label ", label, " is not a class index in [0, ", num_class_, ")");
    }
  }

  int num_class_;
  bool weighted_;
  std::vector<BinnedAuc> per_class_;
};

MetricSpec MakeMulticlassAuc(const MetricContext& ctx) {
  using metrics_internal::ConfigPath;
  const auto& config = metrics_internal::ConfigAs<protos::MulticlassAUC>(ctx);
  if (ctx.num_class < 2) {
    Fail(ConfigPath(ctx, "multiclass_auc"), ": num_class must be >= 2 for multiclass_auc (got ",
         ctx.num_class, ")");
  }
  const int thresholds = metrics_internal::CheckedThresholds(ctx, "multiclass_auc", config.thresholds());
  if (config.average() != "macro" && config.average() != "weighted") {
    Fail(ConfigPath(ctx, "multiclass_auc", "average"),
         ": must be \"macro\" or \"weighted\" (got \"", config.average(), "\")");
  }
  MetricSpec spec;
  spec.prediction = "probs";
  spec.metric = std::make_unique<MulticlassAuc>(
      ctx.num_class, thresholds, config.average() == "weighted");
  return spec;
}

}  // namespace

TZREC_REGISTER(MetricRegistry(), "multiclass_auc", MakeMulticlassAuc, "thresholds", "average");

}  // namespace tzrec
