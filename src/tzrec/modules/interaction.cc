#include "tzrec/modules/interaction.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>

namespace tzrec {
namespace {

// ATen's bmm here is one small BLAS call per sample (4096 calls with packing for a DLRM
// batch); the products are tiny, so plain loops over the batch are much faster.
struct PairwiseInteractionFunction : public torch::autograd::Function<PairwiseInteractionFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor features) {
    at::Tensor x = features.contiguous();
    const int64_t batch = x.size(0), n = x.size(1), dim = x.size(2);
    const int64_t pairs = n * (n - 1) / 2;
    at::Tensor out = at::empty({batch, pairs}, x.options());
    const float* xp = x.data_ptr<float>();
    float* op = out.data_ptr<float>();
    at::parallel_for(0, batch, 64, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const float* xb = xp + b * n * dim;
        float* ob = op + b * pairs;
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = i + 1; j < n; ++j) {
            float dot = 0.0f;
            for (int64_t d = 0; d < dim; ++d) dot += xb[i * dim + d] * xb[j * dim + d];
            *ob++ = dot;
          }
        }
      }
    });
    ctx->save_for_backward({x});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    at::Tensor x = ctx->get_saved_variables()[0];
    at::Tensor g = grads[0].contiguous();
    const int64_t batch = x.size(0), n = x.size(1), dim = x.size(2);
    const int64_t pairs = n * (n - 1) / 2;
    at::Tensor dx = at::zeros_like(x);
    const float* xp = x.data_ptr<float>();
    const float* gp = g.data_ptr<float>();
    float* dp = dx.data_ptr<float>();
    at::parallel_for(0, batch, 64, [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        const float* xb = xp + b * n * dim;
        const float* gb = gp + b * pairs;
        float* db = dp + b * n * dim;
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t j = i + 1; j < n; ++j) {
            const float w = *gb++;
            for (int64_t d = 0; d < dim; ++d) {
              db[i * dim + d] += w * xb[j * dim + d];
              db[j * dim + d] += w * xb[i * dim + d];
            }
          }
        }
      }
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

}  // namespace tzrec
