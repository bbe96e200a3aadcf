// Deep & Cross Network (model_config.dcn_v1, Wang et al. 2017), as TorchEasyRec builds it:
// the first feature group x feeds both a Cross network (modules/cross.h) and the `deep` MLP;
// their outputs, concatenated, go through the `final` MLP and a Linear without bias.
#include <ATen/ops/cat.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/models/model.h"
#include "tzrec/modules/cross.h"
#include "tzrec/modules/mlp.h"

namespace tzrec {
namespace {

class DCNV1 : public Model {
 public:
  explicit DCNV1(const ModelContext& context) : Model(context) {
    const auto& config = context.config->dcn_v1();
    AddRankHead();
    InitInput();
    group_ = embedding_group().group_names().front();
    const int64_t dim = InputDim(group_);
    cross_ = register_module("cross", Cross(dim, config.cross(), "model_config.dcn_v1.cross"));
    deep_ = register_module("deep", MLP(dim, config.deep(), "model_config.dcn_v1.deep"));
    final_ = register_module("final_dnn", MLP(cross_->output_dim() + deep_->output_dim(), config.final(),
                                              "model_config.dcn_v1.final"));
    output_ = register_module(
        "output_linear",
        torch::nn::Linear(torch::nn::LinearOptions(final_->output_dim(), heads()[0]->num_class()).bias(false)));
  }

  Predictions Predict(const Batch& batch) override {
    const at::Tensor x = BuildInput(batch).at(group_);
    return HeadPredictions({output_->forward(final_->forward(at::cat({cross_->forward(x), deep_->forward(x)}, 1)))});
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    const std::string x = ScriptInput(w, tables).at(group_);
    const std::string joined =
        w.Let("final_input", "torch.cat([" + cross_->Script(w, x, "cross") + ", " + deep_->Script(w, x, "deep") + "], 1)");
    ScriptHeadPredictions(w, {ScriptLinear(w, *output_, final_->Script(w, joined, "final_dnn"), "output_linear")});
  }

 private:
  std::string group_;
  Cross cross_{nullptr};
  MLP deep_{nullptr};
  MLP final_{nullptr};
  torch::nn::Linear output_{nullptr};
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<DCNV1>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "dcn_v1", Make, "cross.*", "deep.*", "final.*");

}  // namespace tzrec
