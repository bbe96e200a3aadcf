#include "tzrec/models/model.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/dot.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/modules/container/moduledict.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/oneof.h"
#include "tzrec/config/supported_fields.h"
#include "tzrec/heads/pareto.h"

namespace tzrec {
namespace {

// ModelConfig's fields outside the `model` oneof that the model layer reads.
const bool kModelConfigFields = HonourMessageFields(
    "tzrec.protos.ModelConfig",
    {"feature_groups.group_name", "feature_groups.feature_names", "feature_groups.group_type",
     "feature_groups.embedding_name_suffix", "feature_groups.sequence_groups.group_name",
     "feature_groups.sequence_groups.feature_names",
     "feature_groups.sequence_groups.embedding_name_suffix", "feature_groups.sequence_encoders",
     "num_class", "losses", "metrics", "train_metrics", "use_pareto_loss_weight",
     "variational_dropout.regularization_lambda", "variational_dropout.embedding_wise_variational_dropout"});

}  // namespace

Registry<ModelFactory>& ModelRegistry() {
  static Registry<ModelFactory> registry("model", {ConfigSlot{"tzrec.protos.ModelConfig", "model"}});
  return registry;
}

Model::Model(const ModelContext& context)
    : config_(*context.config),
      features_(context.features),
      head_context_(context.heads),
      tower_(context.tower),
      built_tower_(context.tower) {}

EmbeddingGroup& Model::InitInput(int wide_embedding_dim, const std::vector<std::string>& only_groups) {
  EmbeddingGroup::Options options;
  options.wide_embedding_dim = wide_embedding_dim;
  auto wanted = [&](const protos::FeatureGroupConfig& group) {
    return only_groups.empty() ||
           std::find(only_groups.begin(), only_groups.end(), group.group_name()) != only_groups.end();
  };
  google::protobuf::RepeatedPtrField<protos::FeatureGroupConfig> groups;
  for (const auto& group : config_.feature_groups()) {
    if (wanted(group)) *groups.Add() = group;
  }
  EmbeddingGroup& view = AddEmbeddingGroup(groups, options);
  for (int g = 0; g < config_.feature_groups_size(); ++g) {
    const auto& group = config_.feature_groups(g);
    if (!wanted(group)) continue;
    const std::string where = StrCat("model_config.feature_groups[", g, "]");
    const std::vector<std::string>& nested = view.NestedSequenceGroups(group.group_name());
    if (group.sequence_encoders_size() > 0 && nested.empty()) {
      Fail(where, ".sequence_encoders: the group has no sequence_groups to encode");
    }
    std::set<std::string> encoded;
    auto& encoders = group_encoders_[group.group_name()];
    for (int e = 0; e < group.sequence_encoders_size(); ++e) {
      const std::string encoder_where = StrCat(where, ".sequence_encoders[", e, "]");
      // A copy: encoders read their config only while they are built.
      protos::SeqEncoderConfig config = group.sequence_encoders(e);
      std::string input = SequenceEncoderInput(config, encoder_where);
      if (input.empty() && nested.size() == 1) {
        // An encoder without input binds to the group's only sequence group (TorchEasyRec).
        input = nested.front();
        SetSequenceEncoderInput(&config, input);
      }
      if (std::find(nested.begin(), nested.end(), input) == nested.end()) {
        Fail(encoder_where, ".input: '", input, "' is not one of the group's sequence_groups (",
             Join(nested, ", "), ")");
      }
      SequenceEncoderContext context;
      context.config = &config;
      context.query_dim = view.QueryDim(input);
      context.sequence_dim = view.SequenceDim(input);
      context.where = encoder_where;
      encoders.push_back(register_module(StrCat(group.group_name(), "_seq_encoder_", e),
                                         CreateSequenceEncoder(context)));
      encoded.insert(input);
    }
    for (const std::string& name : nested) {
      if (!encoded.count(name)) {
        Fail(where, ".sequence_groups: sequence group '", name, "' has no sequence_encoders entry");
      }
    }
  }
  if (config_.has_variational_dropout()) {
    const auto& vd = config_.variational_dropout();
    if (vd.embedding_wise_variational_dropout()) {
      Fail("model_config.variational_dropout.embedding_wise_variational_dropout: not supported (TorchEasyRec's ",
           "VariationalDropout does not read it either)");
    }
    torch::nn::ModuleDict modules;
    for (const auto& group : config_.feature_groups()) {
      if (!wanted(group) || !view.HasGroup(group.group_name())) continue;
      // The slices of the group's vector: its features, then its sequence encoders.
      const std::vector<int> dims = view.GroupDims(group.group_name());
      TZREC_CHECK(static_cast<int>(dims.size()) == group.feature_names_size(), "group ", group.group_name());
      std::vector<std::pair<std::string, int>> slices;
      for (int f = 0; f < group.feature_names_size(); ++f) slices.emplace_back(group.feature_names(f), dims[f]);
      const auto& encoders = group_encoders_[group.group_name()];
      for (size_t e = 0; e < encoders.size(); ++e) {
        slices.emplace_back(StrCat(group.group_name(), "_seq_encoder_", e), static_cast<int>(encoders[e]->output_dim()));
      }
      if (slices.size() < 2) continue;
      VariationalDropout module(std::move(slices), vd.regularization_lambda());
      modules->update(std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>{{group.group_name(), module.ptr()}});
      variational_dropouts_.emplace(group.group_name(), module);
    }
    if (!variational_dropouts_.empty()) register_module("group_variational_dropouts", modules);
    variational_dropout_checked_ = true;
  }
  return view;
}

int64_t Model::InputDim(const std::string& group) const {
  TZREC_CHECK(!groups_.empty(), "model has no embedding group (InitInput was not called)");
  int64_t dim = groups_.front()->GroupTotalDim(group);
  auto it = group_encoders_.find(group);
  if (it != group_encoders_.end()) {
    for (const auto& encoder : it->second) dim += encoder->output_dim();
  }
  return dim;
}

EmbeddingGroup& Model::AddEmbeddingGroup(
    const google::protobuf::RepeatedPtrField<protos::FeatureGroupConfig>& groups,
    EmbeddingGroup::Options options) {
  // Dense features with autodis / mlp embeddings get their parameters in one submodule
  // ("dense_embedding.<prefix><feature>_<name>"), registered only when a feature has one.
  if (!options.dense_embeddings) {
    for (const Feature* feature : features_) {
      if (feature->dense_embedding().kind == DenseEmbeddingSpec::Kind::kNone) continue;
      if (!dense_embeddings_) dense_embeddings_ = register_module("dense_embedding", DenseEmbeddings());
      options.dense_embeddings = dense_embeddings_.get();
      break;
    }
  }
  groups_.push_back(std::make_unique<EmbeddingGroup>(&collection_, features_, groups, std::move(options)));
  return *groups_.back();
}

void Model::WriteScript(ScriptWriter&, const StoredTables&) const {
  const auto* member = config_.GetReflection()->GetOneofFieldDescriptor(
      config_, config_.GetDescriptor()->FindOneofByName("model"));
  ScriptWriter::Unsupported(StrCat("model_config.", member ? member->name() : "?",
                                   " has no TorchScript form yet"));
}

std::map<std::string, std::string> Model::ScriptInput(ScriptWriter& w, const StoredTables& tables) const {
  TZREC_CHECK(!groups_.empty(), "model has no embedding group (InitInput was not called)");
  std::map<std::string, std::string> inputs = groups_.front()->Script(w, tables);
  // As BuildInput: a DEEP group's pooled features, then each of its encoders' outputs.
  for (const auto& [group, encoders] : group_encoders_) {
    if (encoders.empty()) continue;
    std::vector<std::string> parts;
    auto pooled = inputs.find(group);
    if (pooled != inputs.end()) parts.push_back(pooled->second);
    for (size_t e = 0; e < encoders.size(); ++e) {
      const std::string& in = encoders[e]->input();
      parts.push_back(encoders[e]->Script(w, inputs.at(in + ".query"), inputs.at(in + ".sequence"),
                                          inputs.at(in + ".sequence_length"), StrCat(group, "_seq_encoder_", e)));
    }
    inputs[group] = parts.size() == 1 ? parts[0] : w.Let(group + "_input", "torch.cat([" + Join(parts, ", ") + "], 1)");
  }
  for (const auto& [group, dropout] : variational_dropouts_) {
    inputs[group] = dropout->Script(w, inputs.at(group), group + "_variational_dropout");
  }
  return inputs;
}

void Model::ScriptHeadPredictions(ScriptWriter& w, const std::vector<std::string>& outputs) const {
  TZREC_CHECK(outputs.size() == heads_.size(), "one output per task head");
  for (size_t i = 0; i < heads_.size(); ++i) heads_[i]->ScriptPredictions(w, outputs[i]);
}

LookupOutputs Model::Lookup(const Batch& batch) { return collection_.Lookup(batch, is_training()); }

std::map<std::string, at::Tensor> Model::BuildInput(const Batch& batch) {
  TZREC_CHECK(!groups_.empty(), "model has no embedding group (InitInput was not called)");
  std::map<std::string, at::Tensor> inputs = groups_.front()->Forward(Lookup(batch), batch);
  for (const auto& [group, encoders] : group_encoders_) {
    if (encoders.empty()) continue;
    std::vector<at::Tensor> parts;
    auto pooled = inputs.find(group);
    if (pooled != inputs.end()) parts.push_back(pooled->second);
    for (const auto& encoder : encoders) {
      const std::string& in = encoder->input();
      parts.push_back(encoder->Encode(
          {inputs.at(in + ".query"), inputs.at(in + ".sequence"), inputs.at(in + ".sequence_length")}));
    }
    inputs[group] = parts.size() == 1 ? parts[0] : at::cat(parts, 1);
  }
  input_losses_.clear();
  for (auto& [group, dropout] : variational_dropouts_) {
    auto [noisy, loss] = dropout->forward(inputs.at(group));
    inputs[group] = noisy;
    input_losses_.emplace_back(group + "_feature_p_loss", loss);
  }
  return inputs;
}

bool Model::is_match_model() const {
  for (const auto& head : heads_) {
    if (head->spec().match != TaskSpec::Match::kNone) return true;
  }
  return false;
}

std::vector<const Feature*> Model::TowerFeatures(const std::string& tower) const {
  Fail("model has no tower '", tower, "'");
}

void Model::SetTower(const std::string& tower) {
  if (tower_only() && tower != built_tower_) {
    Fail("the model was built as its '", built_tower_, "' tower alone; it cannot compute ",
         tower.empty() ? std::string("the whole model") : "tower '" + tower + "'");
  }
  const std::vector<std::string> towers = TowerNames();
  if (!tower.empty() && std::find(towers.begin(), towers.end(), tower) == towers.end()) {
    Fail("model has no tower '", tower, "'", towers.empty() ? std::string(" (it is not a retrieval model)")
                                                             : " (towers: " + Join(towers, ", ") + ")");
  }
  tower_ = tower;
}

std::vector<Model::ExportPart> Model::ExportParts() const {
  if (!is_match_model()) return {ExportPart{}};
  std::vector<ExportPart> parts;
  for (const std::string& tower : TowerNames()) parts.push_back(ExportPart{tower, tower, true});
  return parts;
}

std::vector<int64_t> Model::TowerOutputShape(const std::string& tower) const {
  Fail("model has no tower '", tower, "'");
}

std::map<std::string, std::vector<int64_t>> Model::OutputShapes() const {
  if (!tower_.empty()) return {{TowerOutputName(tower_), TowerOutputShape(tower_)}};
  Predictions probe;
  for (size_t i = 0; i < heads_.size(); ++i) {
    if (HeadPredictsIn(i, false)) heads_[i]->AddPredictions(at::zeros({1, heads_[i]->num_class()}), &probe);
  }
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, tensor] : probe) shapes[name] = tensor.sizes().slice(1).vec();
  return shapes;
}

