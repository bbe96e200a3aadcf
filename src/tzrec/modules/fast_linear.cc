#include "tzrec/modules/fast_linear.h"

#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/sum.h>
#include <oneapi/dnnl/dnnl.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "tzrec/common/error.h"
#include "tzrec/kernels/cpu_kernels.h"

namespace tzrec {
namespace {

// Row-major C[M,N] = op(A) op(B) (+ C when accumulate).
void Sgemm(char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, const float* a,
           int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  dnnl_status_t status =
      dnnl_sgemm(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  TZREC_CHECK(status == dnnl_success, "dnnl_sgemm failed with status ", status);
}

struct FastLinearFunction : public torch::autograd::Function<FastLinearFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor x, at::Tensor weight,
                            c10::optional<at::Tensor> maybe_bias, bool relu) {
    // Optional because autograd cannot take an undefined tensor as an input.
    at::Tensor bias = maybe_bias.has_value() ? *maybe_bias : at::Tensor();
    const int64_t batch = x.size(0), in = x.size(1), out = weight.size(0);
    at::Tensor y = at::empty({batch, out}, x.options());
    float* yp = y.data_ptr<float>();
    if (batch > 0) {
      Sgemm('N', 'T', batch, out, in, x.data_ptr<float>(), in, weight.data_ptr<float>(), in, yp,
            out);
    }
    const float* bp = bias.defined() ? bias.data_ptr<float>() : nullptr;
    if (bp || relu) {
      const CpuKernels& kernels = ActiveCpuKernels();
      at::parallel_for(0, batch, 256, [&](int64_t begin, int64_t end) {
        kernels.add_bias_relu(yp + begin * out, bp, end - begin, out, relu);
      });
    }
    ctx->save_for_backward({x, weight, relu ? y : at::Tensor()});
    ctx->saved_data["relu"] = relu;
    ctx->saved_data["has_bias"] = bias.defined();
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    at::Tensor x = saved[0], weight = saved[1], y = saved[2];
    const bool relu = ctx->saved_data["relu"].toBool();
    const int64_t batch = x.size(0), in = x.size(1), out = weight.size(0);
    at::Tensor dz = grads[0].contiguous();
    if (relu) {
      // dz = dy * (y > 0), written into a fresh buffer (grads may be shared).
      at::Tensor masked = at::empty_like(dz);
      const float* g = dz.data_ptr<float>();
      const float* yp = y.data_ptr<float>();
      float* m = masked.data_ptr<float>();
      const CpuKernels& kernels = ActiveCpuKernels();
      at::parallel_for(0, batch * out, 65536, [&](int64_t begin, int64_t end) {
        kernels.relu_mask(yp + begin, g + begin, m + begin, end - begin);
      });
      dz = masked;
    }
    at::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) {
      dx = at::empty({batch, in}, x.options());
      if (batch > 0) {
        Sgemm('N', 'N', batch, in, out, dz.data_ptr<float>(), out, weight.data_ptr<float>(), in,
              dx.data_ptr<float>(), in);
      } else {
        dx.zero_();
      }
    }
    if (ctx->needs_input_grad(1)) {
      dw = at::empty({out, in}, weight.options());
      if (batch > 0) {
        Sgemm('T', 'N', out, in, batch, dz.data_ptr<float>(), out, x.data_ptr<float>(), in,
              dw.data_ptr<float>(), in);
      } else {
        dw.zero_();
      }
    }
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) {
      db = at::sum(dz, {0});
    }
    return {dx, dw, db, at::Tensor()};
  }
};

}  // namespace

bool FastLinearEnabled() {
  static const bool enabled = [] {
    const char* flag = std::getenv("TZREC_FAST_LINEAR");
    return !(flag && std::strcmp(flag, "0") == 0);
  }();
  return enabled;
}

at::Tensor FastLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      bool relu) {
  const bool eligible =
      FastLinearEnabled() && x.dim() == 2 && x.scalar_type() == at::kFloat &&
      weight.scalar_type() == at::kFloat && x.device().is_cpu() && x.is_contiguous() &&
      weight.is_contiguous() && (!bias.defined() || bias.is_contiguous());
  if (!eligible) {
    at::Tensor y = at::linear(x, weight, bias);
    return relu ? at::relu(y) : y;
  }
  return FastLinearFunction::apply(
      x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt, relu);
}

}  // namespace tzrec
