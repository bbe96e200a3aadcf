// Two-tower retrieval pieces (TorchEasyRec's MatchTower and match_model._sim_with_sampler):
// a tower (optional MLP, Linear(output_dim) when output_dim > 0, L2 normalisation for COSINE)
// and the similarity of users with their positive, sampled and hard negative items.
//
// Thread safety: a module is used by one thread at a time; SimilarityWithSampled is pure.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>

#include "tzrec/modules/mlp.h"
#include "tzrec/protos/module.pb.h"
#include "tzrec/script/script_writer.h"

namespace tzrec {

class MatchTowerImpl : public torch::nn::Module {
 public:
  // `mlp`: the tower's MLP, or null for none.
  MatchTowerImpl(int64_t in_features, const protos::MLP* mlp, int output_dim, bool cosine,
                 const std::string& where);
  at::Tensor forward(at::Tensor x);
  // Inference forward as TorchScript (script/script_writer.h); returns the output local.
  std::string Script(ScriptWriter& w, const std::string& input, const std::string& name) const;
  int64_t output_dim() const { return output_dim_; }

 private:
  bool cosine_;
  int64_t output_dim_ = 0;
  MLP mlp_{nullptr};
  torch::nn::Linear output_{nullptr};
};
TORCH_MODULE(MatchTower);

// user [B, D]; item [B + N + H, D]: the B positives (row i is user i's), N sampled negatives
// shared by the batch, H hard negatives; hard_neg_indices int64 [H, 2] of (user row, slot) or
// undefined. Returns [B, 1 + N (+ S)]: sum(u_i * pos_i), u_i . neg_j, and with hard negatives
// a block of S = max slot + 1 columns holding u_row . hard_h at (row, slot) and -1e32 where a
// row has no such slot.
at::Tensor SimilarityWithSampled(const at::Tensor& user, const at::Tensor& item,
                                 const at::Tensor& hard_neg_indices);

}  // namespace tzrec
