#include "tzrec/optim/fused_adam.h"

#include <ATen/Parallel.h>
#include <c10/util/string_utils.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <cmath>
#include <string>

#include "tzrec/kernels/cpu_kernels.h"

namespace tzrec {
namespace {

bool Fusable(const at::Tensor& p) {
  const at::Tensor& g = p.grad();
  return p.device().is_cpu() && p.scalar_type() == at::kFloat && p.is_contiguous() && !g.is_sparse() &&
         g.scalar_type() == at::kFloat && g.is_contiguous() && g.sizes() == p.sizes();
}

void UpdateParameter(const AdamStepParams& s, bool amsgrad, at::Tensor& p, at::Tensor& exp_avg, at::Tensor& exp_avg_sq,
                     at::Tensor& max_exp_avg_sq) {
  float* w = p.data_ptr<float>();
  const float* g = p.grad().data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  float* vmax = amsgrad ? max_exp_avg_sq.data_ptr<float>() : nullptr;
  const CpuKernels& kernels = ActiveCpuKernels();
  at::parallel_for(0, p.numel(), 16384, [&](int64_t begin, int64_t end) {
    kernels.adam_update(s, w + begin, g + begin, m + begin, v + begin, vmax ? vmax + begin : nullptr, end - begin);
  });
}

// One step over every parameter (Adam or AdamW: their options and state types, and whether the
// weight decay is decoupled).
template <typename OptionsT, typename StateT>
void FusedStep(std::vector<torch::optim::OptimizerParamGroup>& groups,
               ska::flat_hash_map<std::string, std::unique_ptr<torch::optim::OptimizerParamState>>& state,
               bool decoupled) {
  for (auto& group : groups) {
    const auto& options = static_cast<const OptionsT&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const std::string key = c10::guts::to_string(p.unsafeGetTensorImpl());
      auto it = state.find(key);
      if (it == state.end()) {
        auto fresh = std::make_unique<StateT>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        if (options.amsgrad()) fresh->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        it = state.emplace(key, std::move(fresh)).first;
      }
      auto& s = static_cast<StateT&>(*it->second);
      s.step(s.step() + 1);
      const double beta1 = std::get<0>(options.betas()), beta2 = std::get<1>(options.betas());
      const double bias_correction1 = 1 - std::pow(beta1, s.step());
      const double bias_correction2 = 1 - std::pow(beta2, s.step());
      AdamStepParams step;
      step.beta1 = static_cast<float>(beta1);
      step.beta2 = static_cast<float>(beta2);
      step.one_minus_beta1 = static_cast<float>(1 - beta1);
      step.one_minus_beta2 = static_cast<float>(1 - beta2);
      step.eps = static_cast<float>(options.eps());
      step.l2 = decoupled ? 0.0f : static_cast<float>(options.weight_decay());
      step.keep = decoupled ? static_cast<float>(1 - options.lr() * options.weight_decay()) : 1.0f;
      step.sqrt_bc2 = static_cast<float>(std::sqrt(bias_correction2));
      step.neg_step = static_cast<float>(-options.lr() / bias_correction1);
      UpdateParameter(step, options.amsgrad(), p, s.exp_avg(), s.exp_avg_sq(), s.max_exp_avg_sq());
    }
  }
}

// Whether every parameter with a gradient can take the fused pass (else LibTorch's step runs).
bool AllFusable(const std::vector<torch::optim::OptimizerParamGroup>& groups) {
  for (const auto& group : groups) {
    for (const auto& p : group.params()) {
      if (p.grad().defined() && !Fusable(p)) return false;
    }
  }
  return true;
}

}  // namespace

at::Tensor FusedAdam::step(LossClosure closure) {
  if (!AllFusable(param_groups_)) return torch::optim::Adam::step(std::move(closure));
  torch::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  FusedStep<torch::optim::AdamOptions, torch::optim::AdamParamState>(param_groups_, state_, /*decoupled=*/false);
  return loss;
}

at::Tensor FusedAdamW::step(LossClosure closure) {
  if (!AllFusable(param_groups_)) return torch::optim::AdamW::step(std::move(closure));
  torch::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  FusedStep<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(param_groups_, state_, /*decoupled=*/true);
  return loss;
}

}  // namespace tzrec
