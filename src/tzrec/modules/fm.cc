#include "tzrec/modules/fm.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/sum.h>

namespace tzrec {

at::Tensor FactorizationMachine(const at::Tensor& x) {
  at::Tensor sum = at::sum(x, {1});
  at::Tensor sum_of_squares = at::sum(x * x, {1});
  return 0.5 * (sum * sum - sum_of_squares);
}

}  // namespace tzrec
