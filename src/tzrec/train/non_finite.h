// Finiteness checks of tensors: the trainer's per-step gradient check and the checkpoint
// writer's and loader's weight checks. Thread-safe (read-only).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

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

}  // namespace tzrec
