// Model interface and registry.
//
// A Model is an ordinary torch::nn::Module (its dense parameters are what the dense optimizer
// trains) that owns an EmbeddingCollection (tables trained by the sparse optimizer, or without
// optimizer state for inference) and one TaskHead per task. Predict() maps a Batch to named
// predictions ("logits", "probs", "probs_ctr", "y", ...); the heads turn predictions into losses
// (named as in TorchEasyRec: "binary_cross_entropy", "binary_cross_entropy_ctr"), metrics and
// train metrics. A model does not know how it is run: the same object serves training,
// evaluation, predict and serving. Models register under their model_config oneof name
// with the fields of their config message they honour (TZREC_REGISTER(ModelRegistry(), ...)).
// A model is used by one thread at a time.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tzrec/batch/batch.h"
#include "tzrec/common/registry.h"
#include "tzrec/embedding/embedding_collection.h"
#include "tzrec/embedding/embedding_group.h"
#include "tzrec/features/feature.h"
#include "tzrec/heads/task_head.h"
#include "tzrec/modules/fast_linear.h"
#include "tzrec/modules/sequence_encoder.h"
#include "tzrec/modules/variational_dropout.h"
#include "tzrec/protos/model.pb.h"

namespace tzrec {

// What a model is built from.
struct ModelContext {
  const protos::ModelConfig* config = nullptr;
  std::vector<const Feature*> features;
  HeadContext heads;  // labels, sample weights, sparse features; needs_labels false for inference
  // A retrieval model's tower built alone (an exported user/ or item/ directory): only that
  // tower's groups, tables and modules exist, `features` may hold only its features, and
  // Predict returns "<tower>_tower_emb". Empty: the whole model.
  std::string tower;
};

class Model : public torch::nn::Module {
 public:
  explicit Model(const ModelContext& context);

  virtual Predictions Predict(const Batch& batch) = 0;

  // Writes Predict's inference form as TorchScript over the generated features
  // (script/script_writer.h; serving writes it as scripted_model.pt), with the tables in their
  // stored form `tables`. Throws ScriptUnsupported for models (or parts) without one.
  virtual void WriteScript(ScriptWriter& w, const StoredTables& tables) const;

  // Every task's losses in task order, named as TorchEasyRec logs them, then the model's own
  // (AddModelLosses).
  NamedLosses ComputeLosses(const Predictions& predictions, const Batch& batch) const;
  // What backward runs on: the sum of the losses, or in training with use_pareto_loss_weight
  // their Pareto-efficient weighting (weights from the losses' dense gradients, Lin et al.
  // 2019, lower bounds pareto_min_loss_weight).
  at::Tensor TotalLoss(const NamedLosses& losses);

  // Evaluation metrics (with the loss means from `losses`).
  void UpdateMetrics(const Predictions& predictions, const Batch& batch, const NamedLosses& losses);
  // Combines every metric over ranks (collective; null comm: one process) and computes them.
  std::map<std::string, double> ComputeMetrics(Collectives* comm);
  void ResetMetrics();
  // Train metrics (collectives at their decay steps, on every rank alike).
  void UpdateTrainMetrics(const Predictions& predictions, const Batch& batch, Collectives* comm);
  std::map<std::string, double> TrainMetricValues() const;
  bool has_train_metrics() const;

