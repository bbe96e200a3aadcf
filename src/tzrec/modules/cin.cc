#include "tzrec/modules/cin.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/conv1d.h>
#include <ATen/ops/einsum.h>
#include <torch/nn/modules/conv.h>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/modules/mlp.h"

namespace tzrec {

CINImpl::CINImpl(int64_t num_fields, const protos::CIN& config, const std::string& where)
    : num_fields_(num_fields) {
  if (config.cin_layer_size_size() == 0) Fail(where, ".cin_layer_size: at least one layer is needed");
  layers_ = register_module("cin_layers", torch::nn::ModuleList());
  int64_t rows = num_fields;
  for (int k = 0; k < config.cin_layer_size_size(); ++k) {
    const int64_t size = config.cin_layer_size(k);
    if (size <= 0 || size > kMaxLayerWidth) Fail(where, ".cin_layer_size[", k, "]: ", size, " (must be in [1, ", kMaxLayerWidth, "])");
    layers_->push_back(torch::nn::Conv1d(torch::nn::Conv1dOptions(rows * num_fields, size, 1)));
    rows = size;
    output_dim_ += size;
  }
}

at::Tensor CINImpl::forward(const at::Tensor& x0) {
  const int64_t batch = x0.size(0), dim = x0.size(2);
  at::Tensor x = x0;
  std::vector<at::Tensor> parts;
  for (size_t k = 0; k < layers_->size(); ++k) {
    const at::Tensor z = at::einsum("bhd,bfd->bhfd", {x, x0}).reshape({batch, x.size(1) * num_fields_, dim});
    x = layers_[k]->as<torch::nn::Conv1dImpl>()->forward(z);
    parts.push_back(x.sum(2));
  }
  return at::cat(parts, 1);
}

std::string CINImpl::Script(ScriptWriter& w, const std::string& x0, const std::string& name) const {
  std::string x = x0, parts;
  for (size_t k = 0; k < layers_->size(); ++k) {
    const auto* conv = layers_->ptr(k)->as<torch::nn::Conv1dImpl>();
    const std::string z = w.Let(StrCat(name, "_z_", k), "torch.einsum(\"bhd,bfd->bhfd\", [" + x + ", " + x0 +
                                                            "]).reshape([" + x0 + ".size(0), " + x + ".size(1) * " +
                                                            std::to_string(num_fields_) + ", " + x0 + ".size(2)])");
    x = w.Let(StrCat(name, "_", k), "torch.conv1d(" + z + ", " + w.Tensor(StrCat(name, "_", k, "_weight"), conv->weight) +
                                        ", " + w.Tensor(StrCat(name, "_", k, "_bias"), conv->bias) + ")");
    parts += (parts.empty() ? "" : ", ") + ("torch.sum(" + x + ", 2)");
  }
  return w.Let(name, "torch.cat([" + parts + "], 1)");
}

}  // namespace tzrec
