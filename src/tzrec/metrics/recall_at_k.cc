// `recall_at_k` (TorchEasyRec tzrec/metrics/recall_at_k.py): per row of a [B, N] similarity,
// the relevant items (labels [B, N], 0/1) among the row's top_k scores; value = their sum over
// all rows / all relevant items (NaN when none). Ties rank the lower column first and NaN
// scores above everything (torch's descending argsort). kSum. Not thread-safe.
#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "tzrec/metrics/metric_util.h"
#include "tzrec/protos/metric.pb.h"

namespace tzrec {
namespace {

class RecallAtK : public Metric {
 public:
  explicit RecallAtK(int top_k) : top_k_(top_k) {}

  void Update(const MetricInput& input) override {
    const int n = input.pred_width;
    metrics_internal::CheckInput(input, n, n, "recall_at_k");
    const size_t k = std::min<size_t>(static_cast<size_t>(top_k_), static_cast<size_t>(n));
    std::vector<int> order(n);
    for (int64_t r = 0; r < input.rows; ++r) {
      const float* score = input.preds + r * n;
      const float* relevant = input.labels + r * n;
      std::iota(order.begin(), order.end(), 0);
      // Higher score first; NaN counts as the highest.
      std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
        if (score[a] == score[b] || (std::isnan(score[a]) && std::isnan(score[b]))) {
          return a < b;
        }
        return metrics_internal::FloatLess(score[b], score[a]);
      });
      for (size_t i = 0; i < k; ++i) hits_ += relevant[order[i]];
      for (int c = 0; c < n; ++c) relevant_ += relevant[c];
    }
  }

  double Compute() const override { return relevant_ > 0.0 ? hits_ / relevant_ : std::nan(""); }
  void Reset() override { hits_ = relevant_ = 0.0; }
  MetricCombine combine() const override { return MetricCombine::kSum; }
  void AppendState(std::vector<double>* state) const override {
    state->push_back(hits_);
    state->push_back(relevant_);
  }
  void LoadState(const std::vector<double>& state, size_t* offset) override {
    hits_ = state.at((*offset)++);
    relevant_ = state.at((*offset)++);
  }

 private:
  int top_k_;
  double hits_ = 0.0;
  double relevant_ = 0.0;
};

MetricSpec MakeRecallAtK(const MetricContext& ctx) {
  const auto& config = metrics_internal::ConfigAs<protos::RecallAtK>(ctx);
  if (config.top_k() < 1 || config.top_k() > (1u << 30)) {
    Fail(metrics_internal::ConfigPath(ctx, "recall_at_k", "top_k"), ": must be >= 1 (got ",
         config.top_k(), ")");
  }
  MetricSpec spec;
  spec.prediction = "similarity";
  spec.label_width = 0;  // one relevance per similarity column
  spec.metric = std::make_unique<RecallAtK>(static_cast<int>(config.top_k()));
  return spec;
}

}  // namespace

TZREC_REGISTER(MetricRegistry(), "recall_at_k", MakeRecallAtK, "top_k");
TZREC_REGISTER(TrainMetricRegistry(), "recall_at_k", MakeRecallAtK, "top_k");

}  // namespace tzrec
