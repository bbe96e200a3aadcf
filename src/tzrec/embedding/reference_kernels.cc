// Reference twin of the fused embedding kernels: plain loops written for obviousness, not
// speed. Used by the kernel tests and, with TZREC_EMBEDDING_REFERENCE=1, by whole training
// runs to compare against the fused path.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "tzrec/common/error.h"
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

// 2-byte rows (T: c10::Half for FP16 tables, c10::BFloat16 for BF16): the values at the
// start of each row (row_width floats apart), widened by c10.
template <typename T>
void ReferenceForwardHalf(const float* data, int row_width, int dim,
                          const std::vector<LookupArgs>& lookups, int64_t bags, float* out) {
  ReferencePool(dim, lookups, bags, out, [&](int64_t row, int d) {
    T value;
    std::memcpy(&value.x, reinterpret_cast<const uint16_t*>(data + row * row_width) + d, 2);
    return static_cast<float>(value);
  });
}

// Stochastic rounding to a 2-byte float (T: c10::Half or c10::BFloat16) from its definition:
// find the neighbours of |x| through T's round-to-nearest-even, and round away from zero with
// the probability of |x|'s position between them (in 1/2^random_bits, compared in double where
// it is exact), the random bits as the fused kernels draw them. `beyond_largest` stands for
// infinity, the upper neighbour of T's largest finite value (2^16 for halves, 2^128 for
// bfloat16); from there up the result is infinite.
template <typename T>
uint16_t ReferenceStochastic(float x, uint32_t seed, int d, uint16_t infinity, uint16_t quiet_nan,
                             double beyond_largest, int random_bits) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return sign | quiet_nan;
  const float magnitude = std::fabs(x);
  if (magnitude >= beyond_largest) return sign | infinity;
  const T nearest(magnitude);
  uint16_t below = nearest.x;
  if (static_cast<float>(nearest) > magnitude) --below;
  T low, high;
  low.x = below;
  high.x = static_cast<uint16_t>(below + 1);
  const double low_value = static_cast<float>(low);
  const double high_value = below + 1 == infinity ? beyond_largest : static_cast<double>(static_cast<float>(high));
  const double position = (static_cast<double>(magnitude) - low_value) / (high_value - low_value);
  const uint32_t random = StochasticRoundingRandom(below, seed, static_cast<uint32_t>(d)) >> (32 - random_bits);
  const double steps = std::ldexp(1.0, random_bits);
  const bool up = position * steps + random >= steps;
  return static_cast<uint16_t>(sign | (below + (up ? 1 : 0)));
}

// Halves take 13 random bits, bfloat16s 16 (the fused kernels' choice).
uint16_t ReferenceStochasticHalf(float x, uint32_t seed, int d) {
  return ReferenceStochastic<c10::Half>(x, seed, d, 0x7c00, 0x7e00, 65536.0, 13);
}
uint16_t ReferenceStochasticBf16(float x, uint32_t seed, int d) {
  return ReferenceStochastic<c10::BFloat16>(x, seed, d, 0x7f80, 0x7fc0, std::ldexp(1.0, 128), 16);
}

