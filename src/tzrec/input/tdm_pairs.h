// TdmPairs: rows that pair rows of a batch (their user side) with tree nodes (the item side),
// as TDM trains (each row with its ancestors and per-level negatives; Dataset) and retrieves
// (each user with a level's candidate nodes; tdm_retrieval). The item features are those that
// read the tdm_sampler's attribute columns (directly or through FG_DAG producers); they are
// generated from the nodes' attributes with the same feature code as the data's. Every other
// feature, label, sample weight and reserved column repeats its row. A feature reading both
// node attributes and other columns is an error: a node has no user columns.
//
// Thread safety: immutable after construction; all methods may run on many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tzrec/data/parsed_batch.h"
#include "tzrec/features/feature.h"
#include "tzrec/fg/feature_generator.h"
#include "tzrec/input/tdm_sampler.h"

namespace tzrec {

class TdmPairs {
 public:
  // `features`: every feature of the pipeline (they must outlive this); `generator`: null for
  // FG_NONE; `input_columns`: the raw columns the features read; `where` names the sampler's
  // config message in errors.
  TdmPairs(std::shared_ptr<const TdmSampler> sampler, const std::vector<const Feature*>& features,
           std::shared_ptr<const fg::FeatureGenerator> generator, std::vector<std::string> input_columns,
           const std::string& where);

  const TdmSampler& sampler() const { return *sampler_; }
  const std::vector<const Feature*>& item_features() const { return item_features_; }

  // The item features of `nodes` (node indices), one row per node.
  ParsedBatch NodeFeatures(const std::vector<uint32_t>& nodes) const;
  // Row i is row `rows[i]` of `batch` with row i of `items` (NodeFeatures rows) as its item
  // features; `items` has rows.size() rows.
  ParsedBatch Pair(const ParsedBatch& batch, const std::vector<int64_t>& rows, ParsedBatch items) const;

 private:
  std::shared_ptr<const TdmSampler> sampler_;
  std::shared_ptr<const fg::FeatureGenerator> generator_;
  std::vector<std::string> input_columns_;
  std::vector<const Feature*> item_features_;
};

}  // namespace tzrec
