#include "tzrec/models/model.h"

#include "tzrec/common/error.h"

namespace tzrec {

Registry<ModelFactory>& ModelRegistry() {
  static Registry<ModelFactory> registry("model");
  return registry;
}

Model::Model(const protos::ModelConfig& config, std::vector<const Feature*> features,
             std::vector<std::string> labels, std::vector<std::string> sample_weights)
    : config_(config), features_(std::move(features)), labels_(std::move(labels)),
      sample_weights_(std::move(sample_weights)) {}

void Model::InitInput(int wide_embedding_dim) {
  embedding_group_ =
      std::make_unique<EmbeddingGroup>(features_, config_.feature_groups(), wide_embedding_dim);
}

std::map<std::string, at::Tensor> Model::BuildInput(const Batch& batch) {
  return embedding_group_->Forward(batch, is_training());
}

std::shared_ptr<Model> CreateModel(const protos::ModelConfig& config,
                                   std::vector<const Feature*> features,
                                   std::vector<std::string> labels,
                                   std::vector<std::string> sample_weights) {
  const auto* oneof = config.GetDescriptor()->FindOneofByName("model");
  const auto* which = config.GetReflection()->GetOneofFieldDescriptor(config, oneof);
  if (!which) Fail("model_config: no model set");
  if (!ModelRegistry().Has(which->name())) {
    Fail("model_config.", which->name(), ": not supported yet (supported: ",
         ModelRegistry().JoinNames(), ")");
  }
  return ModelRegistry().Get(which->name())(config, std::move(features), std::move(labels),
                                            std::move(sample_weights));
}

}  // namespace tzrec
