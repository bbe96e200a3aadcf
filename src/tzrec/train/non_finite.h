// Finiteness checks of tensors: the trainer's per-step gradient check and the checkpoint
// writer's and loader's weight checks. Thread-safe (read-only).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

namespace tzrec {

// Number of NaN and +-inf values of a tensor (any dtype; integers are always finite). Float
// tensors are scanned in place, without the bool copy at::isfinite would allocate.
struct NonFiniteCount {
  int64_t nan = 0;
  int64_t inf = 0;
  bool any() const { return nan + inf > 0; }
};
bool AllFinite(const at::Tensor& tensor);
NonFiniteCount CountNonFinite(const at::Tensor& tensor);
// "3 NaN, 1 inf" for messages.
std::string Describe(const NonFiniteCount& count);

// The trainer's dense-gradient guard, run after backward (and the gradient allreduce) and
// before the dense optimizer step: fails naming `step` and the first parameter whose gradient
// holds NaN or inf (its name from `name_of`, asked only then). Undefined gradients pass.
void RequireFiniteGradients(const std::vector<at::Tensor>& params,
                            const std::function<std::string(const at::Tensor&)>& name_of,
                            int64_t step);

}  // namespace tzrec
