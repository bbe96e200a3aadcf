#include "tzrec/modules/intervention.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/eye.h>
#include <ATen/ops/linalg_householder_product.h>
#include <ATen/ops/linalg_qr.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/init.h>

#include "tzrec/common/error.h"
#include "tzrec/script/script_writer.h"

namespace tzrec {

OrthogonalWeightImpl::OrthogonalWeightImpl(int64_t rows, int64_t cols) {
  TZREC_CHECK(rows > cols && cols > 0, "orthogonal weight [", rows, ", ", cols, "]");
  torch::NoGradGuard no_grad;
  at::Tensor initial = at::empty({rows, cols});
  torch::nn::init::orthogonal_(initial);
  // Complete to an orthogonal [rows, rows] matrix whose first columns are the initial weight
  // (QR of [initial, noise], columns signed so R's diagonal is positive).
  auto [q, r] = at::linalg_qr(at::cat({initial, at::randn({rows, rows - cols})}, 1));
  base_ = register_buffer("base", q * r.diagonal().sign().unsqueeze(0));
  at::Tensor minus_identity = at::zeros({rows, cols});
  minus_identity.diagonal().fill_(-1.0);
  original_ = register_parameter("original", minus_identity);
}

at::Tensor OrthogonalWeightImpl::forward() const {
  const at::Tensor reflections = original_.tril(-1);
  const at::Tensor tau = 2.0 / (1.0 + (reflections * reflections).sum(0));
  // The diagonal's signs (cast to int as torch does: no gradient reaches it).
  const at::Tensor signs = original_.diagonal().detach().to(at::kInt).unsqueeze(0);
  return base_.matmul(at::linalg_householder_product(reflections, tau) * signs);
}

InterventionImpl::InterventionImpl(int64_t base_dim, int64_t source_dim, int64_t low_rank_dim,
                                   double dropout_ratio, const std::string& where)
    : base_dim_(base_dim) {
  if (low_rank_dim < 1 || low_rank_dim >= base_dim || low_rank_dim >= source_dim) {
    Fail(where, ".low_rank_dim (", low_rank_dim, ") must be at least 1 and below the tower's width (",
         base_dim, ") and its intervention sources' width (", source_dim, ")");
  }
  if (!(dropout_ratio >= 0.0 && dropout_ratio < 1.0)) {
    Fail(where, ".dropout_ratio must be in [0, 1), got ", dropout_ratio);
  }
  base_rotate_ = register_module("base_rotate_layer", OrthogonalWeight(base_dim, low_rank_dim));
  source_rotate_ = register_module("source_rotate_layer", OrthogonalWeight(source_dim, low_rank_dim));
  dropout_ = register_module("dropout", torch::nn::Dropout(dropout_ratio));
}

at::Tensor InterventionImpl::forward(const at::Tensor& base, const at::Tensor& source) {
  const at::Tensor base_weight = base_rotate_->forward();
  const at::Tensor rotated = base.matmul(base_weight) - source.detach().matmul(source_rotate_->forward());
  return dropout_->forward(rotated.matmul(base_weight.t()) + base);
}

std::string InterventionImpl::Script(ScriptWriter& w, const std::string& base, const std::string& source,
                                     const std::string& name) const {
  torch::NoGradGuard no_grad;
  const std::string wb = w.Tensor(name + "_base_weight", base_rotate_->forward());
  const std::string ws = w.Tensor(name + "_source_weight", source_rotate_->forward());
  return w.Let(name, "torch.matmul(torch.matmul(" + base + ", " + wb + ") - torch.matmul(" + source + ", " + ws +
                         "), " + wb + ".t()) + " + base);
}

}  // namespace tzrec
