// WuKong's layers (Zhang et al. 2024), as TorchEasyRec's modules: over field embeddings
// x [B, F, D],
//   LinearCompressBlock:  (x^T W)^T                      W [F, F_out]: F_out mixed fields
//   FactorizationMachineBlock: x (x^T W) [B, F, C] -> flat -> LayerNorm -> MLP -> Linear
//                         -> [B, F_out, D]               W [F, C] (optimised FM)
//   WuKongLayer: LayerNorm_D(cat[FMB(x), LCB(x)] + residual(x)), the residual an LCB to
//                F_fmb + F_lcb fields when F differs, else x itself.
// Parameter names follow TorchEasyRec ("lcb.weight", "fmb.weight", "fmb.norm", "fmb.mlp",
// "fmb.feature_out_liner", "norm", "residual_projection.weight"); W's are kaiming-uniform.
// Autograd ops only. Not thread-safe to build; forward may run on several threads.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <string>

#include "tzrec/modules/mlp.h"
#include "tzrec/protos/module.pb.h"
#include "tzrec/script/script_writer.h"

namespace tzrec {

class LinearCompressBlockImpl : public torch::nn::Module {
 public:
  LinearCompressBlockImpl(int64_t fields_in, int64_t fields_out);
  at::Tensor forward(const at::Tensor& x);
  std::string Script(ScriptWriter& w, const std::string& x, const std::string& name) const;

 private:
  at::Tensor weight_;
};
TORCH_MODULE(LinearCompressBlock);

class FactorizationMachineBlockImpl : public torch::nn::Module {
 public:
  FactorizationMachineBlockImpl(int64_t dim, int64_t fields_in, int64_t fields_out, int64_t compressed,
                                const protos::MLP& mlp, const std::string& where);
  at::Tensor forward(const at::Tensor& x);
  std::string Script(ScriptWriter& w, const std::string& x, const std::string& name) const;

 private:
  int64_t dim_, fields_in_, fields_out_, compressed_;
  at::Tensor weight_;
  torch::nn::LayerNorm norm_{nullptr};
  MLP mlp_{nullptr};
  torch::nn::Linear out_{nullptr};
};
TORCH_MODULE(FactorizationMachineBlock);

class WuKongLayerImpl : public torch::nn::Module {
 public:
  WuKongLayerImpl(int64_t dim, int64_t fields_in, const protos::WuKongLayer& config, const std::string& where);
  // [B, F_in, D] -> [B, output_fields(), D].
  at::Tensor forward(const at::Tensor& x);
  int64_t output_fields() const { return output_fields_; }
  std::string Script(ScriptWriter& w, const std::string& x, const std::string& name) const;

 private:
  int64_t dim_, output_fields_;
  LinearCompressBlock lcb_{nullptr};
  FactorizationMachineBlock fmb_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
  LinearCompressBlock residual_{nullptr};  // null: identity
};
TORCH_MODULE(WuKongLayer);

}  // namespace tzrec
