// DLRM (model_config.dlrm): dense MLP, pairwise dot-product interaction, final MLP.
//
// The `sparse` group's features (all of one embedding dim) and, with a `dense` group, the dense
// MLP output (whose last width must equal that dim) form N feature vectors; their pairwise
// dot products, then the dense MLP output and, with arch_with_sparse, the raw sparse
// embeddings are concatenated into the final MLP and a Linear, as TorchEasyRec's DLRM.
#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <torch/nn/modules/linear.h>

#include <set>

#include "tzrec/common/error.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/interaction.h"
#include "tzrec/modules/mlp.h"

namespace tzrec {
namespace {

class DLRM : public Model {
 public:
  DLRM(const ModelContext& context) : Model(context) {
    const protos::ModelConfig& config = *context.config;
    AddRankHead();
    const auto& dlrm = config.dlrm();
    InitInput();
    const auto& groups = embedding_group().group_names();
    sparse_group_ = groups.size() == 1 ? groups[0] : "sparse";
    if (groups.size() > 1 && embedding_group().HasGroup("dense")) {
      if (!dlrm.has_dense_mlp()) Fail("model_config.dlrm.dense_mlp is required with a 'dense' group");
      dense_mlp_ = register_module(
          "dense_mlp", MLP(InputDim("dense"), dlrm.dense_mlp(),
                           "model_config.dlrm.dense_mlp"));
    }
    auto dims = embedding_group().GroupDims(sparse_group_);
    if (std::set<int>(dims.begin(), dims.end()).size() != 1) {
      Fail("model_config.dlrm: sparse group feature dims must be the same");
    }
    sparse_num_ = static_cast<int64_t>(dims.size());
    per_sparse_dim_ = dims[0];
    if (dense_mlp_ && dense_mlp_->output_dim() != per_sparse_dim_) {
      Fail("model_config.dlrm.dense_mlp: last hidden unit must equal the sparse feature dim ",
           per_sparse_dim_);
    }
    const int64_t feature_num = sparse_num_ + (dense_mlp_ ? 1 : 0);
    int64_t final_in = feature_num * (feature_num - 1) / 2;
    if (dense_mlp_) final_in += dense_mlp_->output_dim();
    arch_with_sparse_ = dlrm.arch_with_sparse();
    if (arch_with_sparse_) final_in += InputDim(sparse_group_);
    if (!dlrm.has_final()) Fail("model_config.dlrm.final is required");
    final_mlp_ = register_module("final_mlp",
                                 MLP(final_in, dlrm.final(), "model_config.dlrm.final"));
    output_mlp_ = register_module("output_mlp",
                                  torch::nn::Linear(final_mlp_->output_dim(), static_cast<int64_t>(heads()[0]->num_class())));
  }

  Predictions Predict(const Batch& batch) override {
    auto grouped = BuildInput(batch);
    const at::Tensor& sparse = grouped.at(sparse_group_);
    at::Tensor feat = sparse.reshape({-1, sparse_num_, per_sparse_dim_});
    at::Tensor dense;
    if (dense_mlp_) {
      dense = dense_mlp_->forward(grouped.at("dense"));
      feat = at::cat({dense.unsqueeze(1), feat}, 1);
    }
    std::vector<at::Tensor> parts = {PairwiseInteraction(feat)};
    if (dense_mlp_) parts.push_back(dense);
    if (arch_with_sparse_) parts.push_back(sparse);
    at::Tensor y = output_mlp_->forward(final_mlp_->forward(at::cat(parts, 1)));
    return HeadPredictions({y});
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    auto grouped = ScriptInput(w, tables);
    const std::string& sparse = grouped.at(sparse_group_);
    std::string feat = w.Let("sparse_features", sparse + ".reshape(" +
                                                    ScriptIntList({-1, sparse_num_, per_sparse_dim_}) + ")");
    std::string dense;
    if (dense_mlp_) {
      dense = dense_mlp_->Script(w, grouped.at("dense"), "dense_mlp");
      feat = w.Let("features", "torch.cat([" + dense + ".unsqueeze(1), " + feat + "], 1)");
    }
    std::string parts = ScriptPairwiseInteraction(w, feat, sparse_num_ + (dense_mlp_ ? 1 : 0));
    if (dense_mlp_) parts += ", " + dense;
    if (arch_with_sparse_) parts += ", " + sparse;
    const std::string joined = w.Let("final_input", "torch.cat([" + parts + "], 1)");
    ScriptHeadPredictions(w, {ScriptLinear(w, *output_mlp_, final_mlp_->Script(w, joined, "final_mlp"), "output_mlp")});
  }

 private:
  std::string sparse_group_;
  int64_t sparse_num_ = 0;
  int64_t per_sparse_dim_ = 0;
  bool arch_with_sparse_ = true;
  MLP dense_mlp_{nullptr};
  MLP final_mlp_{nullptr};
  torch::nn::Linear output_mlp_{nullptr};
};

std::shared_ptr<Model> Make(const ModelContext& context) {
  return std::make_shared<DLRM>(context);
}

}  // namespace

TZREC_REGISTER(ModelRegistry(), "dlrm", Make, "dense_mlp.*", "final.*", "arch_with_sparse");

}  // namespace tzrec
