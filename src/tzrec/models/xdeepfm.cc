// xDeepFM (model_config.xdeepfm, Lian et al. 2018), as TorchEasyRec builds it: the "wide"
// group's features ([B, F, wide_embedding_dim], 16 by default) through a CIN (modules/cin.h),
// the "deep" group through the `deep` MLP, both concatenated into the `final` MLP and a
// Linear. There is no first-order term.
#include <ATen/ops/cat.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/cin.h"
#include "tzrec/modules/mlp.h"

namespace tzrec {
namespace {

class XDeepFM : public Model {
 public:
  explicit XDeepFM(const ModelContext& context) : Model(context) {
    const auto& config = context.config->xdeepfm();
    AddRankHead();
    wide_dim_ = config.wide_embedding_dim();
    if (wide_dim_ <= 0) Fail("model_config.xdeepfm.wide_embedding_dim must be > 0");
    InitInput(static_cast<int>(wide_dim_));
    for (const char* group : {"wide", "deep"}) {
      if (!embedding_group().HasGroup(group)) Fail("model_config.xdeepfm needs a '", group, "' group");
    }
    num_fields_ = static_cast<int64_t>(embedding_group().GroupDims("wide").size());
    deep_ = register_module("deep", MLP(InputDim("deep"), config.deep(), "model_config.xdeepfm.deep"));
    cin_ = register_module("cin", CIN(num_fields_, config.cin(), "model_config.xdeepfm.cin"));
    final_ = register_module("final", MLP(cin_->output_dim() + deep_->output_dim(), config.final(),
                                          "model_config.xdeepfm.final"));
    output_ = register_module("output_mlp", torch::nn::Linear(final_->output_dim(), heads()[0]->num_class()));
  }

  Predictions Predict(const Batch& batch) override {
    auto grouped = BuildInput(batch);
    const at::Tensor cin = cin_->forward(grouped.at("wide").reshape({-1, num_fields_, wide_dim_}));
    const at::Tensor deep = deep_->forward(grouped.at("deep"));
    return HeadPredictions({output_->forward(final_->forward(at::cat({cin, deep}, 1)))});
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    auto grouped = ScriptInput(w, tables);
    const std::string fields = w.Let("cin_input", grouped.at("wide") + ".reshape(" +
                                                      ScriptIntList({-1, num_fields_, wide_dim_}) + ")");
    const std::string joined = w.Let("final_input", "torch.cat([" + cin_->Script(w, fields, "cin") + ", " +
                                                        deep_->Script(w, grouped.at("deep"), "deep") + "], 1)");
    ScriptHeadPredictions(w, {ScriptLinear(w, *output_, final_->Script(w, joined, "final"), "output_mlp")});
  }

 private:
  int64_t wide_dim_ = 16;
  int64_t num_fields_ = 0;
  MLP deep_{nullptr};
  CIN cin_{nullptr};
  MLP final_{nullptr};
  torch::nn::Linear output_{nullptr};
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<XDeepFM>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "xdeepfm", Make, "cin.*", "deep.*", "final.*", "wide_embedding_dim");

}  // namespace tzrec
