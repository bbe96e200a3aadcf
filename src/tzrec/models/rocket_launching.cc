// Rocket Launching (model_config.rocket_launching, Zhou et al. 2018), as TorchEasyRec builds it:
// the first feature group (through the optional share_mlp) feeds a large booster MLP and a
// small light MLP, each with a Linear to the classes. Both learn the task (outputs, losses and
// metrics suffixed "_booster" / "_light"); the light net reads the shared input detached and
// also learns from the booster: `hint_l2_loss` (MSE of the light logits to the detached
// booster logits) and, with feature_based_distillation, `similarity_<i>_<j>` between light
// layer i and the first booster layer j of the same width (COSINE: -0.1 * mean of the rows'
// cosine; otherwise the Euclidean norm of the difference over the batch). The booster runs in
// training only: evaluation, predict, export and serving compute the light net alone.
// l2_regularization is in the config message but TorchEasyRec's model reads no such field
// either, so it changes nothing there or here.
#include <ATen/ops/mse_loss.h>
#include <torch/nn/functional/normalization.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/models/model.h"
#include "tzrec/modules/mlp.h"

namespace tzrec {
namespace {

constexpr size_t kBoosterHead = 0;
constexpr size_t kLightHead = 1;

class RocketLaunching : public Model {
 public:
  explicit RocketLaunching(const ModelContext& context) : Model(context) {
    const auto& config = context.config->rocket_launching();
    const std::string where = "model_config.rocket_launching";
    AddRankHead("booster");
    AddRankHead("light");
    InitInput();
    group_ = embedding_group().group_names().front();
    int64_t dim = InputDim(group_);
    if (config.has_share_mlp()) {
      share_ = register_module("share_mlp", MLP(dim, config.share_mlp(), where + ".share_mlp"));
      dim = share_->output_dim();
    }
    booster_ = register_module("booster_mlp", MLP(dim, config.booster_mlp(), where + ".booster_mlp"));
    booster_linear_ = register_module(
        "booster_linear", torch::nn::Linear(booster_->output_dim(), heads()[kBoosterHead]->num_class()));
    light_ = register_module("light_mlp", MLP(dim, config.light_mlp(), where + ".light_mlp"));
    light_linear_ = register_module(
        "light_linear", torch::nn::Linear(light_->output_dim(), heads()[kLightHead]->num_class()));
    feature_distillation_ = config.feature_based_distillation();
    cosine_ = config.feature_distillation_function() == protos::COSINE;
    const std::vector<int64_t> booster_dims = booster_->layer_dims(), light_dims = light_->layer_dims();
    for (size_t i = 0; i < light_dims.size(); ++i) {
      for (size_t j = 0; j < booster_dims.size(); ++j) {
        if (light_dims[i] == booster_dims[j]) {
          distilled_layers_.emplace_back(i, j);
          break;
        }
      }
    }
  }

  bool HeadPredictsIn(size_t head, bool training) const override { return training || head == kLightHead; }

  Predictions Predict(const Batch& batch) override {
    const at::Tensor x = BuildInput(batch).at(group_);
    const at::Tensor shared = share_ ? share_->forward(x) : x;
    const std::vector<at::Tensor> light_layers = light_->ForwardLayers(shared.detach());
    Predictions predictions;
    heads()[kLightHead]->AddPredictions(light_linear_->forward(light_layers.back()), &predictions);
    if (!is_training()) return predictions;
    const std::vector<at::Tensor> booster_layers = booster_->ForwardLayers(shared);
    heads()[kBoosterHead]->AddPredictions(booster_linear_->forward(booster_layers.back()), &predictions);
    if (feature_distillation_) {
      for (const auto& [i, j] : distilled_layers_) {
        predictions["light_" + std::to_string(i)] = light_layers[i];
        predictions["booster_" + std::to_string(j)] = booster_layers[j];
      }
    }
    return predictions;
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    std::string x = ScriptInput(w, tables).at(group_);
    if (share_) x = share_->Script(w, x, "share_mlp");
    const std::string light = ScriptLinear(w, *light_linear_, light_->Script(w, x, "light_mlp"), "light_linear");
    heads()[kLightHead]->ScriptPredictions(w, light);
  }

 protected:
  void AddModelLosses(const Predictions& predictions, const Batch& batch, NamedLosses* losses) const override {
    if (!is_training()) return;
    const at::Tensor weight = heads()[kLightHead]->LossWeight(batch);
    if (feature_distillation_) {
      for (const auto& [i, j] : distilled_layers_) {
        const at::Tensor light = predictions.at("light_" + std::to_string(i));
        const at::Tensor booster = predictions.at("booster_" + std::to_string(j)).detach();
        losses->emplace_back("similarity_" + std::to_string(i) + "_" + std::to_string(j),
                             Similarity(light, booster, weight));
      }
    }
    const at::Tensor light = predictions.at("logits_light");
    const at::Tensor booster = predictions.at("logits_booster").detach();
    at::Tensor hint;
    if (weight.defined()) {
      at::Tensor per_element = at::mse_loss(light, booster, at::Reduction::None);
      // Per row: a [B, C] loss takes its row's weight in every column.
      hint = at::mean(per_element * (per_element.dim() == 2 ? weight.unsqueeze(1) : weight));
    } else {
      hint = at::mse_loss(light, booster);
    }
    losses->emplace_back("hint_l2_loss", hint);
  }

 private:
  at::Tensor Similarity(const at::Tensor& light, const at::Tensor& booster, const at::Tensor& weight) const {
    namespace F = torch::nn::functional;
    if (cosine_) {
      const auto unit = F::NormalizeFuncOptions().p(2).dim(1);
      at::Tensor cosine = (F::normalize(booster, unit) * F::normalize(light, unit)).sum(1);
      if (weight.defined()) cosine = cosine * weight;
      return -0.1 * cosine.mean();
    }
    at::Tensor square = (booster - light).square();
    if (weight.defined()) square = square.sum(1) * weight;
    return square.sum().sqrt();
  }

  std::string group_;
  MLP share_{nullptr};
  MLP booster_{nullptr};
  torch::nn::Linear booster_linear_{nullptr};
  MLP light_{nullptr};
  torch::nn::Linear light_linear_{nullptr};
  bool feature_distillation_ = false;
  bool cosine_ = true;
  std::vector<std::pair<size_t, size_t>> distilled_layers_;  // (light layer, booster layer)
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<RocketLaunching>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "rocket_launching", Make, "share_mlp.*", "booster_mlp.*", "light_mlp.*",
               "l2_regularization", "feature_based_distillation", "feature_distillation_function");

}  // namespace tzrec
