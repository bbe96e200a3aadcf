// Explicit feature crossing of Deep & Cross Networks, as TorchEasyRec's Cross and CrossV2:
//
//   Cross (DCN v1, Wang et al. 2017):   x_{l+1} = (x_l w_l) x_0 + b_l + x_l     w_l [1, D], b_l [D]
//   CrossV2 (DCN v2, low-rank, 2020):    x_{l+1} = x_0 * V_l(U_l x_l) + x_l      U_l [r, D] (no bias),
//                                                                                V_l [D, r] + bias
// Parameters are named as TorchEasyRec names them ("w.<l>.weight", "b.<l>"; "u_kernels.<l>.weight",
// "v_kernels.<l>.weight"/".bias"). v1 initialises w xavier-uniform and b to zero, v2 as
// nn.Linear. Forward uses ATen ops (autograd gives the gradients); each also writes itself as
// TorchScript. Not thread-safe to build; forward may run on several threads.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/parameterlist.h>

#include <string>

#include "tzrec/protos/module.pb.h"
#include "tzrec/script/script_writer.h"

namespace tzrec {

class CrossImpl : public torch::nn::Module {
 public:
  CrossImpl(int64_t input_dim, const protos::Cross& config, const std::string& where);
  at::Tensor forward(const at::Tensor& x0);
  int64_t output_dim() const { return input_dim_; }
  std::string Script(ScriptWriter& w, const std::string& x0, const std::string& name) const;

 private:
  int64_t input_dim_;
  torch::nn::ModuleList w_;
  torch::nn::ParameterList b_;
};
TORCH_MODULE(Cross);

class CrossV2Impl : public torch::nn::Module {
 public:
  CrossV2Impl(int64_t input_dim, const protos::CrossV2& config, const std::string& where);
  at::Tensor forward(const at::Tensor& x0);
  int64_t output_dim() const { return input_dim_; }
  std::string Script(ScriptWriter& w, const std::string& x0, const std::string& name) const;

 private:
  int64_t input_dim_;
  torch::nn::ModuleList u_kernels_;
  torch::nn::ModuleList v_kernels_;
};
TORCH_MODULE(CrossV2);

}  // namespace tzrec