  EmbeddingCollection& embedding_collection() { return collection_; }
  // A retrieval model (its head is a match head): scored by its towers, not as a whole.
  bool is_match_model() const;
  // A retrieval model's towers ("user", "item"), each scorable alone; empty for other models.
  virtual std::vector<std::string> TowerNames() const { return {}; }
  // The features tower `tower` reads.
  virtual std::vector<const Feature*> TowerFeatures(const std::string& tower) const;
  // From now on Predict computes only `tower`'s embedding, "<tower>_tower_emb" [B, D], from a
  // batch that needs only that tower's features (other features read as empty); "" restores
  // the whole model. Fails naming the towers when `tower` is not one.
  // A model built as one tower (ModelContext::tower) cannot change tower.
  void SetTower(const std::string& tower);
  const std::string& tower() const { return tower_; }
  // Built as one tower alone (ModelContext::tower).
  bool tower_only() const { return !built_tower_.empty(); }
  // Name of tower `tower`'s output: "<tower>_tower_emb" (TDM's embedding tower: "item_emb").
  virtual std::string TowerOutputName(const std::string& tower) const { return tower + "_tower_emb"; }
  // The directories export writes: the whole model in the export directory itself, or a
  // retrieval model's towers in user/ and item/, or TDM's embedding/ (its item embedding
  // tower) and model/ (the whole model). --asset_files go where `assets` is set.
  struct ExportPart {
    std::string dir;    // "" = the export directory itself
    std::string tower;  // "" = the whole model
    bool assets = true;
  };
  virtual std::vector<ExportPart> ExportParts() const;
  // What Predict returns in inference, before any data is seen: name -> the output's dims after
  // the batch dimension ({} for [B], {D} for [B, D], {K, D} for MIND's interests), by name.
  virtual std::map<std::string, std::vector<int64_t>> OutputShapes() const;
  const std::vector<std::unique_ptr<TaskHead>>& heads() const { return heads_; }
  // model_config.variational_dropout is applied (InitInput built one per DEEP / WIDE group of
  // several features; BuildInput applies them and ComputeLosses adds "<group>_feature_p_loss").
  bool applies_variational_dropout() const { return !variational_dropouts_.empty() || variational_dropout_checked_; }
  // Precision of the dense GEMMs (train_config.mixed_precision; an export's own): whoever
  // calls Predict holds a ScopedGemmPrecision(gemm_precision()) around it and the backward.
  GemmPrecision gemm_precision() const { return gemm_precision_; }
  void set_gemm_precision(GemmPrecision precision) { gemm_precision_ = precision; }

 protected:
  // Losses of the model itself beyond its tasks' (DAT's amm_loss_u / amm_loss_i), from
  // predictions it made (e.g. training-only outputs); they join the total loss.
  virtual void AddModelLosses(const Predictions& predictions, const Batch& batch, NamedLosses* losses) const {}

  // The view of model_config.feature_groups (the common case: one view, shared tables);
  // `only_groups` (not empty) restricts it to those groups, e.g. the groups of the one tower a
  // tower-only model builds.
  EmbeddingGroup& InitInput(int wide_embedding_dim = 4, const std::vector<std::string>& only_groups = {});
  // Dims after the batch of tower `tower`'s embedding ("<tower>_tower_emb"): {D}, or {K, D} for
  // a user tower with K interests; retrieval models override it.
  virtual std::vector<int64_t> TowerOutputShape(const std::string& tower) const;
  EmbeddingGroup& embedding_group() { return *groups_.front(); }
  // A further view with its own options (e.g. per-tower tables).
  EmbeddingGroup& AddEmbeddingGroup(
      const google::protobuf::RepeatedPtrField<protos::FeatureGroupConfig>& groups,
      EmbeddingGroup::Options options);
  // One lookup of every table, then the first view's inputs: {group_name: [B, dim]} for DEEP
  // and WIDE groups (a DEEP group with sequence_groups: its pooled features, then each of its
  // sequence_encoders' outputs in order), and "<g>.query" / "<g>.sequence" /
  // "<g>.sequence_length" for SEQUENCE groups (embedding/embedding_group.h).
  std::map<std::string, at::Tensor> BuildInput(const Batch& batch);
  // Width of DEEP group `group` in BuildInput (pooled features and sequence encoders).
  int64_t InputDim(const std::string& group) const;
  LookupOutputs Lookup(const Batch& batch);

  // BuildInput as TorchScript: {group: local} (views with sequence encoders: ScriptUnsupported).
  std::map<std::string, std::string> ScriptInput(ScriptWriter& w, const StoredTables& tables) const;
  // HeadPredictions as TorchScript outputs of the task output locals.
  void ScriptHeadPredictions(ScriptWriter& w, const std::vector<std::string>& outputs) const;

