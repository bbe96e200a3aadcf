// WuKong (model_config.wukong, Zhang et al. 2024), as TorchEasyRec builds it: the sparse
// group's features as fields [B, F, D] (one group: that one; else the group named "sparse",
// whose features must share one dim), with the "dense" group's `dense_mlp` output (of width D)
// as one more field in front when that group exists; then the WuKong layers
// (modules/wukong.h), flattened into the `final` MLP and a Linear.
//
// One extension: TorchEasyRec refuses a dense_mlp whose width is not D, which its own
// examples/wukong_criteo.config (128 against 16) runs into. A width of k * D is taken here as k
// dense fields (the WuKong paper embeds dense features into several fields the same way); a
// width of D computes exactly as TorchEasyRec, and other widths are refused.
#include <ATen/ops/cat.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include <set>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/modules/wukong.h"

namespace tzrec {
namespace {

class WuKong : public Model {
 public:
  explicit WuKong(const ModelContext& context) : Model(context) {
    const auto& config = context.config->wukong();
    AddRankHead();
    InitInput();
    const auto& names = embedding_group().group_names();
    sparse_group_ = names.size() == 1 ? names.front() : "sparse";
    if (!embedding_group().HasGroup(sparse_group_)) Fail("model_config.wukong needs a group named 'sparse'");
    const std::vector<int> dims = embedding_group().GroupDims(sparse_group_);
    if (dims.empty() || std::set<int>(dims.begin(), dims.end()).size() != 1) {
      Fail("model_config.wukong: the features of group '", sparse_group_, "' must share one embedding dim");
    }
    sparse_fields_ = static_cast<int64_t>(dims.size());
    dim_ = dims.front();
    int64_t fields = sparse_fields_;
    if (names.size() > 1 && embedding_group().HasGroup("dense")) {
      if (!config.has_dense_mlp()) Fail("model_config.wukong.dense_mlp is needed for the 'dense' group");
      dense_mlp_ = register_module("dense_mlp", MLP(InputDim("dense"), config.dense_mlp(), "model_config.wukong.dense_mlp"));
      const int64_t width = dense_mlp_->output_dim();
      if (width % dim_ != 0) {
        Fail("model_config.wukong.dense_mlp: its last hidden unit (", width,
             ") must equal the sparse features' dim ", dim_, " (or be a multiple of it: that many dense fields)");
      }
      dense_fields_ = width / dim_;
      if (dense_fields_ > 1) {
        LOG_WARNING << "model_config.wukong.dense_mlp: its last hidden unit " << width << " is " << dense_fields_
                    << " x the sparse features' dim " << dim_ << ": the dense output enters as " << dense_fields_
                    << " fields (TorchEasyRec requires the two equal and refuses this config)";
      }
      fields += dense_fields_;
    }
    layers_ = register_module("_wukong_layers", torch::nn::ModuleList());
    for (int i = 0; i < config.wukong_layers_size(); ++i) {
      WuKongLayer layer(dim_, fields, config.wukong_layers(i), StrCat("model_config.wukong.wukong_layers[", i, "]"));
      fields = layer->output_fields();
      layers_->push_back(layer);
    }
    final_ = register_module("final_mlp", MLP(fields * dim_, config.final(), "model_config.wukong.final"));
    output_ = register_module("output_mlp", torch::nn::Linear(final_->output_dim(), heads()[0]->num_class()));
  }

  Predictions Predict(const Batch& batch) override {
    auto grouped = BuildInput(batch);
    at::Tensor x = grouped.at(sparse_group_).reshape({-1, sparse_fields_, dim_});
    if (dense_mlp_) x = at::cat({dense_mlp_->forward(grouped.at("dense")).reshape({-1, dense_fields_, dim_}), x}, 1);
    for (size_t i = 0; i < layers_->size(); ++i) x = layers_[i]->as<WuKongLayerImpl>()->forward(x);
    return HeadPredictions({output_->forward(final_->forward(x.reshape({x.size(0), -1})))});
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    auto grouped = ScriptInput(w, tables);
    std::string x = w.Let("fields", grouped.at(sparse_group_) + ".reshape(" + ScriptIntList({-1, sparse_fields_, dim_}) + ")");
    if (dense_mlp_) {
      x = w.Let("fields_all", "torch.cat([" + dense_mlp_->Script(w, grouped.at("dense"), "dense_mlp") + ".reshape(" +
                                  ScriptIntList({-1, dense_fields_, dim_}) + "), " + x + "], 1)");
    }
    for (size_t i = 0; i < layers_->size(); ++i) {
      x = layers_->ptr(i)->as<WuKongLayerImpl>()->Script(w, x, StrCat("wukong_", i));
    }
    const std::string flat = w.Let("final_input", x + ".reshape([" + x + ".size(0), -1])");
    ScriptHeadPredictions(w, {ScriptLinear(w, *output_, final_->Script(w, flat, "final_mlp"), "output_mlp")});
  }

 private:
  std::string sparse_group_;
  int64_t sparse_fields_ = 0;
  int64_t dim_ = 0;
  int64_t dense_fields_ = 0;  // fields the dense_mlp output makes (its width / dim_)
  MLP dense_mlp_{nullptr};
  torch::nn::ModuleList layers_{nullptr};
  MLP final_{nullptr};
  torch::nn::Linear output_{nullptr};
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<WuKong>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "wukong", Make, "dense_mlp.*", "wukong_layers.*", "final.*");

}  // namespace tzrec
