// Wide & Deep (model_config.wide_and_deep, Cheng et al. 2016): y = sum(wide embeddings) +
// Linear(deep MLP), or with `final`: Linear(final_mlp([y_wide, deep MLP])). The groups are
// named "wide" (WIDE, wide_embedding_dim columns per feature) and "deep", as in TorchEasyRec.
#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sum.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/mlp.h"

namespace tzrec {
namespace {

class WideAndDeep : public Model {
 public:
  explicit WideAndDeep(const ModelContext& context) : Model(context) {
    const auto& config = context.config->wide_and_deep();
    AddRankHead();
    InitInput(static_cast<int>(config.wide_embedding_dim()));
    for (const char* group : {"wide", "deep"}) {
      if (!embedding_group().HasGroup(group)) Fail("model_config.wide_and_deep needs a '", group, "' group");
    }
    deep_mlp_ = register_module("deep_mlp", MLP(InputDim("deep"), config.deep(), "model_config.wide_and_deep.deep"));
    int64_t final_dim = deep_mlp_->output_dim();
    if (config.has_final()) {
      final_mlp_ = register_module("final_mlp", MLP(1 + final_dim, config.final(), "model_config.wide_and_deep.final"));
      final_dim = final_mlp_->output_dim();
    }
    output_mlp_ = register_module(
        "output_mlp", torch::nn::Linear(final_dim, static_cast<int64_t>(heads()[0]->num_class())));
  }

  Predictions Predict(const Batch& batch) override {
    auto grouped = BuildInput(batch);
    const at::Tensor y_wide = at::sum(grouped.at("wide"), {1}, /*keepdim=*/true);
    const at::Tensor y_deep = deep_mlp_->forward(grouped.at("deep"));
    if (final_mlp_) return HeadPredictions({output_mlp_->forward(final_mlp_->forward(at::cat({y_wide, y_deep}, 1)))});
    return HeadPredictions({y_wide + output_mlp_->forward(y_deep)});
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    auto grouped = ScriptInput(w, tables);
    const std::string y_wide = w.Let("y_wide", "torch.sum(" + grouped.at("wide") + ", 1, keepdim=True)");
    const std::string y_deep = deep_mlp_->Script(w, grouped.at("deep"), "deep_mlp");
    std::string y;
    if (final_mlp_) {
      const std::string joined = w.Let("final_input", "torch.cat([" + y_wide + ", " + y_deep + "], 1)");
      y = ScriptLinear(w, *output_mlp_, final_mlp_->Script(w, joined, "final_mlp"), "output_mlp");
    } else {
      y = w.Let("y", y_wide + " + " + ScriptLinear(w, *output_mlp_, y_deep, "output_mlp"));
    }
    ScriptHeadPredictions(w, {y});
  }

 private:
  MLP deep_mlp_{nullptr};
  MLP final_mlp_{nullptr};
  torch::nn::Linear output_mlp_{nullptr};
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<WideAndDeep>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "wide_and_deep", Make, "deep.*", "final.*", "wide_embedding_dim");

}  // namespace tzrec
