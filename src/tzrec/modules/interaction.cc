#include "tzrec/modules/interaction.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/index.h>
#include <ATen/ops/triu_indices.h>

namespace tzrec {

at::Tensor PairwiseInteraction(const at::Tensor& features) {
  const int64_t n = features.size(1);
  at::Tensor all = at::bmm(features, features.transpose(1, 2));  // [B, N, N]
  at::Tensor upper = at::triu_indices(n, n, 1, at::TensorOptions().dtype(at::kLong));
  // Flatten (i, j) into one index over the N*N products.
  at::Tensor flat_index = upper.select(0, 0) * n + upper.select(0, 1);
  return all.reshape({features.size(0), n * n}).index_select(1, flat_index);
}

}  // namespace tzrec
