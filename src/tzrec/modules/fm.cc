#include "tzrec/modules/fm.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/sum.h>

namespace tzrec {

at::Tensor FactorizationMachine(const at::Tensor& x) {
  at::Tensor sum = at::sum(x, {1});
  at::Tensor sum_of_squares = at::sum(x * x, {1});
  return 0.5 * (sum * sum - sum_of_squares);
}

std::string ScriptFactorizationMachine(ScriptWriter& w, const std::string& x) {
  const std::string sum = w.Let("fm_sum", "torch.sum(" + x + ", 1)");
  const std::string squares = w.Let("fm_sum_of_squares", "torch.sum(" + x + " * " + x + ", 1)");
  return w.Let("fm", "0.5 * (" + sum + " * " + sum + " - " + squares + ")");
}

}  // namespace tzrec
