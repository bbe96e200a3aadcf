// Batch: the tensors of one step, the only thing that crosses from the input pipeline to the
// model (DESIGN: data -> model boundary).
//
// Built from a ParsedBatch without copying (tensors borrow the reader's vectors and keep them
// alive). Features live in data groups: "__BASE__" holds the batch's own rows; with a negative
// sampler, "__NEG__" holds the item features of the batch's rows followed by the sampled items'
// (force_base_data_group: every feature in "__BASE__", padded to that many rows). Per group:
//   sparse         jagged ids: int64 `values`, int32 `lengths` [rows], int64 `offsets` [rows+1],
//                  float `weights` [values] for weighted features
//   dense          float [rows, value_dim]
//   sequences      sparse sequence features: ids, int32 `step_lengths` [rows] (steps per row),
//                  int32 `key_lengths` [steps] (ids per step) and `key_offsets` [steps+1]
//   dense_sequences float [steps, value_dim] with `step_lengths` [rows]
// Labels and sample weights are float [rows of __BASE__]; reserved columns (predict) are text.
// Immutable once built; tensors may be read from any thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "tzrec/data/data_position.h"
#include "tzrec/data/parsed_batch.h"
#include "tzrec/features/feature.h"

namespace tzrec {

constexpr char kBaseDataGroup[] = "__BASE__";

struct JaggedIds {
  at::Tensor values;   // int64 [N]
  at::Tensor lengths;  // int32 [rows]
  at::Tensor offsets;  // int64 [rows + 1]
  at::Tensor weights;  // float [N] for weighted features (undefined otherwise)
};

struct SequenceIds {
  at::Tensor values;        // int64 [N]
  at::Tensor step_lengths;  // int32 [rows]: steps of each row
  at::Tensor key_lengths;   // int32 [steps]: ids of each step
  at::Tensor key_offsets;   // int64 [steps + 1]
  at::Tensor weights;       // float [N] for weighted features (undefined otherwise)
};

struct DenseSequence {
  at::Tensor values;        // float [steps, dim]
  at::Tensor step_lengths;  // int32 [rows]
};

struct DataGroupBatch {
  int64_t size = 0;
  std::map<std::string, JaggedIds> sparse;
  std::map<std::string, at::Tensor> dense;
  std::map<std::string, SequenceIds> sequences;
  std::map<std::string, DenseSequence> dense_sequences;
};

struct Batch {
  int64_t size = 0;  // rows of __BASE__
  std::map<std::string, DataGroupBatch> data_groups;
  std::map<std::string, at::Tensor> labels;          // float [size]
  std::map<std::string, at::Tensor> sample_weights;  // float [size]
  std::map<std::string, std::vector<std::string>> reserved;
  RowPositions positions;
  // Hard negatives: int64 [n_hard, 2] of (batch row, slot); their item rows are the last
  // n_hard rows of the sampled group (undefined without hard negatives).
  at::Tensor hard_neg_indices;

  const DataGroupBatch& group(const std::string& name) const;
  const DataGroupBatch& base() const { return group(kBaseDataGroup); }
  // The jagged ids of sparse feature `name` in `data_group` (errors name what is missing).
  const JaggedIds& Sparse(const std::string& name, const std::string& data_group = kBaseDataGroup) const;
  const at::Tensor& Dense(const std::string& name, const std::string& data_group = kBaseDataGroup) const;
  const SequenceIds& Sequence(const std::string& name, const std::string& data_group = kBaseDataGroup) const;
  const DenseSequence& DenseSeq(const std::string& name,
                                const std::string& data_group = kBaseDataGroup) const;
  const at::Tensor& Label(const std::string& name) const;
  const at::Tensor& SampleWeight(const std::string& name) const;
};

// Moves a parsed batch into tensors.
Batch ToBatch(ParsedBatch&& parsed);

// `batch` plus, for every feature of `features` it lacks, that feature with `batch.size` empty
// rows in its data group (sparse: no ids; dense: zeros; sequences: no steps): what a retrieval
// tower scored alone reads in place of the other tower's features.
Batch WithEmptyFeatures(const Batch& batch, const std::vector<const Feature*>& features);

// `rows` rows of every feature of `features` with random ids in each table's range (0-3 per
// sparse row, empty rows included), random weights in [0, 2) and random dense values in
// [-1, 1]: inputs that reach every branch of a lookup (scripted-model checks, serving warm-up).
Batch SyntheticBatch(const std::vector<const Feature*>& features, int64_t rows, uint64_t seed);

// The first id of each row of `ids` (0 for rows without ids), as TorchEasyRec's
// to_padded_dense(1)[:, 0]: grouping keys and session ids.
at::Tensor FirstIdPerRow(const JaggedIds& ids);

}  // namespace tzrec
