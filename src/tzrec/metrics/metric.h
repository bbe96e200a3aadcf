// Metric: an evaluation or training metric over plain arrays (no LibTorch), and the registries
// of TorchEasyRec's metrics by their config names.
//
// A task head (heads/) turns one batch's predictions, labels and grouping keys into a
// MetricInput and calls Update(); Compute() gives the value over everything since Reset().
// In a distributed job every rank accumulates its own rows, then CombineOverRanks() merges the
// states so that Compute() on every rank equals one process over all rows. Each metric declares
// how: kSum (fixed-length numbers that add up over ranks: confusion counts, sums) or kGather
// (the accumulated values themselves, concatenated over ranks: exact per-group AUCs, sampled
// pairs). Metrics whose value depends on an order (sampled pairs) sort their values canonically
// first, so the value does not depend on how rows were split over ranks or batches.
//
// Registries: MetricRegistry() holds MetricConfig's oneof members (auc, multiclass_auc,
// recall_at_k, mean_absolute_error, mean_squared_error, accuracy, grouped_auc, xauc,
// grouped_xauc, normalized_entropy), TrainMetricRegistry() TrainMetricConfig's (auc with a
// decaying confusion matrix, recall_at_k, mean_absolute_error, mean_squared_error, accuracy,
// xauc; see train_metric.h for the decay). Each factory checks its config against num_class
// and says which prediction it reads.
//
// Thread safety: a Metric is used by one thread at a time.
#pragma once

#include <google/protobuf/message.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tzrec/common/collectives.h"
#include "tzrec/common/registry.h"

namespace tzrec {

// One batch as a metric reads it; arrays are row-major and live for the Update() call.
struct MetricInput {
  int64_t rows = 0;
  const float* preds = nullptr;  // [rows, pred_width]
  int pred_width = 1;
  // [rows, label_width]: 0/1 for binary metrics, the class index for multi-class ones, the
  // target value for regression ones, 0/1 relevance per column for recall_at_k.
  const float* labels = nullptr;
  int label_width = 1;
  const int64_t* group_keys = nullptr;  // [rows], grouped metrics only
};

enum class MetricCombine { kSum, kGather };

class Metric {
 public:
  virtual ~Metric() = default;
  virtual void Update(const MetricInput& input) = 0;
  // NaN when undefined (e.g. no group with both classes). May fail (tzrec::Error) where
  // TorchEasyRec asserts on the accumulated data (xauc's max_pairs against the row count).
  virtual double Compute() const = 0;
  virtual void Reset() = 0;
  virtual MetricCombine combine() const = 0;

  // kSum: the state as numbers that add up over ranks (same length on every rank for one
  // config), and loading summed numbers back (reads from `*offset`, advancing it).
  virtual void AppendState(std::vector<double>* state) const {}
  virtual void LoadState(const std::vector<double>& state, size_t* offset) {}
  // kGather: the accumulated values as bytes, and replacing them by every rank's (rank order).
  virtual std::string SerializeValues() const { return {}; }
  virtual void LoadGathered(const std::vector<std::string>& per_rank) {}

  // Train metrics whose state decays itself (DecayAUC's confusion matrix) instead of their
  // value: Decay() folds what Update() gathered since the last call into the decayed state,
  // which AppendState/LoadState/Compute then read.
  virtual bool decays_state() const { return false; }
  virtual void Decay(double rate) {}
};

// Merges the states of `metrics` over all ranks (one AllReduceSum for all kSum metrics, one
// AllGatherBytes per kGather metric); afterwards each Compute() is the global value. Every rank
// must pass the same metrics in the same order. A null or one-rank `comm` does nothing.
void CombineOverRanks(const std::vector<Metric*>& metrics, Collectives* comm);

// Mean of values weighted by counts (the eval mean of a loss, weighted by batch size). kSum.
class MeanMetric : public Metric {
 public:
  void Add(double value, double weight) {
    sum_ += value * weight;
    weight_ += weight;
  }
  void Update(const MetricInput& input) override;  // preds are values, each of weight 1
  double Compute() const override;                 // 0 when nothing was added
  void Reset() override { sum_ = weight_ = 0.0; }
  MetricCombine combine() const override { return MetricCombine::kSum; }
  void AppendState(std::vector<double>* state) const override;
  void LoadState(const std::vector<double>& state, size_t* offset) override;

 private:
  double sum_ = 0.0;
  double weight_ = 0.0;
};

// What a metric config is built from.
struct MetricContext {
  const google::protobuf::Message* config = nullptr;  // the oneof member message, e.g. AUC
  int num_class = 1;
  // Path of the MetricConfig holding it, e.g. "model_config.mmoe.task_towers[0].metrics[1]";
  // errors append the member and field ("....metrics[1].xauc.sample_ratio: ...").
  std::string where;
};

// A configured metric and what it reads.
struct MetricSpec {
  std::unique_ptr<Metric> metric;
  // Prediction it reads, without the tower suffix: "probs" (binary, num_class 1), "probs1"
  // (num_class 2), "probs" ([B, num_class] for multi-class), "y" (regression), "similarity".
  std::string prediction;
  // Width of the labels it reads: 1, or 0 for "the prediction's width" (recall_at_k targets).
  int label_width = 1;
  // Sparse feature whose first id per row is the group (grouped metrics), else empty.
  std::string grouping_key;
};

using MetricFactory = std::function<MetricSpec(const MetricContext&)>;
// Slot tzrec.protos.MetricConfig / metric.
Registry<MetricFactory>& MetricRegistry();
// Slot tzrec.protos.TrainMetricConfig / metric.
Registry<MetricFactory>& TrainMetricRegistry();

// Builds the metric set in the oneof `metric` of `config` (a MetricConfig or TrainMetricConfig)
// from `registry`; `where` is the path of `config` itself ("model_config.metrics[0]"). Fails
// naming `where` when no member is set.
MetricSpec BuildMetric(const Registry<MetricFactory>& registry,
                       const google::protobuf::Message& config, int num_class,
                       const std::string& where);

}  // namespace tzrec
