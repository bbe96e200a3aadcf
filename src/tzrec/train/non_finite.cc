#include "tzrec/train/non_finite.h"

#include <ATen/ops/isinf.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/sum.h>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/kernels/cpu_kernels.h"

namespace tzrec {

bool AllFinite(const at::Tensor& tensor) {
  if (!tensor.defined() || !tensor.is_floating_point()) return true;
  if (tensor.scalar_type() == at::kFloat && tensor.is_contiguous() && tensor.device().is_cpu()) {
    return FirstNonFinite(tensor.data_ptr<float>(), tensor.numel()) < 0;
  }
  return !CountNonFinite(tensor).any();
}

NonFiniteCount CountNonFinite(const at::Tensor& tensor) {
  NonFiniteCount count;
  if (!tensor.defined() || !tensor.is_floating_point()) return count;
  count.nan = at::isnan(tensor).sum().item<int64_t>();
  count.inf = at::isinf(tensor).sum().item<int64_t>();
  return count;
}

std::string Describe(const NonFiniteCount& count) {
  return StrCat(count.nan, " NaN, ", count.inf, " inf");
}

void RequireFiniteGradients(const std::vector<at::Tensor>& params,
                            const std::function<std::string(const at::Tensor&)>& name_of,
                            int64_t step) {
  for (const at::Tensor& param : params) {
    const at::Tensor& grad = param.grad();
    if (!grad.defined() || AllFinite(grad)) continue;
    Fail("step ", step, ": the gradient of ", name_of(param), " has non-finite values (",
         Describe(CountNonFinite(grad)), ") although the loss is finite; training stopped before ",
         "the dense weights were updated, and no checkpoint was written for this step.");
  }
}

}  // namespace tzrec