  // A single-task ranking model's head: model_config's losses, metrics, train_metrics and
  // num_class, the first label field and the first sample weight field. `suffix_name` (e.g.
  // "light") names its outputs, losses and metrics "<name>_light" for a model that scores the
  // one task with several networks.
  TaskHead& AddRankHead(const std::string& suffix_name = "");
  // Whether head `head` predicts in training (`training`) or in evaluation and inference; a
  // head that does not gets no losses there, and no eval metrics (or train metrics) when it
  // does not predict in inference (or training). RocketLaunching's booster trains only.
  virtual bool HeadPredictsIn(size_t head, bool training) const { return true; }
  // The predictions the heads' losses and metrics read, made from Predict's (PEPNet picks each
  // row's domain tower here); Predict's own by default.
  virtual Predictions HeadInputs(const Predictions& predictions, const Batch& batch) const { return predictions; }
  // A retrieval model's head (heads/task_head.h: match heads): model_config's losses and
  // metrics; positives in column 0 of the similarity, or on its diagonal with in-batch negatives.
  TaskHead& AddMatchHead(bool in_batch_negative);
  // One head per task tower (`towers` are TaskTower or BayesTaskTower messages at `where`);
  // model-level losses / metrics / num_class, which multi-task models do not read, are errors.
  void AddTowerHeads(const std::vector<const google::protobuf::Message*>& towers, const std::string& where);
  // Predictions of every head from its task output ([B, num_class] each, in head order).
  Predictions HeadPredictions(const std::vector<at::Tensor>& outputs) const;

  const protos::ModelConfig& config() const { return config_; }
  const std::vector<const Feature*>& features() const { return features_; }

 private:
  // The one head of a single-task model from model_config's losses and metrics.
  TaskHead& AddModelHead(TaskSpec::Match match, const std::string& suffix_name = "");
  protos::ModelConfig config_;
  std::vector<const Feature*> features_;
  HeadContext head_context_;
  EmbeddingCollection collection_;
  std::vector<std::unique_ptr<EmbeddingGroup>> groups_;
  // Sequence encoders of the first view's DEEP groups, by group, in config order.
  std::map<std::string, std::vector<std::shared_ptr<SequenceEncoder>>> group_encoders_;
  std::vector<std::unique_ptr<TaskHead>> heads_;
  std::string tower_;
  std::string built_tower_;  // ModelContext::tower
  GemmPrecision gemm_precision_ = GemmPrecision::kFloat32;
  // model_config.variational_dropout: one per DEEP / WIDE group of the first view with more than
  // one feature (registered under "group_variational_dropouts.<group>"), and the losses of the
  // last BuildInput.
  std::map<std::string, VariationalDropout> variational_dropouts_;
  bool variational_dropout_checked_ = false;
  std::vector<std::pair<std::string, at::Tensor>> input_losses_;
  DenseEmbeddings dense_embeddings_{nullptr};
};

// The TaskTower fields a multi-task model's registration honours (read by its task heads), as
// arguments of TZREC_REGISTER (BayesTaskTower adds relation_tower_names / relation_mlp).
#define TZREC_TASK_TOWER_FIELDS                                                              \
  "task_towers.tower_name", "task_towers.label_name", "task_towers.metrics",                 \
      "task_towers.train_metrics", "task_towers.losses", "task_towers.num_class",            \
      "task_towers.mlp.*", "task_towers.weight", "task_towers.sample_weight_name",           \
      "task_towers.task_space_indicator_label", "task_towers.in_task_space_weight",          \
      "task_towers.out_task_space_weight", "task_towers.pareto_min_loss_weight"

using ModelFactory = std::function<std::shared_ptr<Model>(const ModelContext&)>;
// Slot tzrec.protos.ModelConfig / model.
Registry<ModelFactory>& ModelRegistry();

// Builds the model named by model_config's `model` oneof.
std::shared_ptr<Model> CreateModel(const ModelContext& context);

// The task towers of a multi-task model config message (its repeated `task_towers`).
std::vector<const google::protobuf::Message*> TaskTowers(const google::protobuf::Message& model);

}  // namespace tzrec
