#include "tzrec/modules/wukong.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/matmul.h>
#include <torch/nn/init.h>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"

namespace tzrec {
namespace {

at::Tensor KaimingUniform(int64_t rows, int64_t cols) {
  at::Tensor w = at::empty({rows, cols});
  torch::nn::init::kaiming_uniform_(w);
  return w;
}

int64_t Width(uint32_t value, const std::string& field) {
  if (value == 0 || value > static_cast<uint32_t>(kMaxLayerWidth)) {
    Fail(field, ": ", value, " (must be in [1, ", kMaxLayerWidth, "])");
  }
  return value;
}

}  // namespace

LinearCompressBlockImpl::LinearCompressBlockImpl(int64_t fields_in, int64_t fields_out) {
  weight_ = register_parameter("weight", KaimingUniform(fields_in, fields_out));
}

at::Tensor LinearCompressBlockImpl::forward(const at::Tensor& x) {
  return at::matmul(x.permute({0, 2, 1}), weight_).permute({0, 2, 1});
}

std::string LinearCompressBlockImpl::Script(ScriptWriter& w, const std::string& x, const std::string& name) const {
  return w.Let(name, "torch.matmul(" + x + ".permute([0, 2, 1]), " + w.Tensor(name + "_weight", weight_) +
                         ").permute([0, 2, 1])");
}

FactorizationMachineBlockImpl::FactorizationMachineBlockImpl(int64_t dim, int64_t fields_in, int64_t fields_out,
                                                             int64_t compressed, const protos::MLP& mlp,
                                                             const std::string& where)
    : dim_(dim), fields_in_(fields_in), fields_out_(fields_out), compressed_(compressed) {
  weight_ = register_parameter("weight", KaimingUniform(fields_in, compressed));
  norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({fields_in * compressed})));
  mlp_ = register_module("mlp", MLP(fields_in * compressed, mlp, where + ".feature_num_mlp"));
  out_ = register_module("feature_out_liner", torch::nn::Linear(mlp_->output_dim(), fields_out * dim));
}

at::Tensor FactorizationMachineBlockImpl::forward(const at::Tensor& x) {
  const at::Tensor compressed = at::matmul(x, at::matmul(x.permute({0, 2, 1}), weight_));  // [B, F, C]
  const at::Tensor flat = compressed.reshape({-1, fields_in_ * compressed_});
  return out_->forward(mlp_->forward(norm_->forward(flat))).reshape({-1, fields_out_, dim_});
}

std::string FactorizationMachineBlockImpl::Script(ScriptWriter& w, const std::string& x, const std::string& name) const {
  const std::string flat =
      w.Let(name + "_flat", "torch.matmul(" + x + ", torch.matmul(" + x + ".permute([0, 2, 1]), " +
                                w.Tensor(name + "_weight", weight_) + ")).reshape([-1, " +
                                std::to_string(fields_in_ * compressed_) + "])");
  const std::string hidden = mlp_->Script(w, ScriptLayerNorm(w, *norm_, flat, name + "_norm"), name + "_mlp");
  return w.Let(name, ScriptLinear(w, *out_, hidden, name + "_out") + ".reshape(" +
                         ScriptIntList({-1, fields_out_, dim_}) + ")");
}

WuKongLayerImpl::WuKongLayerImpl(int64_t dim, int64_t fields_in, const protos::WuKongLayer& config,
                                 const std::string& where)
    : dim_(dim) {
  const int64_t lcb = Width(config.lcb_feature_num(), where + ".lcb_feature_num");
  const int64_t fmb = Width(config.fmb_feature_num(), where + ".fmb_feature_num");
  const int64_t compressed = Width(config.compressed_feature_num(), where + ".compressed_feature_num");
  output_fields_ = lcb + fmb;
  lcb_ = register_module("lcb", LinearCompressBlock(fields_in, lcb));
  fmb_ = register_module("fmb", FactorizationMachineBlock(dim, fields_in, fmb, compressed, config.feature_num_mlp(), where));
  norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
  if (fields_in != output_fields_) {
    residual_ = register_module("residual_projection", LinearCompressBlock(fields_in, output_fields_));
  }
}

at::Tensor WuKongLayerImpl::forward(const at::Tensor& x) {
  const at::Tensor joined = at::cat({fmb_->forward(x), lcb_->forward(x)}, 1);
  return norm_->forward(joined + (residual_ ? residual_->forward(x) : x));
}

std::string WuKongLayerImpl::Script(ScriptWriter& w, const std::string& x, const std::string& name) const {
  const std::string joined = w.Let(name + "_joined", "torch.cat([" + fmb_->Script(w, x, name + "_fmb") + ", " +
                                                         lcb_->Script(w, x, name + "_lcb") + "], 1)");
  const std::string residual = residual_ ? residual_->Script(w, x, name + "_residual") : x;
  return ScriptLayerNorm(w, *norm_, w.Let(name + "_sum", joined + " + " + residual), name + "_norm");
}

}  // namespace tzrec
