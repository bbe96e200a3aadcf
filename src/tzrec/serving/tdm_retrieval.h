// `tzrec tdm_retrieval` (TorchEasyRec's tzrec.tools.tdm.retrieval): recalls items for users by
// beam search down a TDM tree with an exported TDM ranker (export_dir/model).
//
// The tree is the tdm_sampler's of the export's pipeline.config: its node table and
// predict_edge_input_path (each node to its children). With n = n_cluster and k = recall_num,
// the walk starts at level f, the smallest with n^f >= 2*n*k (TorchEasyRec's
// ceil(log_n(2*n*k)), computed in integers): every node there is a candidate of every user. On
// each level the ranker scores each user with each candidate (the user's row with the node's
// item features, generated from the node's attributes as in training; tdm_pairs.h) and keeps
// the 2*k most probable (probs1 for num_class 2, else probs); their children are the next
// level's candidates. On the leaf level the k most probable leaves are the user's recall_ids,
// best first. Ties keep candidate order, so a run is deterministic.
//
// Output: part-<rank>.<csv|parquet> in predict_output_path with the reserved columns and
// recall_ids (Parquet LIST<INT64>; CSV "id,id,..."); the input's item_id_field (the user's
// actual item) gives the logged recall: the share of users whose item is among their
// recall_ids. Each rank reads its share of the input; parts appear only when every rank
// succeeded. Not thread-safe: one retrieval per process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tzrec {

struct TdmRetrievalOptions {
  std::string scripted_model_path;  // a TDM export's model/ directory
  std::string predict_input_path;
  std::string predict_output_path;
  int64_t recall_num = 200;
  int n_cluster = 2;
  std::string reserved_columns;  // comma-separated input columns copied to the output
  int64_t batch_size = 0;        // users per batch; 0: data_config.batch_size
  int predict_threads = 0;       // intra-op threads of the forward; 0: the runtime's default
  std::string dataset_type;      // default: data_config.dataset_type
  std::string writer_type;       // CsvWriter / ParquetWriter; default from the dataset type
  std::string edit_config_json;  // applied to the export's pipeline.config
};

struct TdmRetrievalResult {
  int64_t users = 0;  // over every rank
  int64_t hits = 0;   // users whose item_id_field is among their recall_ids
  double recall() const { return users > 0 ? static_cast<double>(hits) / users : 0.0; }
};

// The level the beam search starts on: the smallest f with n_cluster^f >= 2 * n_cluster *
// recall_num, at most `leaf_level`.
int TdmFirstRecallLevel(int n_cluster, int64_t recall_num, int leaf_level);

TdmRetrievalResult TdmRetrieve(const TdmRetrievalOptions& options);

int TdmRetrievalMain(const std::vector<std::string>& args);

}  // namespace tzrec
