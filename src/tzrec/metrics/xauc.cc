// `xauc` (TorchEasyRec tzrec/metrics/xauc.py), on the regression output "y".
//
// Default: every row is kept (kGather of (pred, label)); Compute() draws max_pairs pairs, or
// int(n(n-1)/2 * sample_ratio) without it, over all n rows. The gathered rows are sorted
// canonically and the pairs drawn with a fixed seed, so the value is the same however rows
// were split over ranks and batches, and from run to run. in_batch: each batch's exact xauc
// over all its pairs, value = mean over batches (kSum of the batch values and their count);
// a batch with fewer than two rows has no pair and is skipped (TorchEasyRec would average its
// NaN in). Not thread-safe.
#include "tzrec/metrics/xauc.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>

#include "tzrec/metrics/metric_util.h"
#include "tzrec/protos/metric.pb.h"

namespace tzrec {

using metrics_internal::FloatLess;

double ExactXauc(const float* preds, const float* labels, size_t n) {
  if (n < 2) return std::nan("");
  // Rows with a NaN are never concordant; the rest are counted by label groups in ascending
  // order, each row meeting the earlier (strictly smaller label) rows with a smaller pred.
  std::vector<size_t> rows;
  rows.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (!std::isnan(preds[i]) && !std::isnan(labels[i])) rows.push_back(i);
  }
  std::vector<float> sorted_preds;
  sorted_preds.reserve(rows.size());
  for (size_t i : rows) sorted_preds.push_back(preds[i]);
  std::sort(sorted_preds.begin(), sorted_preds.end());
  sorted_preds.erase(std::unique(sorted_preds.begin(), sorted_preds.end()), sorted_preds.end());
  std::sort(rows.begin(), rows.end(), [&](size_t a, size_t b) { return labels[a] < labels[b]; });
  // Fenwick tree over pred ranks (1-based) of the rows inserted so far.
  std::vector<int64_t> tree(sorted_preds.size() + 1, 0);
  auto rank_of = [&](float p) {
    return static_cast<size_t>(std::lower_bound(sorted_preds.begin(), sorted_preds.end(), p) -
                               sorted_preds.begin());  // preds strictly smaller than p
  };
  double concordant = 0.0;
  for (size_t begin = 0; begin < rows.size();) {
    size_t end = begin;
    while (end < rows.size() && labels[rows[end]] == labels[rows[begin]]) ++end;
    for (size_t k = begin; k < end; ++k) {
      for (size_t r = rank_of(preds[rows[k]]); r > 0; r -= r & (~r + 1)) concordant += tree[r];
    }
    for (size_t k = begin; k < end; ++k) {
      for (size_t r = rank_of(preds[rows[k]]) + 1; r < tree.size(); r += r & (~r + 1)) ++tree[r];
    }
    begin = end;
  }
  return concordant / (static_cast<double>(n) * static_cast<double>(n - 1) / 2.0);
}

double SampledXauc(const float* preds, const float* labels, size_t n, uint64_t pairs,
                   uint64_t seed) {
  if (n < 2 || pairs == 0) return std::nan("");
  std::mt19937_64 rng(seed);
  uint64_t concordant = 0;
  for (uint64_t s = 0; s < pairs; ++s) {
    // Two distinct indices, uniform: every unordered pair equally likely.
    size_t i = static_cast<size_t>(metrics_internal::UniformBelow(&rng, n));
    size_t j = static_cast<size_t>(metrics_internal::UniformBelow(&rng, n - 1));
    if (j >= i) ++j;
    const bool up = labels[i] < labels[j] && preds[i] < preds[j];
    const bool down = labels[i] > labels[j] && preds[i] > preds[j];
    concordant += up || down;
  }
  return static_cast<double>(concordant) / static_cast<double>(pairs);
}

void SortXaucRows(std::vector<float>* preds, std::vector<float>* labels, size_t begin, size_t end) {
  std::vector<std::pair<float, float>> rows;
  rows.reserve(end - begin);
  for (size_t i = begin; i < end; ++i) rows.emplace_back((*preds)[i], (*labels)[i]);
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    if (FloatLess(a.first, b.first)) return true;
    if (FloatLess(b.first, a.first)) return false;
    return FloatLess(a.second, b.second);
  });
  for (size_t i = begin; i < end; ++i) {
    (*preds)[i] = rows[i - begin].first;
    (*labels)[i] = rows[i - begin].second;
  }
}

namespace {

constexpr uint64_t kXaucSeed = 0x7a72656378617563ULL;  // "zrecxauc"

class Xauc : public Metric {
 public:
  Xauc(double sample_ratio, uint64_t max_pairs, bool in_batch, std::string max_pairs_path)
      : sample_ratio_(sample_ratio),
        max_pairs_(max_pairs),
        in_batch_(in_batch),
        max_pairs_path_(std::move(max_pairs_path)) {}

