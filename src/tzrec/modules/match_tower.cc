#include "tzrec/modules/match_tower.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/sum.h>
#include <torch/nn/functional/normalization.h>

namespace tzrec {

MatchTowerImpl::MatchTowerImpl(int64_t in_features, const protos::MLP* mlp, int output_dim,
                               bool cosine, const std::string& where)
    : cosine_(cosine) {
  output_dim_ = in_features;
  if (mlp) {
    mlp_ = register_module("mlp", MLP(in_features, *mlp, where + ".mlp"));
    output_dim_ = mlp_->output_dim();
  }
  if (output_dim > 0) {
    output_ = register_module("output", torch::nn::Linear(output_dim_, output_dim));
    output_dim_ = output_dim;
  }
}

at::Tensor MatchTowerImpl::forward(at::Tensor x) {
  if (mlp_) x = mlp_->forward(x);
  if (output_) x = output_->forward(x);
  if (cosine_) {
    x = torch::nn::functional::normalize(x, torch::nn::functional::NormalizeFuncOptions().p(2.0).dim(1));
  }
  return x;
}

std::string MatchTowerImpl::Script(ScriptWriter& w, const std::string& input, const std::string& name) const {
  std::string x = input;
  if (mlp_) x = mlp_->Script(w, x, name + "_mlp");
  if (output_) x = ScriptLinear(w, *output_, x, name + "_output");
  // As torch::nn::functional::normalize computes it (eps 1e-12), so the two agree exactly.
  if (cosine_) x = w.Let(name + "_normalized", "torch.div(" + x + ", torch.clamp_min(torch.norm(" + x + ", 2.0, [1], True), 1e-12))");
  return x;
}

at::Tensor SimilarityWithSampled(const at::Tensor& user, const at::Tensor& item,
                                 const at::Tensor& hard_neg_indices) {
  const int64_t b = user.size(0);
  const int64_t n_hard = hard_neg_indices.defined() ? hard_neg_indices.size(0) : 0;
  const int64_t simple = item.size(0) - n_hard;
  at::Tensor pos = at::sum(user * item.slice(0, 0, b), {1}, /*keepdim=*/true);
  at::Tensor neg = at::mm(user, item.slice(0, b, simple).t());
  if (n_hard == 0) return at::cat({pos, neg}, 1);
  const at::Tensor rows = hard_neg_indices.select(1, 0);
  const at::Tensor slots = hard_neg_indices.select(1, 1);
  at::Tensor hard_sim = at::sum(user.index_select(0, rows) * item.slice(0, simple), {1});
  const int64_t width = slots.max().item<int64_t>() + 1;
  // -1e32 as TorchEasyRec: an empty slot gets no probability in the softmax.
  at::Tensor block = at::full({b, width}, -1e32, user.options());
  block = block.index_put({rows, slots}, hard_sim);
  return at::cat({pos, neg, block}, 1);
}

}  // namespace tzrec
