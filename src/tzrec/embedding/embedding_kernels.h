// Plain loops for embedding lookup and row updates on raw pointers (no tensors, no autograd).
//
// Kept separate so they compile with -O3 -fno-math-errno and can be checked one by one
// against the reference loops in tests. Thread-safe for disjoint outputs.
#pragma once

#include <cstdint>

namespace tzrec {

// out[b] = sum (or mean) of weight rows values[offsets[b] .. offsets[b+1]); empty bags give 0.
void PooledLookupForward(const float* weight, int64_t rows, int dim, const int64_t* values,
                         const int64_t* offsets, int64_t num_bags, bool mean, float* out);

// Exact (per-element) Adagrad on selected rows, as FBGEMM's EXACT_ADAGRAD:
//   sum += g*g;  w -= lr * g / (sqrt(sum) + eps)
void AdagradUpdateRows(float* weight, float* sum, int dim, const int64_t* ids, int64_t count,
                       const float* grads, float lr, float eps);

// w -= lr * g on selected rows.
void SgdUpdateRows(float* weight, int dim, const int64_t* ids, int64_t count, const float* grads,
                   float lr);

}  // namespace tzrec
