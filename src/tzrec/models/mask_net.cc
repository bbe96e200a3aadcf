// MaskNet (model_config.mask_net, Wang et al. 2021), as TorchEasyRec builds it: the first
// feature group through the MaskNet module (modules/masknet.h: LayerNorm, MaskBlocks in
// parallel or in series, top MLP) and a Linear without bias. TorchEasyRec requires top_mlp
// (it sizes the Linear by its last layer); without one the Linear reads the blocks' output.
#include <torch/nn/modules/linear.h>

#include "tzrec/models/model.h"
#include "tzrec/modules/masknet.h"

namespace tzrec {
namespace {

class MaskNet : public Model {
 public:
  explicit MaskNet(const ModelContext& context) : Model(context) {
    AddRankHead();
    InitInput();
    group_ = embedding_group().group_names().front();
    mask_net_ = register_module("mask_net_layer",
                                MaskNetModule(InputDim(group_), context.config->mask_net().mask_net_module(),
                                              "model_config.mask_net.mask_net_module"));
    output_ = register_module(
        "output_linear",
        torch::nn::Linear(torch::nn::LinearOptions(mask_net_->output_dim(), heads()[0]->num_class()).bias(false)));
  }

  Predictions Predict(const Batch& batch) override {
    return HeadPredictions({output_->forward(mask_net_->forward(BuildInput(batch).at(group_)))});
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    const std::string hidden = mask_net_->Script(w, ScriptInput(w, tables).at(group_), "mask_net_layer");
    ScriptHeadPredictions(w, {ScriptLinear(w, *output_, hidden, "output_linear")});
  }

 private:
  std::string group_;
  MaskNetModule mask_net_{nullptr};
  torch::nn::Linear output_{nullptr};
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<MaskNet>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "mask_net", Make, "mask_net_module.*");

}  // namespace tzrec
