#include "tzrec/modules/masknet.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/script/script_writer.h"

namespace tzrec {

MaskBlockImpl::MaskBlockImpl(int64_t input_dim, int64_t mask_input_dim,
                             const protos::MaskBlock& config, const std::string& where) {
  int64_t aggregation = 0;
  const double ratio = config.reduction_ratio();
  if (!(ratio >= 0.0 && ratio <= static_cast<double>(kMaxLayerWidth))) {
    Fail(where, ".reduction_ratio must be a number >= 0, got ", ratio);
  }
  if (config.reduction_ratio() != 0) {
    aggregation = static_cast<int64_t>(static_cast<double>(input_dim) * config.reduction_ratio());
  } else {
    aggregation = config.aggregation_dim();
  }
  if (aggregation <= 0) {
    Fail(where, ": the aggregation width (input_dim * reduction_ratio, or aggregation_dim with "
         "reduction_ratio 0) must be > 0, got ", aggregation);
  }
  CheckedWidth(aggregation, where + ".aggregation_dim (or input_dim * reduction_ratio)");
  hidden_dim_ = CheckedWidth(config.hidden_dim(), where + ".hidden_dim");
  CheckLinearSize(mask_input_dim, aggregation, where);
  CheckLinearSize(aggregation, input_dim, where);
  CheckLinearSize(input_dim, hidden_dim_, where);
  mask_generator_->push_back(torch::nn::Linear(mask_input_dim, aggregation));
  mask_generator_->push_back(torch::nn::ReLU());
  mask_generator_->push_back(torch::nn::Linear(aggregation, input_dim));
  register_module("mask_generator", mask_generator_);
  ffn_->push_back(torch::nn::Linear(input_dim, hidden_dim_));
  ffn_->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden_dim_})));
  ffn_->push_back(torch::nn::ReLU());
  register_module("ffn", ffn_);
}

at::Tensor MaskBlockImpl::forward(const at::Tensor& feature_input, const at::Tensor& mask_input) {
  at::Tensor weights = mask_generator_->forward(mask_input);
  return ffn_->forward(feature_input * weights);
}

MaskNetModuleImpl::MaskNetModuleImpl(int64_t feature_dim, const protos::MaskNetModule& config,
                                     const std::string& where)
    : parallel_(config.use_parallel()) {
  const int blocks = static_cast<int>(CheckedCount(config.n_mask_blocks(), 1, kMaxModuleCount, where + ".n_mask_blocks"));
  ln_emb_ = register_module("ln_emb", torch::nn::LayerNorm(torch::nn::LayerNormOptions({feature_dim})));
  if (parallel_) {
    for (int i = 0; i < blocks; ++i) {
      mask_blocks_->push_back(MaskBlock(feature_dim, feature_dim, config.mask_block(), where + ".mask_block"));
    }
    output_dim_ = static_cast<int64_t>(config.mask_block().hidden_dim()) * blocks;
  } else {
    output_dim_ = feature_dim;
    for (int i = 0; i < blocks; ++i) {
      MaskBlock block(output_dim_, feature_dim, config.mask_block(), where + ".mask_block");
      output_dim_ = block->output_dim();
      mask_blocks_->push_back(block);
    }
  }
  register_module("mask_blocks", mask_blocks_);
  if (config.has_top_mlp()) {
    top_mlp_ = register_module("top_mlp", MLP(output_dim_, config.top_mlp(), where + ".top_mlp"));
    output_dim_ = top_mlp_->output_dim();
  }
}

at::Tensor MaskNetModuleImpl::forward(const at::Tensor& feature_emb) {
  at::Tensor ln = ln_emb_->forward(feature_emb);
  at::Tensor hidden;
  if (parallel_) {
    std::vector<at::Tensor> outs;
    for (const auto& block : *mask_blocks_) outs.push_back(block->as<MaskBlockImpl>()->forward(ln, feature_emb));
    hidden = at::cat(outs, -1);
  } else {
    hidden = mask_blocks_[0]->as<MaskBlockImpl>()->forward(ln, feature_emb);
    for (size_t i = 1; i < mask_blocks_->size(); ++i) {
      hidden = mask_blocks_[i]->as<MaskBlockImpl>()->forward(hidden, feature_emb);
    }
  }
  return top_mlp_ ? top_mlp_->forward(hidden) : hidden;
}

std::string MaskBlockImpl::Script(ScriptWriter& w, const std::string& feature_input, const std::string& mask_input,
                                  const std::string& name) const {
  const auto& mask = *mask_generator_;
  std::string weights = ScriptLinear(w, *mask.ptr(0)->as<torch::nn::LinearImpl>(), mask_input, name + "_mask_0");
  weights = w.Let("relu", "torch.relu(" + weights + ")");
  weights = ScriptLinear(w, *mask.ptr(2)->as<torch::nn::LinearImpl>(), weights, name + "_mask_2");
  const std::string masked = w.Let("masked", feature_input + " * " + weights);
  const auto& ffn = *ffn_;
  std::string out = ScriptLinear(w, *ffn.ptr(0)->as<torch::nn::LinearImpl>(), masked, name + "_ffn_0");
  out = ScriptLayerNorm(w, *ffn.ptr(1)->as<torch::nn::LayerNormImpl>(), out, name + "_ffn_1");
  return w.Let("relu", "torch.relu(" + out + ")");
}

std::string MaskNetModuleImpl::Script(ScriptWriter& w, const std::string& feature_emb, const std::string& name) const {
  const std::string ln = ScriptLayerNorm(w, *ln_emb_, feature_emb, name + "_ln_emb");
  std::string hidden;
  if (parallel_) {
    std::string outs;
    for (size_t i = 0; i < mask_blocks_->size(); ++i) {
      outs += (i ? ", " : "") +
              mask_blocks_->ptr(i)->as<MaskBlockImpl>()->Script(w, ln, feature_emb, name + "_block_" + std::to_string(i));
    }
    hidden = w.Let("mask_blocks", "torch.cat([" + outs + "], -1)");
  } else {
    hidden = mask_blocks_->ptr(0)->as<MaskBlockImpl>()->Script(w, ln, feature_emb, name + "_block_0");
    for (size_t i = 1; i < mask_blocks_->size(); ++i) {
      hidden = mask_blocks_->ptr(i)->as<MaskBlockImpl>()->Script(w, hidden, feature_emb, name + "_block_" + std::to_string(i));
    }
  }
  return top_mlp_ ? top_mlp_->Script(w, hidden, name + "_top_mlp") : hidden;
}

}  // namespace tzrec
