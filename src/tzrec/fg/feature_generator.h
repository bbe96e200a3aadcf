// Feature generation (FG): raw input columns -> encoded features, for training, evaluation,
// prediction and serving alike (no LibTorch).
//
// A FeatureGenerator is built once from the feature configs and fg_mode:
//   FG_NORMAL     each feature from its raw inputs (`feature:` inputs are data columns)
//   FG_DAG        `feature:x` inputs are the outputs of feature x, evaluated in dependency
//                 order (cycles and unknown features are errors); stub_type features are
//                 computed for their consumers but not emitted
//   FG_BUCKETIZE  each feature's column holds its value before bucketizing; only the
//                 bucketizer runs
// Generate turns one RecordBatch into the encoded features of a ParsedBatch: sparse features
// as jagged ids (with weights for `weighted`, and steps/key lengths for sequences), dense ones
// as [rows, value_dim] floats. Per value: the feature's op (id, raw, combo, lookup, match,
// expr, overlap, tokenize, kv_dot_product, bool_mask, combine), then `default_value` when
// the op yields nothing, then the bucketizer (sparse) or the normalizer (dense; defaults are
// not normalized, as in TorchEasyRec). A one-row input column broadcasts over the batch.
//
// Thread safety: immutable after construction; Generate may run concurrently.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tzrec/data/parsed_batch.h"
#include "tzrec/data/record_batch.h"
#include "tzrec/fg/feature_info.h"

namespace tzrec::fg {

class FeatureOp;

class FeatureGenerator {
 public:
  // `features` as DescribeFeatures returns them for the same fg_mode (not FG_NONE).
  // `threads` > 1 (data_config.fg_threads) splits each batch's rows over that many threads.
  FeatureGenerator(std::vector<FeatureInfo> features, protos::FgMode fg_mode,
                   std::string encoded_multival_sep = "\x03", int threads = 1);
  ~FeatureGenerator();

  // Raw data columns the features read (each once, in first-use order).
  const std::vector<std::string>& input_columns() const { return input_columns_; }
  // Features in evaluation order.
  const std::vector<FeatureInfo>& features() const { return features_; }

  // Adds every non-stub feature of `batch` to `out` (`out->size` is left to the caller).
  // Errors name the file and line of the row, the feature and its config path.
  void Generate(const RecordBatch& batch, ParsedBatch* out) const;

 private:
  // Rows [begin, end) of `batch` (a one-row column still broadcasts over the whole batch).
  void GenerateRows(const RecordBatch& batch, size_t begin, size_t end, ParsedBatch* out) const;

  std::vector<FeatureInfo> features_;
  std::vector<std::unique_ptr<FeatureOp>> ops_;
  // Per feature and input: index of the producing feature (FG_DAG `feature:` inputs) or -1.
  std::vector<std::vector<int>> producers_;
  std::vector<bool> consumed_;  // some later feature reads this feature's output
  protos::FgMode fg_mode_;
  std::string encoded_sep_;
  std::vector<std::string> input_columns_;
  int threads_ = 1;
};

}  // namespace tzrec::fg
