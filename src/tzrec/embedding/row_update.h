// The per-row sparse optimizer update shared by the fused backward (inline for speed).
#pragma once

#include <cmath>

#include "tzrec/embedding/sparse_optimizer.h"

namespace tzrec {

// Updates one row in place. `row` = [weight(dim) | state]; `g` is the row's summed gradient
// (modified: clipped / weight-decayed). `iteration` is 1-based.
inline void UpdateRow(const SparseOptimizerSpec& spec, float* __restrict row, float* __restrict g,
                      int dim, int64_t iteration, float bias_correction1, float bias_correction2) {
  using Kind = SparseOptimizerSpec::Kind;
  // Hyper-parameters in locals: read through `spec` they could alias the row and would block
  // vectorisation.
  const float lr = spec.lr, eps = spec.eps, beta1 = spec.beta1, beta2 = spec.beta2;
  const float weight_decay = spec.weight_decay;
  if (spec.gradient_clipping) {
    const float m = spec.max_gradient;
    for (int d = 0; d < dim; ++d) g[d] = g[d] > m ? m : (g[d] < -m ? -m : g[d]);
  }
  float* __restrict w = row;
  float* __restrict state = row + dim;
  switch (spec.kind) {
    case Kind::kSgd:
      for (int d = 0; d < dim; ++d) w[d] -= lr * g[d];
      break;
    case Kind::kAdagrad:
      for (int d = 0; d < dim; ++d) {
        const float s = state[d] + g[d] * g[d];
        state[d] = s;
        w[d] -= lr * g[d] / (std::sqrt(s) + eps);
      }
      break;
    case Kind::kRowwiseAdagrad: {
      if (spec.weight_decay_mode == SparseOptimizerSpec::WeightDecayMode::kL2) {
        for (int d = 0; d < dim; ++d) g[d] += weight_decay * w[d];
      }
      float square_sum = 0.0f;
      for (int d = 0; d < dim; ++d) square_sum += g[d] * g[d];
      state[0] += square_sum / static_cast<float>(dim);
      const float step = lr / (std::sqrt(state[0]) + eps);
      const float keep =
          spec.weight_decay_mode == SparseOptimizerSpec::WeightDecayMode::kDecouple
              ? 1.0f - lr * weight_decay
              : 1.0f;
      for (int d = 0; d < dim; ++d) w[d] = keep * w[d] - step * g[d];
      break;
    }
    case Kind::kAdam: {
      float* __restrict m = state;
      float* __restrict v = state + dim;
      for (int d = 0; d < dim; ++d) {
        m[d] = beta1 * m[d] + (1.0f - beta1) * g[d];
        v[d] = beta2 * v[d] + (1.0f - beta2) * g[d] * g[d];
        const float m_hat = m[d] / bias_correction1;
        const float v_hat = v[d] / bias_correction2;
        w[d] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + weight_decay * w[d]);
      }
      break;
    }
  }
  (void)iteration;
}

}  // namespace tzrec
