// `tzrec gen_data`: mock train/eval data for a pipeline config, with a planted signal.
//
// Every feature column the config reads is generated (sparse ids Zipf-distributed inside
// the feature's bucket range, some multi-valued and some null; dense values Gaussian), and
// labels are drawn from a hidden factorisation machine over those features: a first-order
// weight per id and dense value, plus pairwise dot products of hidden per-id vectors. Hidden
// parameters are derived from a hash of (feature, id), so even 40M-bucket features need no
// storage.
//
// Labels: the task towers of the model (the repeated `task_towers` of whatever model message
// is set, found by reflection) give each label field its tower, num_class and losses. A
// tower's logit mixes the shared hidden model with a task-specific one (same kind, keyed by
// the label): sqrt(0.6) * shared + sqrt(0.4) * specific + bias. Tasks depend on others as
// DBMTL assumes: on their relation_tower_names, or, in a multi-task model without relations,
// every task after the first on the first; a dependent task is drawn only where the tasks it
// depends on are positive (P(buy | x) = P(clk | x) * q_buy(x)), giving it a few percent of
// positives where the first task has about a third. num_class > 1 towers get class indices
// from a softmax over num_class logits (2 classes: a binary label); l2_loss-only towers get a
// continuous label 5 * sigmoid(logit) + N(0, 0.2^2). Label fields no tower names (and
// single-task models) keep the shared logit with a bias shift by label position and an
// independent draw.
//
// Grouping keys: features named as grouping_key (grouped_auc, grouped_xauc) or session_name
// (jrc_loss) anywhere in model_config take one value per row from a pool of about rows/16
// keys (at most the feature's bucket count), so groups have several rows of both classes:
// the encoded id for FG_NONE data, the raw input column(s) for FG_DAG / FG_NORMAL.
//
// Sequences: a sequence's step count per row is uniform in [0, min(sequence_length,
// max_sequence_steps)] (sequence_length 0: max_sequence_steps), shared by its sub-features.
// Target attention signal (gen_data_sequence.h): each sequence group of the model
// (group_type SEQUENCE / JAGGED_SEQUENCE, or a group's sequence_groups) pairs its sparse query
// features with the sequence sub-features of the same attribute (`<seq>__<name>` with
// `<name>`, else by position). Paired attributes draw from a pool of sequence_pool_size values
// (fewer when the buckets are fewer; a pair with fewer than min(50, sequence_pool_size) carries
// no signal): as raw values for FG_NORMAL / FG_DAG, so equal values stay equal ids after
// feature generation. A sequence's last paired attribute is its key (e.g. brand): the
// target's key is one of 20 values, and each history step has the target's key with
// probability 0.25, else a uniform one of the 20, so about 29% of the steps are relevant to
// the target (same key). The other paired attributes of a step (its items) are uniform, each
// value with a fixed hidden value ~ N(0, 1). Per sequence with a relevant step, the shared
// hidden logit gets sqrt(v / G) * norm * the mean over the relevant steps of their items'
// hidden values (v = sequence_signal_variance, 0: no signal; G signal sequences; norm brings
// the mean to about unit variance). Target attention that picks the steps with the target's
// key reads that mean; pooling the history mixes in the irrelevant steps. FG_NONE sequences a
// group reads are written step by step (one id per sparse step; Parquet: a LIST of steps).
// Configs without sequence groups are written exactly as before the signal existed.
//
// The oracle (the hidden model's own probabilities on the eval rows) is reported per label,
// so tests can ask a trained model to come close to it. <output_dir>/oracle.json (one line):
//   {"eval_pattern": ..., "labels": {"<label>": {"oracle_auc": a, "positive_rate": r} or
//    {"oracle_mse": m, "mean": y} for regression}, "towers": {"<tower>": {"label": "<label>",
//    "oracle_auc": a (or "oracle_mse": m)}} (models with task towers only), "oracle_auc": a,
//    "positive_rate": r, "train_pattern": ...}
// With a sequence signal each classification label also has "oracle_auc_without_sequence"
// (the hidden model with the sequence term left out: about the best a model blind to the
// history's relevant steps can do), and "sequence_signal": {"match_rate": share of (train row,
// signal sequence) whose history has a step relevant to the target (same key), "pairs":
// [[query, sequence feature]...], "variance": v} comes before the top-level fields.
// The top-level oracle_auc / positive_rate are the first label's (the first classification
// label's when the first is a regression one); they come after the nested ones so that
// `sed 's/.*"oracle_auc": ...'` scripts read them.
// Configs with a negative sampler get a planted user-item affinity and the sampler's tables
// (gen_data_retrieval.h), and "retrieval": {"items", "users", "clusters", "in_cluster_rate",
// "tables": {name: path}} before the top-level fields. AUCs are exact on the eval rows (for
// num_class > 2: the mean one-vs-rest AUC); positive rates (label != 0) and means are over
// the train rows; the MSE is of the oracle mean on the eval rows.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tzrec/protos/pipeline.pb.h"

