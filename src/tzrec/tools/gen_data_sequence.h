// Internal to `tzrec gen_data`: the target-attention signal planted in sequence features.
//
// A model's sequence groups (feature groups of group_type SEQUENCE / JAGGED_SEQUENCE, and
// `sequence_groups` of other groups) put query features (the target item's attributes) next to
// sequence sub-features (the same attributes of the items in the user's history). Pairs are
// matched by name (`<sequence_name>__<name>` with `<name>`), else by position among the group's
// query and sequence features, as the model concatenates them. Sparse pairs carry the signal:
// both sides draw from one pool of a few hundred values, so each value is seen often enough for
// the separate query and history embedding tables to align.
//
// The last paired attribute of a signal sequence is its KEY (cate_id after adgroup_id: a
// category-like attribute). The target's key is one of the first key_values values of its pool
// (kKeyValues, 20, or the pool size when smaller); each history step's key is the target's
// with probability kRelevantShare (0.25), else uniform over the key values (the target's
// included), so kRelevantShare + (1 - kRelevantShare) / key_values of the steps (0.2875) are
// RELEVANT to the target (same key); a non-empty history without a relevant step gets one at a
// random step, since softmax attention (DIN's) normalises over the steps it sees and cannot
// tell "none of these is relevant" from "all of these are". The other paired attributes of a
// step (its items) are uniform over their pools, and each value of a pool has a fixed hidden
// value ~ N(0, 1) (from a hash). Per non-empty signal sequence, the hidden logit gets
//   sqrt(v / G) * norm * mean over the relevant steps of (sum of the step's item values /
//   sqrt(#items)),
// v = sequence_signal_variance, G signal sequences, norm = sqrt(expected relevant steps of a
// non-empty history) to bring the mean to about unit variance. With one paired attribute it is
// key and item at once (the relevant steps' value is then the target key's own). Attention
// that picks the steps whose key equals the target's reads that mean from its output; pooling
// mixes in the irrelevant steps, which carry no signal. `SequenceRow::matches` and gen_data's
// match_rate count the sequences with a relevant step (the non-empty ones).
//
// Values are drawn as the text gen_data writes: ids for FG_NONE data, raw tokens for
// FG_NORMAL / FG_DAG (checked with every reader's bucketizer to map to distinct ids, so equal
// keys stay equal and different values different after feature generation).
//
// Immutable after construction; Draw() only uses the generator it is given, so one plan may
// be shared by threads that each have their own generator.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tzrec/fg/feature_info.h"
#include "tzrec/protos/model.pb.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/tools/gen_data_raw.h"

namespace tzrec::gen_data_internal {

// Most steps a sequence of `info` gets per row: max_sequence_steps, capped by sequence_length
// when that is set (> 0).
int64_t MaxSequenceSteps(const fg::FeatureInfo& info, int max_sequence_steps);

// One row's sequence draws. Slots are the columns gen_data writes: feature names for FG_NONE,
// raw columns for FG_NORMAL / FG_DAG.
struct SequenceRow {
  std::map<std::string, int> steps;            // by sequence name: steps of this row
  std::map<std::string, std::string> targets;  // query slot -> the target's value
  std::map<std::string, std::vector<std::string>> histories;  // history slot -> one per step
  int matches = 0;     // signal sequences with a step relevant to the target
  double term = 0.0;   // added to the shared hidden logit
};

class SequenceSignal {
 public:
  SequenceSignal() = default;
  // `infos`: the config's features (DescribeFeatures for its fg_mode); `raw_inputs`: the raw
  // columns gen_data draws (FG_NORMAL / FG_DAG; empty for FG_NONE); `reserved`: slots that keep
  // their own values (labels, sample weights, grouping keys).
  SequenceSignal(const protos::ModelConfig& model, const std::vector<fg::FeatureInfo>& infos,
                 protos::FgMode mode, const std::vector<RawInput>& raw_inputs,
                 const std::set<std::string>& reserved, const GenDataOptions& options);

  // Whether some pair carries the signal.
  bool has_signal() const { return !pairs_.empty(); }
  // Whether Draw() draws the steps of this sequence: signal sequences and, for FG_NONE, every
  // sequence a sequence group reads (its sub-features must agree on the steps).
  bool DrawsSteps(const std::string& sequence_name) const {
    return step_index_.count(sequence_name) > 0;
  }
  bool draws_anything() const { return !sequences_.empty(); }
  // (query feature, sequence feature) names of the pairs that carry the signal.
  std::vector<std::pair<std::string, std::string>> PairNames() const;
  int signal_sequences() const { return signal_sequences_; }

  // What Draw() plants through the history feature of a pair (for tests, which read the
  // written rows back): its pool's values as written (ids for FG_NONE, raw tokens otherwise)
  // with the hidden value of each, and, for its sequence's key attribute, how many of the
  // values are keys and the expected share of history steps relevant to the target.
  struct HistoryPool {
    std::vector<std::string> values;
    std::vector<double> hidden;  // ItemValue of each value
    bool key = false;            // the sequence's key attribute (values[0, key_values) are keys)
    int64_t key_values = 0;
    // key: expected share of history steps relevant to the target, over histories of 0 to
    // max steps with the one-relevant-step rule (0.2993 for 20 keys and up to 20 steps).
    double relevant_share = 0.0;
  };
  // Empty `values` when `history_feature` carries no signal.
  HistoryPool PoolOf(const std::string& history_feature) const;

  // One row: step counts, the target's values, the history steps and the row's logit term.
  SequenceRow Draw(std::mt19937_64& rng) const;

 private:
  struct Pool {
    std::string slot;                 // the query slot
    std::vector<std::string> values;  // distinct tokens
  };
  struct Pair {
    std::string query_feature, history_feature;
    std::string history_slot;
    int pool = 0;  // index into pools_ (the query slot's pool)
  };
  struct Sequence {
    std::string name;
    int64_t max_steps = 0;
    std::vector<int> pairs;  // empty: only the steps are drawn here
    int key_pair = -1;       // index into pairs_: the attribute that makes a step relevant
    int64_t key_values = 0;  // the first key_values of its pool are the keys drawn
    double norm = 1.0;       // scales the mean value of the relevant steps to ~unit variance
  };
  // Hidden value of value `v` of pool `pool` (standard normal, from a hash).
  double ItemValue(int pool, size_t v) const;

  std::vector<Pool> pools_;
  std::vector<Pair> pairs_;
  std::vector<Sequence> sequences_;
  std::map<std::string, size_t> step_index_;
  int signal_sequences_ = 0;
  double scale_ = 0.0;  // sqrt(v / G): the scale of each signal sequence's term
};

}  // namespace tzrec::gen_data_internal