TaskHead& Model::AddRankHead(const std::string& suffix_name) {
  return AddModelHead(TaskSpec::Match::kNone, suffix_name);
}

TaskHead& Model::AddMatchHead(bool in_batch_negative) {
  return AddModelHead(in_batch_negative ? TaskSpec::Match::kDiagonal : TaskSpec::Match::kFirstColumn);
}

TaskHead& Model::AddModelHead(TaskSpec::Match match, const std::string& suffix_name) {
  TaskSpec spec;
  spec.where = "model_config";
  spec.tower_name = suffix_name;
  if (!head_context_.label_fields.empty()) spec.label_name = head_context_.label_fields[0];
  spec.num_class = static_cast<int>(config_.num_class());
  spec.losses = &config_.losses();
  spec.metrics = &config_.metrics();
  spec.train_metrics = &config_.train_metrics();
  spec.match = match;
  if (!head_context_.sample_weight_fields.empty()) {
    spec.weighting = TaskSpec::Weighting::kSampleWeight;
    spec.sample_weight_name = head_context_.sample_weight_fields[0];
  }
  if (config_.use_pareto_loss_weight()) {
    Fail("model_config.use_pareto_loss_weight: only multi-task models weight several tasks");
  }
  heads_.push_back(std::make_unique<TaskHead>(std::move(spec), head_context_));
  return *heads_.back();
}