namespace tzrec {

struct GenDataOptions {
  std::string output_dir;
  int64_t train_rows = 100000;
  int64_t eval_rows = 20000;
  int num_files = 2;              // train files (eval gets one file per 4 train files, >= 1)
  uint64_t seed = 2024;
  double multi_value_fraction = 0.1;  // share of sparse values that get a second id
  double null_fraction = 0.02;        // share of sparse values left empty
  double zipf_exponent = 1.1;
  // Variances of the hidden logit's parts: per-id weights (summed over the sparse features) and
  // pairwise interactions of hidden id vectors; dense values have 0.6. Models without explicit
  // feature crosses (MLP towers) need far more rows to learn interactions than per-id effects,
  // and weak signals need more rows to come close to the oracle: tests that must train in a
  // minute raise the first and drop the second.
  double first_order_variance = 1.0;
  double interaction_variance = 1.0;
  // Variance of the target/history term of the hidden logit (0: no sequence signal).
  double sequence_signal_variance = 1.0;
  // Most steps a sequence gets per row (also capped by the config's sequence_length).
  int max_sequence_steps = 8;
  // Distinct values of each paired (query, history) attribute: few enough that every value is
  // seen often, so query and history embeddings (separate tables) can align.
  int64_t sequence_pool_size = 500;
};

// The oracle of one label field.
struct GenDataLabel {
  std::string label;
  std::string tower;           // empty when no task tower names the label
  int num_class = 1;
  bool regression = false;
  std::vector<std::string> depends_on;  // labels that must be positive for this one to be
  double oracle_auc = 0.0;     // classification: on the eval rows
  // Classification with a sequence signal: the oracle without its sequence term.
  double oracle_auc_without_sequence = 0.0;
  double positive_rate = 0.0;  // classification: share of labels != 0 over train rows
  double oracle_mse = 0.0;     // regression: of the oracle mean on the eval rows
  double mean = 0.0;           // regression: mean label over train rows
};

struct GenDataResult {
  std::string train_pattern;   // glob of the train files
  std::string eval_pattern;
  double oracle_auc = 0.0;     // of the first (classification) label, on the eval rows
  double positive_rate = 0.0;  // of the same label, over train rows
  std::vector<GenDataLabel> labels;  // in data_config.label_fields order
  // The target/history signal: (query feature, sequence feature) pairs that carry it (empty:
  // none) and the share of (train row, signal sequence) whose history has a step relevant to
  // the target (its key attribute equal to the target's).
  std::vector<std::pair<std::string, std::string>> sequence_pairs;
  double sequence_match_rate = 0.0;
  // Configs with a negative sampler: the sampler tables written (gen_data_retrieval.h) by name
  // (item_table, user_table, pos_edge_table, hard_neg_edge_table; for a tdm_sampler node_table,
  // edge_table, predict_edge_table, serving_tree and item_data, the items with their columns).
  std::map<std::string, std::string> sampler_tables;
};

GenDataResult GenerateMockData(const protos::EasyRecConfig& config, const GenDataOptions& options);

// CLI entry point: `tzrec gen_data --pipeline_config_path=... --output_dir=...`.
int GenDataMain(const std::vector<std::string>& args);

}  // namespace tzrec