  void Update(const MetricInput& input) override {
    metrics_internal::CheckInput(input, 1, 1, "xauc");
    if (in_batch_) {
      if (input.rows < 2) return;
      batch_sum_ += ExactXauc(input.preds, input.labels, static_cast<size_t>(input.rows));
      batches_ += 1.0;
      return;
    }
    preds_.insert(preds_.end(), input.preds, input.preds + input.rows);
    labels_.insert(labels_.end(), input.labels, input.labels + input.rows);
  }

  double Compute() const override {
    if (in_batch_) return batches_ > 0.0 ? batch_sum_ / batches_ : std::nan("");
    const uint64_t n = preds_.size();
    const uint64_t total_pairs = n < 2 ? 0 : n * (n - 1) / 2;
    uint64_t pairs;
    if (max_pairs_ > 0) {
      if (max_pairs_ >= total_pairs) {
        Fail(max_pairs_path_, ": ", max_pairs_, " must be less than the ", total_pairs,
             " pairs of the ", n, " evaluated rows");
      }
      pairs = max_pairs_;
    } else {
      pairs = static_cast<uint64_t>(static_cast<double>(total_pairs) * sample_ratio_);
    }
    std::vector<float> preds = preds_, labels = labels_;
    SortXaucRows(&preds, &labels, 0, preds.size());
    return SampledXauc(preds.data(), labels.data(), preds.size(), pairs, kXaucSeed);
  }

  void Reset() override {
    preds_.clear();
    labels_.clear();
    batch_sum_ = batches_ = 0.0;
  }
  MetricCombine combine() const override {
    return in_batch_ ? MetricCombine::kSum : MetricCombine::kGather;
  }
  void AppendState(std::vector<double>* state) const override {
    if (!in_batch_) return;
    state->push_back(batch_sum_);
    state->push_back(batches_);
  }
  void LoadState(const std::vector<double>& state, size_t* offset) override {
    if (!in_batch_) return;
    batch_sum_ = state.at((*offset)++);
    batches_ = state.at((*offset)++);
  }
  std::string SerializeValues() const override {
    std::string bytes;
    metrics_internal::AppendPod<uint64_t>(preds_.size(), &bytes);
    metrics_internal::AppendPods(preds_.data(), preds_.size(), &bytes);
    metrics_internal::AppendPods(labels_.data(), labels_.size(), &bytes);
    return bytes;
  }
  void LoadGathered(const std::vector<std::string>& per_rank) override {
    preds_.clear();
    labels_.clear();
    for (const std::string& bytes : per_rank) {
      size_t pos = 0;
      const uint64_t n = metrics_internal::ReadPod<uint64_t>(bytes, &pos);
      metrics_internal::ReadPods(bytes, &pos, n, &preds_);
      metrics_internal::ReadPods(bytes, &pos, n, &labels_);
      TZREC_CHECK(pos == bytes.size(), "xauc: trailing gathered bytes");
    }
  }

 private:
  double sample_ratio_;
  uint64_t max_pairs_;  // 0: unset
  bool in_batch_;
  std::string max_pairs_path_;
  std::vector<float> preds_;
  std::vector<float> labels_;
  double batch_sum_ = 0.0;
  double batches_ = 0.0;
};

MetricSpec MakeXauc(const MetricContext& ctx) {
  using metrics_internal::ConfigPath;
  const auto& config = metrics_internal::ConfigAs<protos::XAUC>(ctx);
  metrics_internal::RequireRegression(ctx, "xauc");
  // As Python reads the float field: the float32 value, widened.
  const double sample_ratio = static_cast<double>(config.sample_ratio());
  if (!(sample_ratio > 0.0 && sample_ratio <= 1.0)) {
    Fail(ConfigPath(ctx, "xauc", "sample_ratio"), ": must be in (0, 1] (got ", sample_ratio, ")");
  }
  MetricSpec spec;
  spec.prediction = "y";
  // TorchEasyRec treats max_pairs 0 as unset (`int(max_pairs) if max_pairs else None`).
  spec.metric = std::make_unique<Xauc>(sample_ratio, config.max_pairs(), config.in_batch(),
                                       ConfigPath(ctx, "xauc", "max_pairs"));
  return spec;
}

}  // namespace

TZREC_REGISTER(MetricRegistry(), "xauc", MakeXauc, "sample_ratio", "max_pairs", "in_batch");
TZREC_REGISTER(TrainMetricRegistry(), "xauc", MakeXauc, "sample_ratio", "max_pairs", "in_batch");

}  // namespace tzrec
