#include "tzrec/heads/task_head.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/nan_to_num.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include "tzrec/common/error.h"
#include "tzrec/config/oneof.h"
#include "tzrec/config/supported_fields.h"

namespace tzrec {
namespace {

// TorchEasyRec's metric names: the config member's name, except "recall@<top_k>".
std::string MetricName(const google::protobuf::Message& config, const google::protobuf::FieldDescriptor* which) {
  if (which->name() != "recall_at_k") return which->name();
  const auto& member = config.GetReflection()->GetMessage(config, which);
  const auto* top_k = member.GetDescriptor()->FindFieldByName("top_k");
  return StrCat("recall@", member.GetReflection()->GetUInt32(member, top_k));
}


using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// TrainMetricConfig's fields outside its `metric` oneof are read here.
const bool kTrainMetricFields = HonourMessageFields("tzrec.protos.TrainMetricConfig", {"decay_rate", "decay_step"});

const FieldDescriptor* FieldOf(const Message& msg, const char* name) {
  return msg.GetDescriptor()->FindFieldByName(name);
}

bool Has(const Message& msg, const char* name) {
  const FieldDescriptor* f = FieldOf(msg, name);
  return f && msg.GetReflection()->HasField(msg, f);
}

std::string String(const Message& msg, const char* name) {
  const FieldDescriptor* f = FieldOf(msg, name);
  return f ? msg.GetReflection()->GetString(msg, f) : std::string();
}

double Float(const Message& msg, const char* name, double fallback) {
  const FieldDescriptor* f = FieldOf(msg, name);
  return f ? msg.GetReflection()->GetFloat(msg, f) : fallback;
}

template <typename T>
const google::protobuf::RepeatedPtrField<T>* Repeated(const Message& msg, const char* name) {
  const FieldDescriptor* f = FieldOf(msg, name);
  TZREC_CHECK(f != nullptr, msg.GetDescriptor()->full_name(), " has no field ", name);
  return &msg.GetReflection()->GetRepeatedPtrField<T>(msg, f);
}

at::Tensor DivNoNan(const at::Tensor& a, const at::Tensor& b) {
  return at::nan_to_num(a / b, 0.0, 0.0, 0.0);
}

}  // namespace

TaskSpec TaskSpecFromTower(const Message& tower, const std::string& where, int index,
                           const HeadContext& context) {
  TaskSpec spec;
  spec.where = where;
  spec.tower_name = String(tower, "tower_name");
  if (spec.tower_name.empty()) Fail(where, ".tower_name is required");
  spec.label_name = String(tower, "label_name");
  if (!Has(tower, "label_name")) {
    // BayesTaskTower: "default is label_fields by order".
    if (index < static_cast<int>(context.label_fields.size())) {
      spec.label_name = context.label_fields[index];
    } else if (context.needs_labels) {
      Fail(where, ".label_name is not set and data_config.label_fields has no entry ", index);
    }
  }
  const FieldDescriptor* num_class = FieldOf(tower, "num_class");
  spec.num_class = static_cast<int>(tower.GetReflection()->GetUInt32(tower, num_class));
  spec.losses = Repeated<protos::LossConfig>(tower, "losses");
  spec.metrics = Repeated<protos::MetricConfig>(tower, "metrics");
  spec.train_metrics = Repeated<protos::TrainMetricConfig>(tower, "train_metrics");
  if (Has(tower, "weight") || Has(tower, "sample_weight_name") ||
      Has(tower, "task_space_indicator_label")) {
    spec.weighting = TaskSpec::Weighting::kTower;
  }
  spec.weight = Float(tower, "weight", 1.0);
  spec.sample_weight_name = String(tower, "sample_weight_name");
  spec.task_space_indicator_label = String(tower, "task_space_indicator_label");
  spec.in_task_space_weight = Float(tower, "in_task_space_weight", 1.0);
  spec.out_task_space_weight = Float(tower, "out_task_space_weight", 1.0);
  spec.pareto_min_loss_weight = Float(tower, "pareto_min_loss_weight", 0.0);
  return spec;
}

TaskHead::TaskHead(TaskSpec spec, const HeadContext& context) : spec_(std::move(spec)) {
  const std::string& where = spec_.where;
  suffix_ = spec_.tower_name.empty() ? "" : "_" + spec_.tower_name;
  if (spec_.num_class < 1) Fail(where, ".num_class must be >= 1");
  auto contains = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  if (context.needs_labels) {
    if (spec_.label_name.empty()) {
      Fail(where, ": the task needs a label (data_config.label_fields is empty)");
    }
    if (!contains(context.label_fields, spec_.label_name)) {
      Fail(where, ".label_name: '", spec_.label_name, "' is not one of data_config.label_fields");
    }
    if (!spec_.sample_weight_name.empty() &&
        !contains(context.sample_weight_fields, spec_.sample_weight_name)) {
      Fail(where, ".sample_weight_name: '", spec_.sample_weight_name,
           "' is not one of data_config.sample_weight_fields");
    }
    if (!spec_.task_space_indicator_label.empty() &&
        !contains(context.label_fields, spec_.task_space_indicator_label)) {
      Fail(where, ".task_space_indicator_label: '", spec_.task_space_indicator_label,
           "' is not one of data_config.label_fields");
    }
  }
  if (!spec_.losses || spec_.losses->empty()) Fail(where, ".losses: at least one loss is required");
  if (spec_.match != TaskSpec::Match::kNone) {
    if (spec_.losses->size() != 1 || SetOneofMember(spec_.losses->Get(0), "loss") == nullptr ||
        SetOneofMember(spec_.losses->Get(0), "loss")->name() != "softmax_cross_entropy") {
      Fail(where, ".losses: a match model takes exactly one loss, softmax_cross_entropy");
    }
  }
  std::set<std::string> names;
  for (int i = 0; i < spec_.losses->size(); ++i) {
    const protos::LossConfig& config = spec_.losses->Get(i);
    const std::string loss_where = StrCat(where, ".losses[", i, "]");
    const FieldDescriptor* which = SetOneofMember(config, "loss");
    if (!which) Fail(loss_where, ": no loss set");
    const std::string type = which->name();
    LossContext ctx{&config.GetReflection()->GetMessage(config, which), spec_.num_class,
                    loss_where + "." + type, context.sparse_features};
    const std::string name = type + suffix_;
    if (!names.insert(name).second) Fail(loss_where, ": loss '", name, "' is configured twice");
    // A match head computes its softmax cross entropy itself (its class count is the batch's
    // similarity width, not num_class).
    losses_.emplace_back(name, spec_.match != TaskSpec::Match::kNone ? nullptr : LossRegistry().Get(type)(ctx));
    loss_means_.emplace_back(name, std::make_unique<MeanMetric>());
  }
  // What this task predicts, to check every metric reads something it produces.
  Predictions probe;
  AddPredictions(at::zeros({2, spec_.num_class}), &probe);
  std::string produced;
  for (const auto& kv : probe) produced += (produced.empty() ? "" : ", ") + kv.first;
  auto check_reads = [&](const MetricSpec& metric, const std::string& metric_where) {
    if (!probe.count(metric.prediction + suffix_)) {
      Fail(metric_where, ": reads the prediction '", metric.prediction + suffix_,
           "', which this task does not produce (its losses give: ", produced, ")");
    }
    if ((metric.label_width != 1) != (spec_.match != TaskSpec::Match::kNone)) {
      Fail(metric_where, metric.label_width != 1
                             ? ": needs per-item relevance labels (a match model's), not supported here"
                             : ": a match model's only metric is recall_at_k");
    }
    if (!metric.grouping_key.empty() && !context.sparse_features.count(metric.grouping_key)) {
      Fail(metric_where, ".grouping_key: '", metric.grouping_key,
           "' is not a (non-sequence) sparse feature");
    }
  };
  if (spec_.metrics) {
    for (int i = 0; i < spec_.metrics->size(); ++i) {
      const protos::MetricConfig& config = spec_.metrics->Get(i);
      const std::string metric_where = StrCat(where, ".metrics[", i, "]");
      const FieldDescriptor* which = SetOneofMember(config, "metric");
      if (!which) Fail(metric_where, ": no metric set");
      MetricContext ctx{&config.GetReflection()->GetMessage(config, which), spec_.num_class, metric_where};
      MetricSpec metric = MetricRegistry().Get(which->name())(ctx);
      check_reads(metric, metric_where + "." + which->name());
      const std::string name = MetricName(config, which) + suffix_;
      if (!names.insert(name).second) Fail(metric_where, ": metric '", name, "' is configured twice");
      metrics_.push_back({name, std::move(metric)});
    }
  }
  if (spec_.train_metrics) {
    std::set<std::string> train_names;
    for (int i = 0; i < spec_.train_metrics->size(); ++i) {
      const protos::TrainMetricConfig& config = spec_.train_metrics->Get(i);
      const std::string metric_where = StrCat(where, ".train_metrics[", i, "]");
      const FieldDescriptor* which = SetOneofMember(config, "metric");
      if (!which) Fail(metric_where, ": no metric set");
      if (config.decay_step() == 0) Fail(metric_where, ".decay_step must be > 0");
      if (!(config.decay_rate() >= 0 && config.decay_rate() <= 1)) {
        Fail(metric_where, ".decay_rate must be in [0, 1], got ", config.decay_rate());
      }
      MetricContext ctx{&config.GetReflection()->GetMessage(config, which), spec_.num_class, metric_where};
      MetricSpec metric = TrainMetricRegistry().Get(which->name())(ctx);
      check_reads(metric, metric_where + "." + which->name());
      const std::string name = MetricName(config, which) + suffix_;
      if (!train_names.insert(name).second) {
        Fail(metric_where, ": train metric '", name, "' is configured twice");
      }
      train_metrics_.push_back(
          {name, std::make_unique<TrainMetric>(std::move(metric), config.decay_rate(), config.decay_step(),
                                        metric_where)});
    }
  }
}

void TaskHead::AddPredictions(const at::Tensor& output, Predictions* out) const {
  if (spec_.match != TaskSpec::Match::kNone) {
    (*out)["similarity" + suffix_] = output;
    return;
  }
  for (const auto& loss : losses_) loss.second->AddPredictions(output, suffix_, out);
}

void TaskHead::ScriptPredictions(ScriptWriter& w, const std::string& output) const {
  if (spec_.match != TaskSpec::Match::kNone) ScriptWriter::Unsupported("match model predictions");
  for (const auto& loss : losses_) loss.second->ScriptPredictions(w, output, spec_.num_class, suffix_);
}

at::Tensor TaskHead::LossWeight(const Batch& batch) const {
  switch (spec_.weighting) {
    case TaskSpec::Weighting::kNone:
      return at::Tensor();
    case TaskSpec::Weighting::kSampleWeight: {
      const at::Tensor& w = batch.SampleWeight(spec_.sample_weight_name);
      return DivNoNan(w, at::mean(w));
    }
    case TaskSpec::Weighting::kTower: {
      at::Tensor w = spec_.sample_weight_name.empty() ? at::ones({1})
                                                       : batch.SampleWeight(spec_.sample_weight_name);
      if (!spec_.task_space_indicator_label.empty()) {
        at::Tensor in_space = (batch.Label(spec_.task_space_indicator_label) > 0).to(at::kFloat);
        w = w * (spec_.in_task_space_weight * in_space + spec_.out_task_space_weight * (1 - in_space));
      }
      return DivNoNan(w, at::mean(w)) * spec_.weight;
    }
  }
  return at::Tensor();
}

at::Tensor TaskHead::MatchTargets(const at::Tensor& pred) const {
  const auto options = at::TensorOptions().dtype(at::kLong);
  return spec_.match == TaskSpec::Match::kDiagonal ? at::arange(pred.size(0), options)
                                                   : at::zeros({pred.size(0)}, options);
}

void TaskHead::ComputeLosses(const Predictions& predictions, const Batch& batch, NamedLosses* out) const {
  if (spec_.match != TaskSpec::Match::kNone) {
    const at::Tensor& pred = PredictionOf(predictions, "similarity", suffix_);
    at::Tensor per_row = at::cross_entropy_loss(pred, MatchTargets(pred), {}, at::Reduction::None);
    out->emplace_back(losses_.front().first, ReduceLoss(per_row, LossWeight(batch)));
    return;
  }
  const at::Tensor& label = batch.Label(spec_.label_name);
  const at::Tensor weight = LossWeight(batch);
  for (const auto& [name, loss] : losses_) {
    out->emplace_back(name, loss->Compute(predictions, suffix_, label, weight, batch));
  }
}

std::vector<std::pair<std::string, LabelDomain>> TaskHead::LabelDomains() const {
  std::vector<std::pair<std::string, LabelDomain>> out;
  if (spec_.match != TaskSpec::Match::kNone) return out;  // the data label is not read
  for (const auto& [name, loss] : losses_) out.emplace_back(name, loss->label_domain());
  return out;
}

std::vector<double> TaskHead::ParetoMinWeights() const {
  return std::vector<double>(losses_.size(), spec_.pareto_min_loss_weight);
}

MetricInput TaskHead::InputFor(const MetricSpec& spec, const Predictions& predictions,
                               const Batch& batch, MetricArrays* arrays) const {
  arrays->preds = PredictionOf(predictions, spec.prediction, suffix_).detach().to(at::kFloat).contiguous();
  if (spec.label_width == 0) {
    // recall_at_k: one relevance per similarity column, the row's positive one.
    at::Tensor targets = MatchTargets(arrays->preds);
    arrays->labels = at::zeros_like(arrays->preds);
    arrays->labels.scatter_(1, targets.unsqueeze(1), 1.0);
  } else {
    arrays->labels = batch.Label(spec_.label_name).to(at::kFloat).contiguous();
  }
  MetricInput input;
  input.rows = arrays->preds.size(0);
  input.preds = arrays->preds.data_ptr<float>();
  input.pred_width = arrays->preds.dim() > 1 ? static_cast<int>(arrays->preds.size(1)) : 1;
  input.labels = arrays->labels.data_ptr<float>();
  input.label_width = spec.label_width == 0 ? input.pred_width : 1;
  if (!spec.grouping_key.empty()) {
    arrays->keys = FirstIdPerRow(batch.Sparse(spec.grouping_key));
    input.group_keys = arrays->keys.data_ptr<int64_t>();
  }
  return input;
}

void TaskHead::UpdateMetrics(const Predictions& predictions, const Batch& batch,
                             const NamedLosses& losses) {
  for (auto& named : metrics_) {
    MetricArrays arrays;
    named.spec.metric->Update(InputFor(named.spec, predictions, batch, &arrays));
  }
  const double rows = static_cast<double>(batch.Label(spec_.label_name).numel());
  for (auto& [name, mean] : loss_means_) {
    for (const auto& loss : losses) {
      if (loss.first == name) mean->Add(loss.second.item<double>(), rows);
    }
  }
}

std::vector<Metric*> TaskHead::MetricObjects() {
  std::vector<Metric*> out;
  for (auto& named : metrics_) out.push_back(named.spec.metric.get());
  for (auto& kv : loss_means_) out.push_back(kv.second.get());
  return out;
}

void TaskHead::AddMetricValues(std::map<std::string, double>* out) const {
  for (const auto& named : metrics_) (*out)[named.name] = named.spec.metric->Compute();
  for (const auto& kv : loss_means_) (*out)[kv.first] = kv.second->Compute();
}

void TaskHead::ResetMetrics() {
  for (auto& named : metrics_) named.spec.metric->Reset();
  for (auto& kv : loss_means_) kv.second->Reset();
}

void TaskHead::UpdateTrainMetrics(const Predictions& predictions, const Batch& batch,
                                  Collectives* comm) {
  for (auto& named : train_metrics_) {
    MetricArrays arrays;
    named.metric->Update(InputFor(named.metric->spec(), predictions, batch, &arrays), comm);
  }
}

void TaskHead::AddTrainMetricValues(std::map<std::string, double>* out) const {
  for (const auto& named : train_metrics_) (*out)[named.name] = named.metric->value();
}

}  // namespace tzrec
