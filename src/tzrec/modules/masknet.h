// MaskNet (TorchEasyRec's modules/masknet.py): LayerNorm of the feature embedding, then
// `n_mask_blocks` MaskBlocks — mask = Linear(agg)·ReLU·Linear(input) of the raw embedding,
// out = ReLU(LN(Linear_hidden(input ⊙ mask))) — run in parallel on LN(emb) and concatenated, or
// chained in series (each block's input is the previous output; the mask always reads the raw
// embedding); then the optional top MLP. The aggregation width is input_dim * reduction_ratio
// (reduction_ratio defaults to 1.0, so aggregation_dim only counts with reduction_ratio: 0, as
// in TorchEasyRec). Written once here: DBMTL's mask_net and the mask_net model use it. One
// thread at a time.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/normalization.h>

#include <string>

#include "tzrec/modules/mlp.h"
#include "tzrec/protos/module.pb.h"

namespace tzrec {

class MaskBlockImpl : public torch::nn::Module {
 public:
  MaskBlockImpl(int64_t input_dim, int64_t mask_input_dim, const protos::MaskBlock& config,
                const std::string& where);
  at::Tensor forward(const at::Tensor& feature_input, const at::Tensor& mask_input);
  // The same as TorchScript (script/script_writer.h); returns the output local.
  std::string Script(ScriptWriter& w, const std::string& feature_input, const std::string& mask_input,
                     const std::string& name) const;
  int64_t output_dim() const { return hidden_dim_; }

 private:
  int64_t hidden_dim_;
  torch::nn::Sequential mask_generator_;
  torch::nn::Sequential ffn_;
};
TORCH_MODULE(MaskBlock);

class MaskNetModuleImpl : public torch::nn::Module {
 public:
  MaskNetModuleImpl(int64_t feature_dim, const protos::MaskNetModule& config, const std::string& where);
  at::Tensor forward(const at::Tensor& feature_emb);
  // The same as TorchScript; returns the output local.
  std::string Script(ScriptWriter& w, const std::string& feature_emb, const std::string& name) const;
  int64_t output_dim() const { return output_dim_; }

 private:
  bool parallel_;
  int64_t output_dim_;
  torch::nn::LayerNorm ln_emb_{nullptr};
  torch::nn::ModuleList mask_blocks_;
  MLP top_mlp_{nullptr};
};
TORCH_MODULE(MaskNetModule);

}  // namespace tzrec
