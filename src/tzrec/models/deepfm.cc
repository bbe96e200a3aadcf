// DeepFM (model_config.deepfm): wide + FM + deep, with an optional final MLP.
//
// y = sum(wide embeddings) + sum(FM vector) + Linear(deep MLP), or with `final`:
// Linear(final_mlp([y_wide, FM vector, deep MLP])). The FM runs on the `fm` group when the
// config has one, else on `deep`; its features must share one embedding dim.
#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sum.h>
#include <torch/nn/modules/linear.h>

#include <set>

#include "tzrec/common/error.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/fm.h"
#include "tzrec/modules/mlp.h"

namespace tzrec {
namespace {

class DeepFM : public Model {
 public:
  DeepFM(const ModelContext& context) : Model(context) {
    const protos::ModelConfig& config = *context.config;
    AddRankHead();
    const auto& deepfm = config.deepfm();
    InitInput(static_cast<int>(deepfm.wide_embedding_dim()));
    fm_group_ = embedding_group().HasGroup("fm") ? "fm" : "deep";
    fm_dims_ = embedding_group().GroupDims(fm_group_);
    if (std::set<int>(fm_dims_.begin(), fm_dims_.end()).size() != 1) {
      Fail("model_config.deepfm: embedding dimension of fm features (group '", fm_group_,
           "') must be the same for all features");
    }
    if (!embedding_group().HasGroup("wide")) Fail("model_config.deepfm needs a 'wide' group");
    deep_mlp_ = register_module(
        "deep_mlp", MLP(InputDim("deep"), deepfm.deep(),
                        "model_config.deepfm.deep"));
    int64_t final_dim = deep_mlp_->output_dim();
    has_final_ = deepfm.has_final();
    if (has_final_) {
      final_mlp_ = register_module(
          "final_mlp", MLP(1 + fm_dims_[0] + final_dim, deepfm.final(), "model_config.deepfm.final"));
      final_dim = final_mlp_->output_dim();
    }
    output_mlp_ = register_module("output_mlp", torch::nn::Linear(final_dim, static_cast<int64_t>(heads()[0]->num_class())));
  }

  Predictions Predict(const Batch& batch) override {
    auto grouped = BuildInput(batch);
    at::Tensor y_wide = at::sum(grouped.at("wide"), {1}, /*keepdim=*/true);
    const at::Tensor& deep = grouped.at("deep");
    at::Tensor y_deep = deep_mlp_->forward(deep);
    at::Tensor fm_input = grouped.at(fm_group_).reshape(
        {-1, static_cast<int64_t>(fm_dims_.size()), static_cast<int64_t>(fm_dims_[0])});
    at::Tensor y_fm = FactorizationMachine(fm_input);
    at::Tensor y;
    if (has_final_) {
      y = output_mlp_->forward(final_mlp_->forward(at::cat({y_wide, y_fm, y_deep}, 1)));
    } else {
      y = y_wide + at::sum(y_fm, {1}, /*keepdim=*/true) + output_mlp_->forward(y_deep);
    }
    return HeadPredictions({y});
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    auto grouped = ScriptInput(w, tables);
    const std::string y_wide = w.Let("y_wide", "torch.sum(" + grouped.at("wide") + ", 1, keepdim=True)");
    const std::string y_deep = deep_mlp_->Script(w, grouped.at("deep"), "deep_mlp");
    const std::string fm_input =
        w.Let("fm_input", grouped.at(fm_group_) + ".reshape(" +
                              ScriptIntList({-1, static_cast<int64_t>(fm_dims_.size()), fm_dims_[0]}) + ")");
    const std::string y_fm = ScriptFactorizationMachine(w, fm_input);
    std::string y;
    if (has_final_) {
      const std::string joined = w.Let("final_input", "torch.cat([" + y_wide + ", " + y_fm + ", " + y_deep + "], 1)");
      y = ScriptLinear(w, *output_mlp_, final_mlp_->Script(w, joined, "final_mlp"), "output_mlp");
    } else {
      y = w.Let("y", y_wide + " + torch.sum(" + y_fm + ", 1, keepdim=True) + " +
                         ScriptLinear(w, *output_mlp_, y_deep, "output_mlp"));
    }
    ScriptHeadPredictions(w, {y});
  }

 private:
  std::string fm_group_;
  std::vector<int> fm_dims_;
  bool has_final_ = false;
  MLP deep_mlp_{nullptr};
  MLP final_mlp_{nullptr};
  torch::nn::Linear output_mlp_{nullptr};
};

std::shared_ptr<Model> Make(const ModelContext& context) {
  return std::make_shared<DeepFM>(context);
}

}  // namespace

TZREC_REGISTER(ModelRegistry(), "deepfm", Make, "deep.*", "final.*", "wide_embedding_dim");

}  // namespace tzrec
