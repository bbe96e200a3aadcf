// TaskHead: everything one task of a model needs besides its network — label, sample weight,
// task weight, losses, metrics, train metrics, prediction transform and name suffix. A
// single-task ranking model has one head (no suffix); a multi-task model one per task tower
// (suffix "_<tower_name>"), as TorchEasyRec's RankModel / MultiTaskRank.
//
// Loss weighting (TorchEasyRec): a single-task head with a sample weight field uses
// w / mean(w) per row. A tower that explicitly sets weight, sample_weight_name or
// task_space_indicator_label uses w = (sample weight or 1) x (in_task_space_weight where the
// indicator label > 0, else out_task_space_weight), w / mean(w) (0 where the mean is 0),
// x weight. The batch loss is then mean(loss_i * w_i); otherwise the plain mean.
//
// Names: losses "<loss type><suffix>", metrics "<metric type><suffix>", eval loss means under
// the loss names, predictions e.g. "probs<suffix>".
//
// Match heads (retrieval models, TorchEasyRec's MatchModel): the task output is the [B, C]
// user-item similarity, predicted as "similarity"; the one loss is softmax_cross_entropy
// against column 0 (sampled negatives: the positive item comes first) or the diagonal
// (in-batch negatives); the data label is not read. Metrics: recall_at_k on the same targets.
//
// Thread safety: one thread at a time (metric state).
#pragma once

#include <google/protobuf/repeated_field.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tzrec/batch/batch.h"
#include "tzrec/common/collectives.h"
#include "tzrec/loss/loss.h"
#include "tzrec/metrics/metric.h"
#include "tzrec/metrics/train_metric.h"
#include "tzrec/protos/loss.pb.h"
#include "tzrec/protos/metric.pb.h"

namespace tzrec {

using NamedLosses = std::vector<std::pair<std::string, at::Tensor>>;

struct TaskSpec {
  std::string where;       // config path of the task, e.g. "model_config.mmoe.task_towers[1]"
  std::string tower_name;  // empty for a single-task model (no suffix)
  std::string label_name;
  int num_class = 1;
  const google::protobuf::RepeatedPtrField<protos::LossConfig>* losses = nullptr;
  const google::protobuf::RepeatedPtrField<protos::MetricConfig>* metrics = nullptr;
  const google::protobuf::RepeatedPtrField<protos::TrainMetricConfig>* train_metrics = nullptr;
  // Which weighting applies (see above): none, the single-task sample weight, or the tower's.
  enum class Weighting { kNone, kSampleWeight, kTower };
  Weighting weighting = Weighting::kNone;
  std::string sample_weight_name;
  double weight = 1.0;
  std::string task_space_indicator_label;
  double in_task_space_weight = 1.0;
  double out_task_space_weight = 1.0;
  double pareto_min_loss_weight = 0.0;
  // Retrieval: where each row's positive column is (see above); kNone for ranking tasks.
  enum class Match { kNone, kFirstColumn, kDiagonal };
  Match match = Match::kNone;
};

// What heads are checked against.
struct HeadContext {
  std::set<std::string> sparse_features;  // non-sequence sparse features (grouping keys)
  std::vector<std::string> label_fields;
  std::vector<std::string> sample_weight_fields;
  bool needs_labels = true;  // false for inference: label names are not checked
};

// The spec of a TaskTower / BayesTaskTower message (`index`-th of the model's towers; a
// BayesTaskTower without label_name takes data_config.label_fields[index]).
TaskSpec TaskSpecFromTower(const google::protobuf::Message& tower, const std::string& where,
                           int index, const HeadContext& context);

class TaskHead {
 public:
  TaskHead(TaskSpec spec, const HeadContext& context);

  const TaskSpec& spec() const { return spec_; }
  const std::string& suffix() const { return suffix_; }
  int num_class() const { return spec_.num_class; }

  // The predictions of the task output [B, num_class], one set per configured loss type.
  void AddPredictions(const at::Tensor& output, Predictions* out) const;
  // The same as TorchScript outputs of local `output` (script/script_writer.h).
  void ScriptPredictions(ScriptWriter& w, const std::string& output) const;
  // Appends (name, scalar loss) for each configured loss, in config order.
  void ComputeLosses(const Predictions& predictions, const Batch& batch, NamedLosses* out) const;
  // (loss name, the label values it is defined for) for each configured loss.
  std::vector<std::pair<std::string, LabelDomain>> LabelDomains() const;
  // Each row's loss weight (see above; undefined: unweighted), for a model's own losses too.
  at::Tensor LossWeight(const Batch& batch) const;
  // Pareto lower bound of each loss of ComputeLosses.
  std::vector<double> ParetoMinWeights() const;

  // Evaluation: metrics and, from `losses` (as ComputeLosses named them), the loss means.
  void UpdateMetrics(const Predictions& predictions, const Batch& batch, const NamedLosses& losses);
  // Every metric object (for CombineOverRanks), in a fixed order.
  std::vector<Metric*> MetricObjects();
  void AddMetricValues(std::map<std::string, double>* out) const;
  void ResetMetrics();

  // Training metrics (decayed); collectives at decay steps on every rank alike.
  void UpdateTrainMetrics(const Predictions& predictions, const Batch& batch, Collectives* comm);
  void AddTrainMetricValues(std::map<std::string, double>* out) const;
  bool has_train_metrics() const { return !train_metrics_.empty(); }

 private:
  struct NamedMetric {
    std::string name;
    MetricSpec spec;
  };
  struct NamedTrainMetric {
    std::string name;
    std::unique_ptr<TrainMetric> metric;
  };
  // Holds the arrays a MetricInput points to.
  struct MetricArrays {
    at::Tensor preds, labels, keys;
  };
  MetricInput InputFor(const MetricSpec& spec, const Predictions& predictions, const Batch& batch,
                       MetricArrays* arrays) const;
  // Match heads: each row's positive column of similarity `pred` [B, C] (int64 [B]).
  at::Tensor MatchTargets(const at::Tensor& pred) const;

  TaskSpec spec_;
  std::string suffix_;
  std::vector<std::pair<std::string, std::unique_ptr<Loss>>> losses_;
  std::vector<NamedMetric> metrics_;
  std::vector<std::pair<std::string, std::unique_ptr<MeanMetric>>> loss_means_;
  std::vector<NamedTrainMetric> train_metrics_;
};

}  // namespace tzrec