void Model::AddTowerHeads(const std::vector<const google::protobuf::Message*>& towers,
                          const std::string& where) {
  if (config_.losses_size() > 0) Fail("model_config.losses: set losses in ", where, "[].losses");
  if (config_.metrics_size() > 0) Fail("model_config.metrics: set metrics in ", where, "[].metrics");
  if (config_.train_metrics_size() > 0) {
    Fail("model_config.train_metrics: set train metrics in ", where, "[].train_metrics");
  }
  if (config_.has_num_class()) Fail("model_config.num_class: set num_class in ", where, "[].num_class");
  if (towers.empty()) Fail(where, ": at least one task tower is required");
  std::set<std::string> names;
  for (size_t i = 0; i < towers.size(); ++i) {
    const std::string tower_where = StrCat(where, "[", i, "]");
    TaskSpec spec = TaskSpecFromTower(*towers[i], tower_where, static_cast<int>(i), head_context_);
    if (!names.insert(spec.tower_name).second) {
      Fail(tower_where, ".tower_name: duplicate tower '", spec.tower_name, "'");
    }
    heads_.push_back(std::make_unique<TaskHead>(std::move(spec), head_context_));
  }
  if (config_.use_pareto_loss_weight()) {
    double sum = 0.0;
    for (const auto& head : heads_) {
      for (double c : head->ParetoMinWeights()) sum += c;
    }
    if (!(sum >= 0 && sum < 1)) {
      Fail(where, "[].pareto_min_loss_weight: the bounds of all losses must sum to [0, 1), got ", sum);
    }
  }
}

