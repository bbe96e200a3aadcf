// Model interface and registry.
//
// A Model is an ordinary torch::nn::Module (its dense parameters are what the dense
// optimizer trains) that owns an EmbeddingGroup (tables trained by the sparse optimizer).
// Predict() maps a Batch to named predictions ("logits", "probs", ...); losses and metrics are
// named as in TorchEasyRec ("binary_cross_entropy", "auc"). Models register under their
// model_config oneof name. A model is used by one thread at a time.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tzrec/common/registry.h"
#include "tzrec/embedding/embedding_group.h"
#include "tzrec/features/feature.h"
#include "tzrec/protos/model.pb.h"
#include "tzrec/train/batch.h"

namespace tzrec {

using Predictions = std::map<std::string, at::Tensor>;

class Model : public torch::nn::Module {
 public:
  Model(const protos::ModelConfig& config, std::vector<const Feature*> features,
        std::vector<std::string> labels, std::vector<std::string> sample_weights);

  virtual Predictions Predict(const Batch& batch) = 0;
  // Named losses of this batch (each a scalar).
  virtual std::map<std::string, at::Tensor> ComputeLoss(const Predictions& predictions,
                                                        const Batch& batch) = 0;
  virtual void UpdateMetrics(const Predictions& predictions, const Batch& batch) = 0;
  virtual std::map<std::string, double> ComputeMetrics() = 0;
  virtual void ResetMetrics() = 0;
  // Evaluation state as numbers that add up over ranks (counts, sums), same length on every
  // rank for one config; SetMetricState loads summed values back.
  virtual std::vector<double> MetricState() const = 0;
  virtual void SetMetricState(const std::vector<double>& state) = 0;

  EmbeddingGroup& embedding_group() { return *embedding_group_; }

 protected:
  // Builds the embedding group from model_config.feature_groups.
  void InitInput(int wide_embedding_dim = 4);
  // {group_name: [B, dim]}; records sparse gradients when training.
  std::map<std::string, at::Tensor> BuildInput(const Batch& batch);

  protos::ModelConfig config_;
  std::vector<const Feature*> features_;
  std::vector<std::string> labels_;
  std::vector<std::string> sample_weights_;
  std::unique_ptr<EmbeddingGroup> embedding_group_;
};

using ModelFactory = std::function<std::shared_ptr<Model>(
    const protos::ModelConfig&, std::vector<const Feature*>, std::vector<std::string>,
    std::vector<std::string>)>;
Registry<ModelFactory>& ModelRegistry();

struct ModelRegistration {
  ModelRegistration(const std::string& oneof_name, ModelFactory factory) {
    ModelRegistry().Register(oneof_name, std::move(factory));
  }
};

// Builds the model named by model_config's `model` oneof.
std::shared_ptr<Model> CreateModel(const protos::ModelConfig& config,
                                   std::vector<const Feature*> features,
                                   std::vector<std::string> labels,
                                   std::vector<std::string> sample_weights);

}  // namespace tzrec
