// gen_data's retrieval signal and sampler tables, for configs with a sampler (negative_sampler,
// _v2, hard_negative_sampler, _v2, tdm_sampler; see gen_data.h).
//
// A catalogue of `items` items (ids 1..items, fewer when the item id feature has fewer
// buckets) and `users` users (ids 1..users), each in one of
// `clusters` clusters (id % clusters). Every data row is one user (uniform) and one item: with
// probability in_cluster_rate an item of the user's cluster, else any item. An item's
// attribute columns (the sampler's attr_fields) are drawn once per item and repeated on each of
// its rows, so they agree with the item table; its id column is its id and its first other
// sparse attribute ("category") its cluster + 1. A user's columns (the features of the model's
// user tower, or all non-item features) are drawn once per user, with its id column the user
// id and its second sparse column ("segment") its cluster + 1. A behaviour sequence column of
// an item attribute (named "<sequence>__<attribute>", as TorchEasyRec's sequence features name
// theirs, the attribute an item column) is a history of the user: each step an item of the
// user's cluster with probability in_cluster_rate, else any item, the columns of one sequence
// holding the same items (the drawn row's step count is kept). Other sequence columns stay.
// A model that learns clusters from ids or category and segment ranks the user's cluster
// first: with N uniform negatives the positive is in the cluster with probability
// in_cluster_rate, beside about N / clusters in-cluster negatives.
//
// Tables (GraphLearn formats, tab-separated with a typed header) under <output_dir>/sampler/:
//   item_table.txt      id, weight (1, 2 or 3 by id), attrs in attr_fields order
//   user_table.txt      id, weight 1
//   pos_edge_table.txt  every (user, item) pair of the train and eval rows, once
//   hard_neg_edge_table.txt  3 items per user from the next cluster ((c + 1) % clusters)
// With a tdm_sampler instead: as many items as a binary tree of layer_num_sample's levels holds
// (at most 4096), and their tree (tools/tdm_tree.h, grouped by category) under
// <output_dir>/sampler/tdm_tree/: node_table.txt, edge_table.txt, predict_edge_table.txt.
//
// Thread safety: one thread (the generator's).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tzrec/features/feature.h"
#include "tzrec/fg/feature_info.h"
#include "tzrec/protos/pipeline.pb.h"

namespace tzrec {

struct RetrievalPlanOptions {
  int64_t items = 2000;
  int64_t users = 2000;
  int64_t clusters = 20;
  double in_cluster_rate = 0.9;
};

class RetrievalPlan {
 public:
  using Cells = std::map<std::string, std::string>;
  // Null when the config has no sampler. `columns` are the data
  // columns gen_data writes, `draw_row` draws one ordinary row of them (attribute and profile
  // values). FG_NONE: `infos` may be empty (features read their own column).
  static std::unique_ptr<RetrievalPlan> Create(const protos::EasyRecConfig& config,
                                               const std::vector<std::unique_ptr<Feature>>& features,
                                               const std::vector<fg::FeatureInfo>& infos,
                                               const std::vector<std::string>& columns,
                                               const std::function<Cells(std::mt19937_64&)>& draw_row,
                                               uint64_t seed, RetrievalPlanOptions options = {});

  // Replaces a drawn row's user and item columns by one user and one item of the plan.
  void Apply(std::mt19937_64& rng, Cells* cells);
  // Writes the sampler tables under `dir` (created); returns {table name: path}.
  std::map<std::string, std::string> WriteTables(const std::string& dir) const;

  const RetrievalPlanOptions& options() const { return options_; }
  const std::string& item_id_column() const { return item_id_column_; }
  const std::string& user_id_column() const { return user_id_column_; }

 private:
  RetrievalPlan() = default;

  RetrievalPlanOptions options_;
  bool tdm_ = false;          // a tdm_sampler: the tables are the items' tree
  int64_t tdm_levels_ = 0;    // layer_num_sample's entries
  std::vector<std::string> attr_fields_;
  std::string attr_delimiter_;
  std::string item_id_column_, category_column_;
  std::string user_id_column_, segment_column_;
  std::vector<std::string> item_columns_;  // attr_fields that are data columns
  std::vector<std::string> user_columns_;
  struct HistoryColumn {
    std::string column, attribute, delim;
  };
  // One behaviour sequence's history columns (same steps), by sequence name.
  std::map<std::string, std::vector<HistoryColumn>> histories_;
  std::vector<Cells> item_cells_;  // [items]: item i + 1's attribute columns
  std::vector<Cells> user_cells_;  // [users]
  std::vector<std::vector<int64_t>> cluster_items_;  // item ids per cluster
  std::set<std::pair<int64_t, int64_t>> edges_;     // (user, item) pairs drawn
};

}  // namespace tzrec
