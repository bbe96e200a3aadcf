// A batch of parsed features and labels in plain C++ vectors (no LibTorch).
//
// This is what reader threads produce; the trainer turns it into tensors (train/batch.h)
// without copying. Sparse features are jagged: `values` holds the ids of all rows back to
// back and `lengths[i]` how many belong to row i.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tzrec/data/data_position.h"

namespace tzrec {

struct SparseValues {
  std::vector<int64_t> values;
  std::vector<int32_t> lengths;  // per row: ids, or for sequences: steps
  std::vector<float> weights;    // weighted features: one per value (else empty)
  // Sequence features: ids per step (lengths[i] steps of row i, key_lengths[j] ids of step j).
  std::vector<int32_t> key_lengths;
  bool sequence = false;  // a sequence feature: `lengths` count steps, `key_lengths` ids per step
  void Append(const SparseValues& other) {
    sequence = sequence || other.sequence;
    values.insert(values.end(), other.values.begin(), other.values.end());
    lengths.insert(lengths.end(), other.lengths.begin(), other.lengths.end());
    weights.insert(weights.end(), other.weights.begin(), other.weights.end());
    key_lengths.insert(key_lengths.end(), other.key_lengths.begin(), other.key_lengths.end());
  }
};

struct DenseValues {
  int32_t dim = 1;
  std::vector<float> values;  // row-major [rows, dim]; sequences: [steps, dim]
  std::vector<int32_t> lengths;  // sequence features only: steps per row
  bool sequence = false;         // a sequence feature
  void Append(const DenseValues& other) {
    sequence = sequence || other.sequence;
    values.insert(values.end(), other.values.begin(), other.values.end());
    lengths.insert(lengths.end(), other.lengths.begin(), other.lengths.end());
  }
};

struct ParsedBatch {
  int64_t size = 0;
  std::map<std::string, SparseValues> sparse;     // by feature name
  std::map<std::string, DenseValues> dense;       // by feature name
  std::map<std::string, std::vector<float>> labels;          // by label field
  std::map<std::string, std::vector<float>> sample_weights;  // by weight field
  // Input columns passed through untouched as text (predict's reserved columns), by name.
  std::map<std::string, std::vector<std::string>> reserved;
  RowPositions positions;  // where each row came from (exact resume)
  // Integer id columns a negative sampler reads (item_id_field, user_id_field), one per row;
  // consumed when the sampler runs.
  std::map<std::string, std::vector<int64_t>> id_columns;
  // After sampling: features of `sampled_group` hold `size + sampled_rows` rows (the batch's,
  // then the sampled items'); "__BASE__" when force_base_data_group pads every feature.
  int64_t sampled_rows = 0;
  std::string sampled_group;
  std::vector<std::string> sampled_features;
  // Hard negatives: (batch row, slot) pairs, flattened; their rows are the last sampled ones.
  std::vector<int32_t> hard_neg_indices;

  // Appends all rows of `other` (which must have the same keys). Neither may have sampled rows.
  void Append(const ParsedBatch& other);
  // Moves rows [begin, end) into a new batch.
  ParsedBatch Slice(int64_t begin, int64_t end) const;
  // A new batch of rows `rows` (any order, repeats allowed) of features, labels, sample weights
  // and reserved columns; no positions or id columns. Not for batches with sampled rows.
  ParsedBatch TakeRows(const std::vector<int64_t>& rows) const;
};

}  // namespace tzrec
