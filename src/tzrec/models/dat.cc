// DAT (model_config.dat), TorchEasyRec's Dual Augmented Two-Tower model (Yu et al. 2021): a
// two-tower model (models/two_tower.h) whose towers read their `input` group concatenated with
// an `augment_input` group (the augmented vector, typically the id embedding), and whose
// training adds the Adaptive-Mimic Mechanism losses, pulling each tower's augmented vector
// towards the other tower's (detached) output for the batch's positive pairs:
//   amm_loss_u = amm_u_weight * Σ_rows,dims (normalize(user_augment) - item_emb)^2
//   amm_loss_i = amm_i_weight * Σ_rows,dims (normalize(item_augment[:B]) - user_emb)^2
// summed over the batch as TorchEasyRec does; with a sample weight, per row and then
// mean(loss * w) / mean(w). The augmented vectors are as wide as the towers' outputs.
#include <ATen/ATen.h>
#include <torch/nn/functional/normalization.h>

#include "tzrec/common/error.h"
#include "tzrec/models/two_tower.h"
#include "tzrec/protos/models/match_model.pb.h"

namespace tzrec {
namespace {

TwoTowerSpec DatSpec(const protos::DAT& config) {
  TwoTowerSpec spec;
  spec.where = "model_config.dat";
  spec.in_batch_negative = config.in_batch_negative();
  spec.temperature = config.temperature();
  spec.similarity = config.similarity();
  spec.output_dim = config.output_dim();
  spec.user.groups = {config.user_tower().input(), config.user_tower().augment_input()};
  spec.item.groups = {config.item_tower().input(), config.item_tower().augment_input()};
  spec.user.mlp = &config.user_tower().mlp();
  spec.item.mlp = &config.item_tower().mlp();
  return spec;
}

class DAT : public TwoTowerModel {
 public:
  explicit DAT(const ModelContext& context)
      : TwoTowerModel(context, DatSpec(context.config->dat())),
        user_weight_(context.config->dat().amm_u_weight()),
        item_weight_(context.config->dat().amm_i_weight()) {
    if (!context.config->dat().user_tower().has_mlp() || !context.config->dat().item_tower().has_mlp()) {
      Fail("model_config.dat: user_tower.mlp and item_tower.mlp are required");
    }
    if (!tower().empty()) return;  // one tower alone: no losses
    const int64_t user_augment = InputDim(spec().user.groups[1]);
    const int64_t item_augment = InputDim(spec().item.groups[1]);
    if (user_augment != TowerOutputShape("item")[0] || item_augment != TowerOutputShape("user")[0]) {
      Fail("model_config.dat: the augmented vectors mimic the other tower's output, so the groups '",
           spec().user.groups[1], "' (", user_augment, " wide) and '", spec().item.groups[1], "' (", item_augment,
           " wide) must be as wide as the towers' outputs (", TowerOutputShape("item")[0], ", ", TowerOutputShape("user")[0],
           "; output_dim)");
    }
  }

 protected:
  void AddTrainingPredictions(const std::map<std::string, at::Tensor>& inputs, const at::Tensor& user,
                              const at::Tensor& item, int64_t batch_size, Predictions* out) override {
    (*out)["user_augment"] = inputs.at(spec().user.groups[1]);
    (*out)["item_augment"] = inputs.at(spec().item.groups[1]).slice(0, 0, batch_size);
    (*out)["user_tower_emb"] = user.detach();
    (*out)["item_tower_emb"] = item.slice(0, 0, batch_size).detach();
  }

  void AddModelLosses(const Predictions& predictions, const Batch& batch, NamedLosses* losses) const override {
    // Training outputs only: evaluation has no AMM losses (as in TorchEasyRec).
    if (!predictions.count("user_augment")) return;
    const std::string& weight_name = heads().front()->spec().sample_weight_name;
    auto amm = [&](const at::Tensor& augment, const at::Tensor& target, double weight) {
      namespace F = torch::nn::functional;
      const at::Tensor diff = F::normalize(augment, F::NormalizeFuncOptions().p(2.0).dim(1)) - target;
      if (weight_name.empty()) return weight * at::sum(diff * diff);
      const at::Tensor per_row = weight * at::sum(diff * diff, {1});
      const at::Tensor w = batch.SampleWeight(weight_name);
      const at::Tensor mean_w = at::mean(w);
      return at::where(mean_w == 0, at::zeros_like(mean_w), at::mean(per_row * w) / mean_w);
    };
    losses->emplace_back("amm_loss_u", amm(predictions.at("user_augment"), predictions.at("item_tower_emb"), user_weight_));
    losses->emplace_back("amm_loss_i", amm(predictions.at("item_augment"), predictions.at("user_tower_emb"), item_weight_));
  }

 private:
  double user_weight_;
  double item_weight_;
};

std::shared_ptr<Model> MakeDAT(const ModelContext& context) { return std::make_shared<DAT>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "dat", MakeDAT, "user_tower.input", "user_tower.augment_input", "user_tower.mlp.*",
               "item_tower.input", "item_tower.augment_input", "item_tower.mlp.*", "output_dim", "similarity",
               "temperature", "in_batch_negative", "amm_i_weight", "amm_u_weight");

}  // namespace tzrec
