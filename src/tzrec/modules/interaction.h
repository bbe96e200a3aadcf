// DLRM's feature interaction: pairwise dot products of feature vectors.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "tzrec/script/script_writer.h"

namespace tzrec {

// features [B, N, D] -> [B, N*(N-1)/2]: <f_i, f_j> for i < j, in row-major upper-triangle
// order (as torch.triu_indices(N, N, 1)).
at::Tensor PairwiseInteraction(const at::Tensor& features);
// The same as TorchScript over local `features` of N vectors; returns the output local.
std::string ScriptPairwiseInteraction(ScriptWriter& w, const std::string& features, int64_t n);

}  // namespace tzrec
