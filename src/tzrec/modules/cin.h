// Compressed Interaction Network of xDeepFM (Lian et al. 2018), as TorchEasyRec's CIN: over
// field embeddings x0 [B, F, D], layer k forms the outer products of its input's H rows with
// x0's F rows per embedding column, z [B, H*F, D], and compresses them with a 1x1 convolution
// (no activation) to cin_layer_size[k] rows; each layer's output summed over D is a part of the
// result [B, sum(cin_layer_size)]. Parameters "cin_layers.<k>.weight" [L, H*F, 1] and ".bias",
// initialised as torch's Conv1d. Autograd ops only. Not thread-safe to build; forward may run
// on several threads.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>

#include <string>

#include "tzrec/protos/module.pb.h"
#include "tzrec/script/script_writer.h"

namespace tzrec {

class CINImpl : public torch::nn::Module {
 public:
  CINImpl(int64_t num_fields, const protos::CIN& config, const std::string& where);
  // x0 [B, F, D] -> [B, output_dim()].
  at::Tensor forward(const at::Tensor& x0);
  int64_t output_dim() const { return output_dim_; }
  std::string Script(ScriptWriter& w, const std::string& x0, const std::string& name) const;

 private:
  int64_t num_fields_;
  int64_t output_dim_ = 0;
  torch::nn::ModuleList layers_;
};
TORCH_MODULE(CIN);

}  // namespace tzrec
