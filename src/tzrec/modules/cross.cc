#include "tzrec/modules/cross.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/modules/mlp.h"

namespace tzrec {
namespace {

void CheckLayers(uint32_t layers, const std::string& where) {
  if (layers == 0 || layers > 64) Fail(where, ".cross_num: ", layers, " (must be in [1, 64])");
}

}  // namespace

CrossImpl::CrossImpl(int64_t input_dim, const protos::Cross& config, const std::string& where)
    : input_dim_(input_dim) {
  CheckLayers(config.cross_num(), where);
  w_ = register_module("w", torch::nn::ModuleList());
  b_ = register_module("b", torch::nn::ParameterList());
  for (uint32_t l = 0; l < config.cross_num(); ++l) {
    torch::nn::Linear w(torch::nn::LinearOptions(input_dim, 1).bias(false));
    torch::nn::init::xavier_uniform_(w->weight);
    w_->push_back(w);
    b_->append(at::zeros({input_dim}));
  }
}

at::Tensor CrossImpl::forward(const at::Tensor& x0) {
  at::Tensor x = x0;
  for (size_t l = 0; l < w_->size(); ++l) {
    x = w_[l]->as<torch::nn::LinearImpl>()->forward(x) * x0 + b_->at(l) + x;
  }
  return x;
}

std::string CrossImpl::Script(ScriptWriter& w, const std::string& x0, const std::string& name) const {
  std::string x = x0;
  for (size_t l = 0; l < w_->size(); ++l) {
    const std::string weight = w.Tensor(StrCat(name, "_w_", l), w_->ptr(l)->as<torch::nn::LinearImpl>()->weight);
    const std::string bias = w.Tensor(StrCat(name, "_b_", l), b_->at(l));
    x = w.Let(StrCat(name, "_", l), "torch.matmul(" + x + ", " + weight + ".t()) * " + x0 + " + " + bias + " + " + x);
  }
  return x;
}

CrossV2Impl::CrossV2Impl(int64_t input_dim, const protos::CrossV2& config, const std::string& where)
    : input_dim_(input_dim) {
  CheckLayers(config.cross_num(), where);
  if (config.low_rank() == 0 || config.low_rank() > static_cast<uint32_t>(kMaxLayerWidth)) {
    Fail(where, ".low_rank: ", config.low_rank(), " (must be in [1, ", kMaxLayerWidth, "])");
  }
  u_kernels_ = register_module("u_kernels", torch::nn::ModuleList());
  v_kernels_ = register_module("v_kernels", torch::nn::ModuleList());
  const int64_t rank = config.low_rank();
  for (uint32_t l = 0; l < config.cross_num(); ++l) {
    u_kernels_->push_back(torch::nn::Linear(torch::nn::LinearOptions(input_dim, rank).bias(false)));
    v_kernels_->push_back(torch::nn::Linear(torch::nn::LinearOptions(rank, input_dim)));
  }
}

at::Tensor CrossV2Impl::forward(const at::Tensor& x0) {
  at::Tensor x = x0;
  for (size_t l = 0; l < u_kernels_->size(); ++l) {
    const at::Tensor low = u_kernels_[l]->as<torch::nn::LinearImpl>()->forward(x);
    x = x0 * v_kernels_[l]->as<torch::nn::LinearImpl>()->forward(low) + x;
  }
  return x;
}

std::string CrossV2Impl::Script(ScriptWriter& w, const std::string& x0, const std::string& name) const {
  std::string x = x0;
  for (size_t l = 0; l < u_kernels_->size(); ++l) {
    const std::string low = ScriptLinear(w, *u_kernels_->ptr(l)->as<torch::nn::LinearImpl>(), x, StrCat(name, "_u_", l));
    const std::string high = ScriptLinear(w, *v_kernels_->ptr(l)->as<torch::nn::LinearImpl>(), low, StrCat(name, "_v_", l));
    x = w.Let(StrCat(name, "_", l), x0 + " * " + high + " + " + x);
  }
  return x;
}

}  // namespace tzrec
