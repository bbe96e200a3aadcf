#include "tzrec/modules/variational_dropout.h"

#include <ATen/ops/log.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tensor.h>

#include <limits>

#include "tzrec/common/error.h"
#include "tzrec/script/script_writer.h"

namespace tzrec {

VariationalDropoutImpl::VariationalDropoutImpl(std::vector<std::pair<std::string, int>> features,
                                               double regularization_lambda)
    : features_(std::move(features)), lambda_(regularization_lambda) {
  std::vector<int64_t> widths;
  for (const auto& [name, width] : features_) widths.push_back(width);
  repeats_ = at::tensor(widths, at::kLong);
  feature_p_ = register_parameter("feature_p", at::randn({static_cast<int64_t>(features_.size())}));
}

std::pair<at::Tensor, at::Tensor> VariationalDropoutImpl::forward(const at::Tensor& group) {
  const at::Tensor ratio = feature_p_.sigmoid();  // [F]
  at::Tensor drop;
  if (is_training()) {
    // A concrete (relaxed Bernoulli) sample per row and feature, temperature 0.1.
    const double eps = std::numeric_limits<float>::epsilon();
    const at::Tensor p = ratio.unsqueeze(0).expand({group.size(0), ratio.size(0)});
    const at::Tensor noise = at::rand(p.sizes(), p.options());
    const at::Tensor logit = at::log(p + eps) - at::log(1.0 - p + eps) + at::log(noise + eps) - at::log(1.0 - noise + eps);
    drop = at::sigmoid(logit / 0.1);
  } else {
    drop = ratio.unsqueeze(0);
  }
  const at::Tensor noisy = group * (1.0 - at::repeat_interleave(drop, repeats_, 1));
  const at::Tensor loss = (1.0 - ratio).sum() * (lambda_ / static_cast<double>(group.size(0)));
  return {noisy, loss};
}

std::vector<std::pair<std::string, double>> VariationalDropoutImpl::DropoutRatios() const {
  const at::Tensor ratio = feature_p_.detach().sigmoid().to(at::kDouble).contiguous();
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < features_.size(); ++i) out.emplace_back(features_[i].first, ratio[i].item<double>());
  return out;
}

std::string VariationalDropoutImpl::Script(ScriptWriter& w, const std::string& group, const std::string& name) const {
  const at::Tensor keep = at::repeat_interleave(1.0 - feature_p_.detach().sigmoid(), repeats_, 0).unsqueeze(0);
  return w.Let(name, group + " * " + w.Tensor(name + "_keep", keep));
}

}  // namespace tzrec
