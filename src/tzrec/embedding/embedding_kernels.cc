#include "tzrec/embedding/embedding_kernels.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <cstring>

namespace tzrec {

void PooledLookupForward(const float* weight, int64_t rows, int dim, const int64_t* values,
                         const int64_t* offsets, int64_t num_bags, bool mean, float* out) {
  at::parallel_for(0, num_bags, 256, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      float* dst = out + b * dim;
      std::memset(dst, 0, sizeof(float) * dim);
      const int64_t first = offsets[b], last = offsets[b + 1];
      for (int64_t i = first; i < last; ++i) {
        if (i + 4 < last) __builtin_prefetch(weight + values[i + 4] * dim);
        const float* row = weight + values[i] * dim;
        for (int d = 0; d < dim; ++d) dst[d] += row[d];
      }
      if (mean && last > first) {
        const float scale = 1.0f / static_cast<float>(last - first);
        for (int d = 0; d < dim; ++d) dst[d] *= scale;
      }
    }
  });
  (void)rows;
}

void AdagradUpdateRows(float* weight, float* sum, int dim, const int64_t* ids, int64_t count,
                       const float* grads, float lr, float eps) {
  // Ids are distinct, so rows never race.
  at::parallel_for(0, count, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (i + 4 < end) {
        __builtin_prefetch(weight + ids[i + 4] * dim);
        __builtin_prefetch(sum + ids[i + 4] * dim);
      }
      float* w = weight + ids[i] * dim;
      float* s = sum + ids[i] * dim;
      const float* g = grads + i * dim;
      for (int d = 0; d < dim; ++d) {
        s[d] += g[d] * g[d];
        w[d] -= lr * g[d] / (std::sqrt(s[d]) + eps);
      }
    }
  });
}

void SgdUpdateRows(float* weight, int dim, const int64_t* ids, int64_t count, const float* grads,
                   float lr) {
  at::parallel_for(0, count, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      float* w = weight + ids[i] * dim;
      const float* g = grads + i * dim;
      for (int d = 0; d < dim; ++d) w[d] -= lr * g[d];
    }
  });
}

}  // namespace tzrec
