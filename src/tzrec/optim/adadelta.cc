#include "tzrec/optim/adadelta.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/optim/serialize.h>

#include "tzrec/common/error.h"

namespace tzrec {

void AdadeltaOptions::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(lr);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(rho);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(eps);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(weight_decay);
}

void AdadeltaOptions::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, lr);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, rho);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, eps);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(double, weight_decay);
}

void AdadeltaParamState::serialize(torch::serialize::OutputArchive& archive) const {
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(step);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(square_avg);
  _TORCH_OPTIM_SERIALIZE_TORCH_ARG(acc_delta);
}

void AdadeltaParamState::serialize(torch::serialize::InputArchive& archive) {
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(int64_t, step);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(at::Tensor, square_avg);
  _TORCH_OPTIM_DESERIALIZE_TORCH_ARG(at::Tensor, acc_delta);
}

Adadelta::Adadelta(std::vector<at::Tensor> params, AdadeltaOptions defaults)
    : Optimizer({torch::optim::OptimizerParamGroup(std::move(params))},
                std::make_unique<AdadeltaOptions>(defaults)) {
  TZREC_CHECK(defaults.lr() >= 0 && defaults.rho() >= 0 && defaults.rho() <= 1 && defaults.eps() >= 0 &&
              defaults.weight_decay() >= 0);
}

at::Tensor Adadelta::step(LossClosure closure) {
  at::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const AdadeltaOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      at::Tensor grad = p.grad();
      if (options.weight_decay() != 0) grad = grad.add(p, options.weight_decay());
      auto key = c10::guts::to_string(p.unsafeGetTensorImpl());
      auto found = state_.find(key);
      if (found == state_.end()) {
        auto state = std::make_unique<AdadeltaParamState>();
        state->square_avg(at::zeros_like(p, at::MemoryFormat::Preserve));
        state->acc_delta(at::zeros_like(p, at::MemoryFormat::Preserve));
        found = state_.emplace(key, std::move(state)).first;
      }
      auto& state = static_cast<AdadeltaParamState&>(*found->second);
      state.step(state.step() + 1);
      const double rho = options.rho(), eps = options.eps();
      state.square_avg().mul_(rho).addcmul_(grad, grad, 1 - rho);
      at::Tensor std = state.square_avg().add(eps).sqrt_();
      at::Tensor delta = state.acc_delta().add(eps).sqrt_().div_(std).mul_(grad);
      state.acc_delta().mul_(rho).addcmul_(delta, delta, 1 - rho);
      p.add_(delta, -options.lr());
    }
  }
  return loss;
}

void Adadelta::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<AdadeltaParamState, AdadeltaOptions>(archive, *this);
}

void Adadelta::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<AdadeltaParamState, AdadeltaOptions>(archive, *this);
}

}  // namespace tzrec
