// The train `auc` (TorchEasyRec's DecayAUC, tzrec/metrics/decay_auc.py): Update() counts into
// a buffer; every decay step Decay(rate) folds the buffer into a decayed confusion state,
// state = rate * state + (1 - rate) * buffer (or state = buffer while the state is empty), and
// Compute() is the binned AUC of that state. The state is linear in the counts, so its sum
// over ranks is the state of one process on all ranks' batches. Not thread-safe.
#include <memory>

#include "tzrec/metrics/auc.h"
#include "tzrec/metrics/metric_util.h"
#include "tzrec/protos/metric.pb.h"

namespace tzrec {
namespace {

class DecayAuc : public Metric {
 public:
  explicit DecayAuc(int num_thresholds) : state_(num_thresholds), buffer_(num_thresholds) {}

  void Update(const MetricInput& input) override { buffer_.Update(input); }
  double Compute() const override { return state_.Compute(); }
  void Reset() override {
    state_.Reset();
    buffer_.Reset();
  }
  MetricCombine combine() const override { return MetricCombine::kSum; }
  // Only the decayed state travels: TrainMetric combines right after Decay(), when the
  // buffer is empty.
  void AppendState(std::vector<double>* state) const override { state_.AppendState(state); }
  void LoadState(const std::vector<double>& state, size_t* offset) override {
    state_.LoadState(state, offset);
  }

  bool decays_state() const override { return true; }
  void Decay(double rate) override {
    // "Any confusion entry > 0" in torchmetrics' layout is "any row counted" in ours: at
    // threshold 0 every row is a true or false positive.
    if (state_.total() > 0.0) {
      state_.Scale(rate);
      state_.Merge(buffer_, 1.0 - rate);
    } else {
      state_.Merge(buffer_);
    }
    buffer_.Reset();
  }

 private:
  BinnedAuc state_;
  BinnedAuc buffer_;
};

MetricSpec MakeDecayAuc(const MetricContext& ctx) {
  const auto& config = metrics_internal::ConfigAs<protos::AUC>(ctx);
  MetricSpec spec;
  spec.prediction = metrics_internal::BinaryPrediction(ctx, "auc");
  spec.metric = std::make_unique<DecayAuc>(metrics_internal::CheckedThresholds(ctx, "auc", config.thresholds()));
  return spec;
}

}  // namespace

TZREC_REGISTER(TrainMetricRegistry(), "auc", MakeDecayAuc, "thresholds");

}  // namespace tzrec
