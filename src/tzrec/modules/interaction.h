// DLRM's feature interaction: pairwise dot products of feature vectors.
#pragma once

#include <ATen/core/Tensor.h>

namespace tzrec {

// features [B, N, D] -> [B, N*(N-1)/2]: <f_i, f_j> for i < j, in row-major upper-triangle
// order (as torch.triu_indices(N, N, 1)).
at::Tensor PairwiseInteraction(const at::Tensor& features);

}  // namespace tzrec
