// torch::optim::Adam and AdamW with the update of each parameter in one pass over its
// elements (weights, gradient and both moments read and written once) instead of LibTorch's
// chain of six to eight tensor ops, each a pass of its own: the same math (torch.optim's
// formulas, L2 or decoupled weight decay, amsgrad) up to float rounding (the chain rounds
// between its ops, the pass fuses multiply-adds). The state (step, exp_avg, exp_avg_sq,
// max_exp_avg_sq) is LibTorch's own, so checkpoints load in either. Parameters that are not
// contiguous fp32 CPU tensors with dense gradients take LibTorch's step. Not thread-safe (one
// training thread steps it; the pass itself runs on the intra-op threads).
#pragma once

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

#include <vector>

namespace tzrec {

class FusedAdam : public torch::optim::Adam {
 public:
  FusedAdam(std::vector<at::Tensor> params, torch::optim::AdamOptions defaults)
      : torch::optim::Adam(std::move(params), std::move(defaults)) {}
  at::Tensor step(LossClosure closure = nullptr) override;
};

class FusedAdamW : public torch::optim::AdamW {
 public:
  FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults)
      : torch::optim::AdamW(std::move(params), std::move(defaults)) {}
  at::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace tzrec