float Norm(const float* x, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += x[i] * x[i];
  return std::sqrt(sum);
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
  const bool half_rows = storage->half_rows();
  const bool bf16 = storage->row_format() == RowFormat::kBFloat16;
  for (auto& [row, g] : row_grads) {
    float* stored_row = storage->data() + row * storage->row_width();
    float* state = stored_row + storage->state_offset();
    // FP16 / BF16 rows: the optimizer runs on the widened weights, which are rounded back below.
    std::vector<float> wide(half_rows ? dim : 0);
    uint16_t* half = reinterpret_cast<uint16_t*>(stored_row);
    for (int d = 0; d < static_cast<int>(wide.size()); ++d) {
      if (bf16) {
        c10::BFloat16 b;
        b.x = half[d];
        wide[d] = static_cast<float>(b);
      } else {
        c10::Half h;
        h.x = half[d];
        wide[d] = static_cast<float>(h);
      }
    }
    float* w = half_rows ? wide.data() : stored_row;
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
    } else if (spec.kind == Kind::kAdam) {
      float* m = state;
      float* v = state + dim;
      for (int d = 0; d < dim; ++d) {
        m[d] = spec.beta1 * m[d] + (1.0f - spec.beta1) * g[d];
        v[d] = spec.beta2 * v[d] + (1.0f - spec.beta2) * g[d] * g[d];
        float m_hat = m[d] / (1.0f - std::pow(spec.beta1, static_cast<float>(iteration)));
        float v_hat = v[d] / (1.0f - std::pow(spec.beta2, static_cast<float>(iteration)));
        w[d] = w[d] - spec.lr * (m_hat / (std::sqrt(v_hat) + spec.eps) + spec.weight_decay * w[d]);
      }
    } else if (spec.kind == Kind::kLarsSgd) {
      const float w_norm = Norm(w, dim), g_norm = Norm(g.data(), dim);
      const float denominator = g_norm + spec.weight_decay * w_norm;
      const float rate = denominator > 0.0f ? spec.lr * spec.eta * w_norm / denominator : 0.0f;
      for (int d = 0; d < dim; ++d) {
        state[d] = spec.momentum * state[d] + rate * (g[d] + spec.weight_decay * w[d]);
      }
      for (int d = 0; d < dim; ++d) w[d] = w[d] - state[d];
    } else if (spec.kind == Kind::kLamb || spec.kind == Kind::kPartialRowwiseLamb ||
               spec.kind == Kind::kPartialRowwiseAdam) {
      // Second moments: one per element (lamb) or one per row from the mean square gradient.
      const bool per_row = spec.kind != Kind::kLamb;
      float* m = state;
      float* v = state + dim;
      const float bc1 = 1.0f - std::pow(spec.beta1, static_cast<float>(iteration));
      const float bc2 = 1.0f - std::pow(spec.beta2, static_cast<float>(iteration));
      if (per_row) {
        float mean_square = 0.0f;
        for (int d = 0; d < dim; ++d) mean_square += g[d] * g[d];
        v[0] = spec.beta2 * v[0] + (1.0f - spec.beta2) * mean_square / static_cast<float>(dim);
      }
      std::vector<float> direction(dim);
      for (int d = 0; d < dim; ++d) {
        m[d] = spec.beta1 * m[d] + (1.0f - spec.beta1) * g[d];
        if (!per_row) v[d] = spec.beta2 * v[d] + (1.0f - spec.beta2) * g[d] * g[d];
        const float second = per_row ? v[0] : v[d];
        direction[d] = (m[d] / bc1) / (std::sqrt(second / bc2) + spec.eps) + spec.weight_decay * w[d];
      }
      if (spec.kind == Kind::kPartialRowwiseAdam) {
        for (int d = 0; d < dim; ++d) w[d] = w[d] - spec.lr * direction[d];
      } else {
        const float r_norm = Norm(direction.data(), dim);
        const float ratio = r_norm == 0.0f ? 0.0f : Norm(w, dim) / r_norm;  // NaN stays NaN
        for (int d = 0; d < dim; ++d) w[d] = w[d] - spec.lr * ratio * direction[d];
      }
    } else if (spec.kind == Kind::kAdadelta) {
      float* square_avg = state;
      float* acc_delta = state + dim;
      for (int d = 0; d < dim; ++d) {
        const float gd = g[d] + spec.weight_decay * w[d];
        square_avg[d] = spec.rho * square_avg[d] + (1.0f - spec.rho) * gd * gd;
        const float delta = std::sqrt(acc_delta[d] + spec.eps) / std::sqrt(square_avg[d] + spec.eps) * gd;
        acc_delta[d] = spec.rho * acc_delta[d] + (1.0f - spec.rho) * delta * delta;
        w[d] = w[d] - spec.lr * delta;
      }
    } else {
      TZREC_CHECK(spec.kind == Kind::kRmsprop);
      for (int d = 0; d < dim; ++d) {
        const float gd = g[d] + spec.weight_decay * w[d];
        state[d] = spec.alpha * state[d] + (1.0f - spec.alpha) * gd * gd;
        w[d] = w[d] - spec.lr * gd / (std::sqrt(state[d]) + spec.eps);
      }
    }
    for (int d = 0; d < static_cast<int>(wide.size()); ++d) {
      half[d] = bf16 ? ReferenceStochasticBf16(wide[d], RoundingSeedOfStep(iteration), d)
                     : ReferenceStochasticHalf(wide[d], RoundingSeedOfStep(iteration), d);
    }
  }
}

}  // namespace

const PooledLookupKernels& ReferenceKernels() {
  static const PooledLookupKernels kernels{ReferenceForward, ReferenceBackwardUpdate,
                                           ReferenceForwardInt8, ReferenceForwardHalf<c10::Half>,
                                           ReferenceForwardHalf<c10::BFloat16>};
  return kernels;
}

}  // namespace tzrec