Predictions Model::HeadPredictions(const std::vector<at::Tensor>& outputs) const {
  TZREC_CHECK(outputs.size() == heads_.size());
  Predictions predictions;
  for (size_t i = 0; i < heads_.size(); ++i) heads_[i]->AddPredictions(outputs[i], &predictions);
  return predictions;
}

NamedLosses Model::ComputeLosses(const Predictions& predictions, const Batch& batch) const {
  NamedLosses losses;
  const Predictions inputs = HeadInputs(predictions, batch);
  for (size_t i = 0; i < heads_.size(); ++i) {
    if (HeadPredictsIn(i, is_training())) heads_[i]->ComputeLosses(inputs, batch, &losses);
  }
  // TorchEasyRec adds the inputs' losses (variational dropout) after the tasks'.
  for (const auto& loss : input_losses_) losses.push_back(loss);
  AddModelLosses(predictions, batch, &losses);
  return losses;
}

at::Tensor Model::TotalLoss(const NamedLosses& losses) {
  TZREC_CHECK(!losses.empty());
  if (!(is_training() && config_.use_pareto_loss_weight() && losses.size() > 1)) {
    at::Tensor total = losses[0].second;
    for (size_t i = 1; i < losses.size(); ++i) total = total + losses[i].second;
    return total;
  }
  std::vector<at::Tensor> params;
  for (const auto& p : parameters()) {
    if (p.requires_grad()) params.push_back(p);
  }
  std::vector<at::Tensor> rows;
  for (const auto& [name, loss] : losses) {
    // Dense gradients only: the embedding lookup's backward (which updates the tables) is not
    // on the path to the dense parameters and does not run here.
    auto grads = torch::autograd::grad({loss}, params, {}, /*retain_graph=*/true,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    std::vector<at::Tensor> flat;
    for (size_t i = 0; i < params.size(); ++i) {
      flat.push_back(grads[i].defined() ? grads[i].reshape({-1}) : at::zeros({params[i].numel()}));
    }
    rows.push_back(at::cat(flat).to(at::kDouble));
  }
  const int64_t k = static_cast<int64_t>(rows.size());
  at::Tensor ggt = at::zeros({k, k}, at::kDouble);
  for (int64_t i = 0; i < k; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      const double v = at::dot(rows[i], rows[j]).item<double>();
      ggt[i][j] = v;
      ggt[j][i] = v;
    }
  }
  std::vector<double> min_weights;
  for (const auto& head : heads_) {
    for (double c : head->ParetoMinWeights()) min_weights.push_back(c);
  }
  TZREC_CHECK(static_cast<int64_t>(min_weights.size()) == k);
  const std::vector<double> w = ParetoLossWeights(ggt, min_weights);
  at::Tensor total = losses[0].second * w[0];
  for (int64_t i = 1; i < k; ++i) total = total + losses[i].second * w[i];
  return total;
}

