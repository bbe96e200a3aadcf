// DCN-V2 (model_config.dcn_v2, Wang et al. 2020), as TorchEasyRec builds it: the first
// feature group, through the optional `backbone` MLP, into low-rank cross layers
// (modules/cross.h CrossV2); the optional `deep` MLP reads the raw group (not the backbone's
// output); [cross, deep] through the `final` MLP and a Linear without bias.
#include <ATen/ops/cat.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/models/model.h"
#include "tzrec/modules/cross.h"
#include "tzrec/modules/mlp.h"

namespace tzrec {
namespace {

class DCNV2 : public Model {
 public:
  explicit DCNV2(const ModelContext& context) : Model(context) {
    const auto& config = context.config->dcn_v2();
    AddRankHead();
    InitInput();
    group_ = embedding_group().group_names().front();
    const int64_t dim = InputDim(group_);
    int64_t cross_in = dim;
    if (config.has_backbone()) {
      backbone_ = register_module("backbone", MLP(dim, config.backbone(), "model_config.dcn_v2.backbone"));
      cross_in = backbone_->output_dim();
    }
    cross_ = register_module("cross", CrossV2(cross_in, config.cross(), "model_config.dcn_v2.cross"));
    int64_t final_in = cross_->output_dim();
    if (config.has_deep()) {
      deep_ = register_module("deep", MLP(dim, config.deep(), "model_config.dcn_v2.deep"));
      final_in += deep_->output_dim();
    }
    final_ = register_module("final", MLP(final_in, config.final(), "model_config.dcn_v2.final"));
    output_ = register_module(
        "output_mlp",
        torch::nn::Linear(torch::nn::LinearOptions(final_->output_dim(), heads()[0]->num_class()).bias(false)));
  }

  Predictions Predict(const Batch& batch) override {
    const at::Tensor x = BuildInput(batch).at(group_);
    at::Tensor net = cross_->forward(backbone_ ? backbone_->forward(x) : x);
    if (deep_) net = at::cat({net, deep_->forward(x)}, 1);
    return HeadPredictions({output_->forward(final_->forward(net))});
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    const std::string x = ScriptInput(w, tables).at(group_);
    std::string net = cross_->Script(w, backbone_ ? backbone_->Script(w, x, "backbone") : x, "cross");
    if (deep_) net = w.Let("final_input", "torch.cat([" + net + ", " + deep_->Script(w, x, "deep") + "], 1)");
    ScriptHeadPredictions(w, {ScriptLinear(w, *output_, final_->Script(w, net, "final"), "output_mlp")});
  }

 private:
  std::string group_;
  MLP backbone_{nullptr};
  CrossV2 cross_{nullptr};
  MLP deep_{nullptr};
  MLP final_{nullptr};
  torch::nn::Linear output_{nullptr};
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<DCNV2>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "dcn_v2", Make, "backbone.*", "cross.*", "deep.*", "final.*");

}  // namespace tzrec
