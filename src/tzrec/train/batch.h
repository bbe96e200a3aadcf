// Batch: the tensors of one step, the only thing that crosses from data to model.
//
// Built from a ParsedBatch without copying (tensors borrow the vectors and keep them alive).
// Sparse features are jagged: int64 `values`, int32 `lengths` [B] and int64 `offsets` [B+1].
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "tzrec/data/parsed_batch.h"

namespace tzrec {

struct JaggedIds {
  at::Tensor values;   // int64 [N]
  at::Tensor lengths;  // int32 [B]
  at::Tensor offsets;  // int64 [B + 1]
  at::Tensor weights;  // float [N] for weighted features (undefined when the batch has none)
};

struct Batch {
  int64_t size = 0;
  std::map<std::string, JaggedIds> sparse;          // by feature name
  std::map<std::string, at::Tensor> dense;          // float [B, dim]
  std::map<std::string, at::Tensor> labels;         // float [B]
  std::map<std::string, at::Tensor> sample_weights; // float [B]
};

Batch ToBatch(ParsedBatch&& parsed);

}  // namespace tzrec