void Model::UpdateMetrics(const Predictions& predictions, const Batch& batch, const NamedLosses& losses) {
  const Predictions inputs = HeadInputs(predictions, batch);
  for (size_t i = 0; i < heads_.size(); ++i) {
    if (HeadPredictsIn(i, false)) heads_[i]->UpdateMetrics(inputs, batch, losses);
  }
}

std::map<std::string, double> Model::ComputeMetrics(Collectives* comm) {
  std::vector<Metric*> metrics;
  for (size_t i = 0; i < heads_.size(); ++i) {
    if (!HeadPredictsIn(i, false)) continue;
    for (Metric* m : heads_[i]->MetricObjects()) metrics.push_back(m);
  }
  CombineOverRanks(metrics, comm);
  std::map<std::string, double> values;
  for (size_t i = 0; i < heads_.size(); ++i) {
    if (HeadPredictsIn(i, false)) heads_[i]->AddMetricValues(&values);
  }
  return values;
}

void Model::ResetMetrics() {
  for (auto& head : heads_) head->ResetMetrics();
}

void Model::UpdateTrainMetrics(const Predictions& predictions, const Batch& batch, Collectives* comm) {
  const Predictions inputs = HeadInputs(predictions, batch);
  for (size_t i = 0; i < heads_.size(); ++i) {
    if (HeadPredictsIn(i, true)) heads_[i]->UpdateTrainMetrics(inputs, batch, comm);
  }
}

std::map<std::string, double> Model::TrainMetricValues() const {
  std::map<std::string, double> values;
  for (size_t i = 0; i < heads_.size(); ++i) {
    if (HeadPredictsIn(i, true)) heads_[i]->AddTrainMetricValues(&values);
  }
  return values;
}

bool Model::has_train_metrics() const {
  for (const auto& head : heads_) {
    if (head->has_train_metrics()) return true;
  }
  return false;
}

std::shared_ptr<Model> CreateModel(const ModelContext& context) {
  const protos::ModelConfig& config = *context.config;
  const auto* which = RegisteredOneofMember(config, "model", ModelRegistry(), "model_config");
  std::shared_ptr<Model> model = ModelRegistry().Get(which->name())(context);
  if (config.has_variational_dropout() && !model->applies_variational_dropout()) {
    Fail("model_config.variational_dropout: not supported for ", which->name(), " yet");
  }
  return model;
}

std::vector<const google::protobuf::Message*> TaskTowers(const google::protobuf::Message& model) {
  std::vector<const google::protobuf::Message*> towers;
  const auto* field = model.GetDescriptor()->FindFieldByName("task_towers");
  if (!field) return towers;
  const auto* reflection = model.GetReflection();
  for (int i = 0; i < reflection->FieldSize(model, field); ++i) {
    towers.push_back(&reflection->GetRepeatedMessage(model, field, i));
  }
  return towers;
}

}  // namespace tzrec
