#include "tzrec/modules/interaction.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/tensor.h>
#include <torch/csrc/autograd/custom_function.h>

#include <vector>

#include "tzrec/kernels/cpu_kernels.h"

namespace tzrec {
namespace {

// ATen's bmm here is one small BLAS call per sample (4096 calls with packing for a DLRM
// batch); the products are tiny, so per-sample loops (cpu_kernels.h) are much faster.
struct PairwiseInteractionFunction : public torch::autograd::Function<PairwiseInteractionFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor features) {
    RECORD_USER_SCOPE("tzrec::pairwise_interaction");  // named in is_profiling traces
    at::Tensor x = features.contiguous();
    const int64_t batch = x.size(0);
    const int n = static_cast<int>(x.size(1)), dim = static_cast<int>(x.size(2));
    at::Tensor out = at::empty({batch, static_cast<int64_t>(n) * (n - 1) / 2}, x.options());
    const float* xp = x.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const CpuKernels& kernels = ActiveCpuKernels();
    at::parallel_for(0, batch, 64, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(InteractionScratch(n, dim));
      kernels.interaction_forward(xp, n, dim, begin, end, op, scratch.data());
    });
    ctx->save_for_backward({x});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::Tensor x = ctx->get_saved_variables()[0];
    at::Tensor g = grads[0].contiguous();
    const int64_t batch = x.size(0);
    const int n = static_cast<int>(x.size(1)), dim = static_cast<int>(x.size(2));
    at::Tensor dx = at::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const float* gp = g.data_ptr<float>();
    float* dp = dx.data_ptr<float>();
    const CpuKernels& kernels = ActiveCpuKernels();
    at::parallel_for(0, batch, 64, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(InteractionScratch(n, dim));
      kernels.interaction_backward(xp, gp, n, dim, begin, end, dp, scratch.data());
    });
    return {dx};
  }
};

}  // namespace

at::Tensor PairwiseInteraction(const at::Tensor& features) {
  TORCH_CHECK(features.dim() == 3 && features.scalar_type() == at::kFloat,
              "PairwiseInteraction expects float [B, N, D]");
  return PairwiseInteractionFunction::apply(features);
}

std::string ScriptPairwiseInteraction(ScriptWriter& w, const std::string& features, int64_t n) {
  // Every dot product, then the upper triangle's entries of the flattened [N, N] products.
  std::vector<int64_t> upper;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) upper.push_back(i * n + j);
  }
  const std::string index =
      w.Tensor("interaction_index", at::tensor(upper, at::TensorOptions().dtype(at::kLong)));
  const std::string products = w.Let("products", "torch.bmm(" + features + ", " + features + ".transpose(1, 2))");
  return w.Let("interaction", products + ".reshape([-1, " + std::to_string(n * n) + "]).index_select(1, " +
                                  index + ")");
}

}  // namespace tzrec
