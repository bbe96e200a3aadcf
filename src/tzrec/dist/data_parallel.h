// Data-parallel training over a ProcessGroup: every rank trains on its own rows, and after
// each backward the gradients are combined so all ranks apply the same update and keep
// identical parameters — the result equals one process training on the concatenated global
// batch (up to float summation order).
//   dense parameters: gradients summed over ranks with one flattened allreduce, / world size
//   embedding tables: each rank's touched rows and summed gradients are all-gathered and
//                     merged (fused_lookup.h SparseGradientExchange), / world size
// Each rank's loss is the mean over its local batch, hence the division by the world size.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "tzrec/dist/process_group.h"

namespace tzrec {

// The SparseGradientExchange for `pg` (see embedding/fused_lookup.h).
void ExchangeSparseGradients(ProcessGroup& pg, at::Tensor* rows, at::Tensor* grads);
// Replaces each parameter's gradient by the mean over ranks (undefined gradients count as 0).
void AllReduceDenseGradients(ProcessGroup& pg, const std::vector<at::Tensor>& params);
// Copies rank 0's values into every rank's `params` (identical start).
void BroadcastParameters(ProcessGroup& pg, const std::vector<at::Tensor>& params);

}  // namespace tzrec
