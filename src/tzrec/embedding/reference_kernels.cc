// Reference twin of the fused embedding kernels: plain loops written for obviousness, not
// speed. Used by the kernel tests and, with TZREC_EMBEDDING_REFERENCE=1, by whole training
// runs to compare against the fused path.
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "tzrec/embedding/fused_lookup.h"

namespace tzrec {
namespace {

// Pooling over bags, with `value(row, d)` the d-th value of storage row `row`.
template <typename RowValue>
void ReferencePool(int dim, const std::vector<LookupArgs>& lookups, int64_t bags, float* out,
                   const RowValue& value) {
  const int64_t out_width = static_cast<int64_t>(lookups.size()) * dim;
  for (int64_t b = 0; b < bags; ++b) {
    for (size_t k = 0; k < lookups.size(); ++k) {
      const LookupArgs& l = lookups[k];
      for (int d = 0; d < dim; ++d) {
        float sum = 0.0f;
        for (int64_t i = l.offsets[b]; i < l.offsets[b + 1]; ++i) {
          sum += (l.weights ? l.weights[i] : 1.0f) * value(l.first_row + l.values[i], d);
        }
        const int64_t count = l.offsets[b + 1] - l.offsets[b];
        out[b * out_width + k * dim + d] = (l.mean && count > 0) ? sum / count : sum;
      }
    }
  }
}

void ReferenceForward(const float* data, int row_width, int dim,
                      const std::vector<LookupArgs>& lookups, int64_t bags, float* out) {
  ReferencePool(dim, lookups, bags, out,
                [&](int64_t row, int d) { return data[row * row_width + d]; });
}

// INT8 row-wise rows: each code dequantised as code * scale + bias (fp16 scale and bias read
// through c10::Half).
void ReferenceForwardInt8(const uint8_t* data, int64_t row_bytes, int dim,
                          const std::vector<LookupArgs>& lookups, int64_t bags, float* out) {
  ReferencePool(dim, lookups, bags, out, [&](int64_t row, int d) {
    const uint8_t* bytes = data + row * row_bytes;
    c10::Half scale, bias;
    std::memcpy(&scale.x, bytes + dim, 2);
    std::memcpy(&bias.x, bytes + dim + 2, 2);
    return static_cast<float>(bytes[d]) * static_cast<float>(scale) + static_cast<float>(bias);
  });
}

void ReferenceBackwardUpdate(EmbeddingStorage* storage, const std::vector<LookupArgs>& lookups,
                             int64_t bags, const float* grad, int64_t iteration) {
  const int dim = storage->dim();
  // Lookups without a layout of their own share [bags, shared * dim], in order.
  int64_t shared = 0;
  for (const LookupArgs& l : lookups) shared += l.own_bags < 0 ? 1 : 0;
  const int64_t out_width = shared * dim;
  // Gradient of every touched row, summed in the order lookups, bags, ids.
  std::map<int64_t, std::vector<float>> row_grads;
  int64_t shared_index = -1;
  for (size_t k = 0; k < lookups.size(); ++k) {
    const LookupArgs& l = lookups[k];
    if (l.own_bags < 0) ++shared_index;
    if (!l.trainable) continue;
    const int64_t lookup_bags = l.own_bags >= 0 ? l.own_bags : bags;
    for (int64_t b = 0; b < lookup_bags; ++b) {
      const int64_t count = l.offsets[b + 1] - l.offsets[b];
      const float* bag_grad =
          l.own_bags >= 0 ? l.own_grad + b * l.own_grad_stride : grad + b * out_width + shared_index * dim;
      for (int64_t i = l.offsets[b]; i < l.offsets[b + 1]; ++i) {
        std::vector<float>& g = row_grads[l.first_row + l.values[i]];
        g.resize(dim, 0.0f);
        for (int d = 0; d < dim; ++d) {
          float upstream = bag_grad[d] * (l.weights ? l.weights[i] : 1.0f);
          g[d] += l.mean ? upstream * (1.0f / static_cast<float>(count)) : upstream;
        }
      }
    }
  }
  const SparseOptimizerSpec& spec = storage->optimizer().spec();
  using Kind = SparseOptimizerSpec::Kind;
  using Mode = SparseOptimizerSpec::WeightDecayMode;
  for (auto& [row, g] : row_grads) {
    float* w = storage->data() + row * storage->row_width();
    float* state = w + dim;
    if (spec.gradient_clipping) {
      // Comparisons, not fmin/fmax: NaN stays NaN (as torch.clamp), never clipped into range.
      for (float& x : g) x = x > spec.max_gradient ? spec.max_gradient : (x < -spec.max_gradient ? -spec.max_gradient : x);
    }
    if (spec.kind == Kind::kSgd) {
      for (int d = 0; d < dim; ++d) w[d] = w[d] - spec.lr * g[d];
    } else if (spec.kind == Kind::kAdagrad) {
      for (int d = 0; d < dim; ++d) {
        state[d] = state[d] + g[d] * g[d];
        w[d] = w[d] - spec.lr * g[d] / (std::sqrt(state[d]) + spec.eps);
      }
    } else if (spec.kind == Kind::kRowwiseAdagrad) {
      if (spec.weight_decay_mode == Mode::kL2) {
        for (int d = 0; d < dim; ++d) g[d] = g[d] + spec.weight_decay * w[d];
      }
      float mean_square = 0.0f;
      for (int d = 0; d < dim; ++d) mean_square += g[d] * g[d];
      mean_square /= static_cast<float>(dim);
      state[0] = state[0] + mean_square;
      for (int d = 0; d < dim; ++d) {
        if (spec.weight_decay_mode == Mode::kDecouple) w[d] = w[d] - spec.lr * spec.weight_decay * w[d];
        w[d] = w[d] - spec.lr * g[d] / (std::sqrt(state[0]) + spec.eps);
      }
    } else {
      float* m = state;
      float* v = state + dim;
      for (int d = 0; d < dim; ++d) {
        m[d] = spec.beta1 * m[d] + (1.0f - spec.beta1) * g[d];
        v[d] = spec.beta2 * v[d] + (1.0f - spec.beta2) * g[d] * g[d];
        float m_hat = m[d] / (1.0f - std::pow(spec.beta1, static_cast<float>(iteration)));
        float v_hat = v[d] / (1.0f - std::pow(spec.beta2, static_cast<float>(iteration)));
        w[d] = w[d] - spec.lr * (m_hat / (std::sqrt(v_hat) + spec.eps) + spec.weight_decay * w[d]);
      }
    }
  }
}

}  // namespace

const PooledLookupKernels& ReferenceKernels() {
  static const PooledLookupKernels kernels{ReferenceForward, ReferenceBackwardUpdate,
                                           ReferenceForwardInt8};
  return kernels;
}

}  // namespace tzrec
