// Pooled embedding lookup as a LibTorch autograd function.
//
// Forward pools table rows per bag; backward records the bag gradients in the table for the
// sparse optimizer and returns no dense gradient, so models stay ordinary torch::nn code
// while tables never get a [rows, dim] gradient.
#pragma once

#include <ATen/core/Tensor.h>

#include "tzrec/embedding/embedding_table.h"

namespace tzrec {

// Returns [num_bags, dim]. `values` int64 ids, `offsets` int64 [num_bags + 1].
// When `track_gradient` is false (eval, frozen), no autograd node is recorded.
at::Tensor PooledLookup(EmbeddingTable* table, const at::Tensor& values, const at::Tensor& offsets,
                        bool mean, bool track_gradient);

}  // namespace tzrec
