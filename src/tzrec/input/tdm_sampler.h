// TdmSampler: TorchEasyRec's tdm_sampler (data_config.tdm_sampler), in process over the tables
// tdm_init_tree writes (tools/tdm_tree.h), read as the other samplers' tables (sampler.h):
//   node table  id | weight | feature: tree_level, item id, attr_fields... joined by
//               attr_delimiter (TorchEasyRec puts tree_level and the item id before the
//               configured attr_fields when they are not there; so do we); the node -1 (level
//               -1, GraphLearn's entry point) is skipped
//   edge table  src_id | dst_id | weight: each leaf to its ancestors but the root
// For a batch of leaf item ids it draws, per row:
//   positives  the row's ancestors on the kept middle levels, level order (the leaf itself is
//              the row's own positive);
//   negatives  for each kept middle level, then the leaf level, layer_num_sample[level] nodes
//              of that level, weighted by node weight, never the row's own node there and
//              unique within the row and level.
// The middle levels are 1 .. L-2 (L = layer_num_sample's size = the tree's levels); with
// remain_ratio < 1, round(remain_ratio * (L - 2)) of them are kept per batch, drawn without
// replacement with probability_type's weights (UNIFORM; ARITHMETIC: level i by i; RECIPROCAL:
// level i by 1 / (L - 1 - i)). Rows are laid out as TorchEasyRec's expand_tdm_sample wants
// them: all of row 0's positives, then row 1's, ...; the same for negatives.
//
// Built for retrieval (TdmTreeUse::kRetrieve) it reads predict_edge_input_path instead of the
// edge table: each node to its children (the entry node -1 to the root), the tree tdm_retrieval
// walks down; Sample() is not available then.
//
// Thread safety: immutable after construction; Sample() may run on many threads at once, each
// with its own random engine.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tzrec/data/record_batch.h"
#include "tzrec/input/sampler.h"
#include "tzrec/protos/sampler.pb.h"

namespace tzrec {

struct TdmSample {
  std::vector<uint32_t> positives;  // node indices, [rows * positives_per_row]
  std::vector<uint32_t> negatives;  // node indices, [rows * negatives_per_row]
  int64_t positives_per_row = 0;
  int64_t negatives_per_row = 0;
  std::vector<int> kept_levels;  // the middle levels of this batch, ascending
};

enum class TdmTreeUse { kTrain, kRetrieve };

class TdmSampler {
 public:
  // `where` names the config message ("data_config.tdm_sampler").
  TdmSampler(const protos::TDMSampler& config, const std::string& where, TdmTreeUse use = TdmTreeUse::kTrain);

  // `leaf_ids`: each row's item id (a leaf of the tree); fails naming an id that is no leaf.
  TdmSample Sample(const std::vector<int64_t>& leaf_ids, std::mt19937_64& rng) const;

  // Sampled nodes as attribute columns (the attr_fields, tree_level and item id included, that
  // are in `input_columns`), one row per node of `nodes`.
  RecordBatch NodeRows(const std::vector<uint32_t>& nodes, const std::vector<std::string>& input_columns) const;

  // Retrieval: the children of node `index` (node indices, table order); the root's parent is
  // the entry node -1 (`entry_node()`).
  const uint32_t* Children(uint32_t index, size_t* count) const;
  // Index of the entry node -1 (level -1), whose only child is the root.
  uint32_t entry_node() const { return entry_node_; }

  int num_levels() const { return static_cast<int>(layer_num_sample_.size()); }
  // Level of node `index` (-1 for the entry node -1).
  int level(uint32_t index) const { return levels_[index]; }
  const SamplerItemTable& nodes() const { return *nodes_; }
  // tree_level, the item id field, then the configured attr_fields.
  const std::vector<std::string>& attr_fields() const { return attr_fields_; }
  const std::string& item_id_field() const { return item_id_field_; }

 private:
  std::vector<int> KeptLevels(std::mt19937_64& rng) const;

  std::string where_;
  std::string item_id_field_;
  std::vector<std::string> attr_fields_;
  std::vector<int64_t> layer_num_sample_;
  double remain_ratio_ = 1.0;
  std::vector<double> level_probability_;  // middle levels 1 .. L-2
  std::shared_ptr<const SamplerItemTable> nodes_;
  std::shared_ptr<const SamplerEdgeTable> edges_;     // training: leaf -> ancestors
  std::shared_ptr<const SamplerEdgeTable> children_;  // retrieval: parent -> children
  uint32_t entry_node_ = 0;
  std::vector<int> levels_;                         // per node
  std::vector<std::vector<uint32_t>> level_nodes_;  // per level
  std::vector<AliasTable> level_alias_;             // per level, by node weight
};

}  // namespace tzrec
