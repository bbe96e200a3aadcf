#include "tzrec/tools/gen_data_sequence.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

#include "tzrec/common/logging.h"
#include "tzrec/fg/bucketizer.h"
#include "tzrec/tools/gen_data_tasks.h"

namespace tzrec::gen_data_internal {
namespace {

// A pair needs at least this many distinct values (or the pool size, when that is smaller):
// with fewer, a long history matches the target by chance in most rows and the indicator says
// little (gender or age-level attributes).
constexpr int64_t kMinPoolValues = 50;
// Distinct keys of the relevance attribute, and the share of history steps drawn with the
// target's key (the others draw any key, the target's included).
constexpr int64_t kKeyValues = 20;
constexpr double kRelevantShare = 0.25;

// Feature names of each sequence group of the model, in config order.
std::vector<std::vector<std::string>> SequenceGroups(const protos::ModelConfig& model) {
  std::vector<std::vector<std::string>> groups;
  for (const auto& group : model.feature_groups()) {
    if (group.group_type() == protos::SEQUENCE || group.group_type() == protos::JAGGED_SEQUENCE) {
      groups.emplace_back(group.feature_names().begin(), group.feature_names().end());
    }
    for (const auto& sequence : group.sequence_groups()) {
      groups.emplace_back(sequence.feature_names().begin(), sequence.feature_names().end());
    }
  }
  return groups;
}

// (query, history) features of one group that describe the same attribute: by name
// (`<sequence>__<name>` with `<name>`), then the k-th query with the k-th sequence feature
// among those left. In history order.
std::vector<std::pair<const fg::FeatureInfo*, const fg::FeatureInfo*>> GroupPairs(
    const std::vector<std::string>& names,
    const std::map<std::string, const fg::FeatureInfo*>& by_name) {
  std::vector<const fg::FeatureInfo*> queries, histories;
  for (const auto& name : names) {
    auto it = by_name.find(name);
    if (it == by_name.end()) continue;
    (it->second->is_sequence ? histories : queries).push_back(it->second);
  }
  std::vector<const fg::FeatureInfo*> partner(histories.size(), nullptr);
  std::set<const fg::FeatureInfo*> taken;
  for (size_t h = 0; h < histories.size(); ++h) {
    if (!histories[h]->grouped) continue;
    for (const fg::FeatureInfo* q : queries) {
      if (q->name == histories[h]->config_name && !taken.count(q)) {
        partner[h] = q;
        taken.insert(q);
        break;
      }
    }
  }
  for (size_t k = 0; k < histories.size() && k < queries.size(); ++k) {
    if (!partner[k] && !taken.count(queries[k])) {
      partner[k] = queries[k];
      taken.insert(queries[k]);
    }
  }
  std::vector<std::pair<const fg::FeatureInfo*, const fg::FeatureInfo*>> pairs;
  for (size_t h = 0; h < histories.size(); ++h) {
    if (partner[h]) pairs.emplace_back(partner[h], histories[h]);
  }
  return pairs;
}

bool TokenBucketizer(const fg::FeatureInfo& info) {
  if (!info.bucketizer) return false;
  const auto kind = info.bucketizer->kind();
  return kind == fg::Bucketizer::Kind::kNumBuckets || kind == fg::Bucketizer::Kind::kHash ||
         kind == fg::Bucketizer::Kind::kVocab;
}

// Up to `pool_size` distinct values of a pool, as the query feature's raw values look: ids
// for FG_NONE (`encoded`) and num_buckets features, vocabulary entries, or hashed strings.
// For FG modes a value is kept only when every feature in `checked` (the readers of the
// paired columns) accepts it and maps it to an id none of the kept values has, so equal
// tokens are equal ids after feature generation and different tokens different ids.
std::vector<std::string> PoolValues(const fg::FeatureInfo& query,
                                    const std::vector<const fg::FeatureInfo*>& checked,
                                    bool encoded, int64_t pool_size, uint64_t key) {
  const fg::Bucketizer* own = encoded ? nullptr : query.bucketizer.get();
  const bool numeric = encoded || own->kind() == fg::Bucketizer::Kind::kNumBuckets;
  int64_t range = std::numeric_limits<int64_t>::max();  // numeric ids fit every reader
  for (const auto* info : checked) {
    if (encoded || info->bucketizer->kind() == fg::Bucketizer::Kind::kNumBuckets) {
      range = std::min(range, info->num_embeddings);
    }
  }
  std::vector<std::string> vocab;
  if (!numeric && own->kind() == fg::Bucketizer::Kind::kVocab) {
    for (const auto& entry : own->effective_vocab_list()) {
      if (!entry.empty() && entry != "<OOV>") vocab.push_back(entry);
    }
    for (const auto& entry : own->effective_vocab_dict()) vocab.push_back(entry.first);
  }
  int64_t most = query.num_embeddings;
  if (numeric) most = range;
  if (!vocab.empty()) most = static_cast<int64_t>(vocab.size());
  const int64_t want = std::min(pool_size, most);
  const int64_t attempts = vocab.empty() ? 64 * want + 1024 : static_cast<int64_t>(vocab.size());
  std::vector<std::string> values;
  std::unordered_set<std::string> tokens;
  std::vector<std::unordered_set<int64_t>> ids(checked.size());
  std::vector<int64_t> mapped(checked.size(), 0);
  for (int64_t j = 0; j < attempts && static_cast<int64_t>(values.size()) < want; ++j) {
    const uint64_t h = SplitMix64(key ^ static_cast<uint64_t>(j));
    std::string token;
    if (numeric) {
      // All ids when the pool covers the range, scattered ones otherwise.
      token = std::to_string(
          want == range ? j : static_cast<int64_t>(h % static_cast<uint64_t>(range)));
    } else if (!vocab.empty()) {
      token = vocab[j];
    } else {
      token = "t" + std::to_string(h % 1000000007ULL);
    }
    if (!tokens.insert(token).second) continue;
    bool ok = true;
    for (size_t c = 0; c < checked.size() && ok && !encoded; ++c) {
      std::string error;
      ok = checked[c]->bucketizer->FromText(token, &mapped[c], &error) &&
           !ids[c].count(mapped[c]);
    }
    if (!ok) continue;
    for (size_t c = 0; c < checked.size() && !encoded; ++c) ids[c].insert(mapped[c]);
    values.push_back(token);
  }
  return values;
}

// Expected relevant steps of a history of n steps: each step is relevant with probability
// `share`, and a history with none gets one (see Draw).
double ExpectedRelevant(double share, int64_t n) {
  return n == 0 ? 0.0 : static_cast<double>(n) * share + std::pow(1.0 - share, n);
}

// Over histories of 0..max_steps steps (uniform): expected relevant steps of a non-empty one,
// and the share of all steps that are relevant.
double MeanRelevantWhenAny(double share, int64_t max_steps) {
  double sum = 0.0;
  for (int64_t n = 1; n <= max_steps; ++n) sum += ExpectedRelevant(share, n);
  return max_steps > 0 ? sum / static_cast<double>(max_steps) : 0.0;
}
double RelevantStepShare(double share, int64_t max_steps) {
  return max_steps > 0 ? 2.0 * MeanRelevantWhenAny(share, max_steps) / static_cast<double>(max_steps + 1)
                       : 0.0;
}

}  // namespace

int64_t MaxSequenceSteps(const fg::FeatureInfo& info, int max_sequence_steps) {
  return info.sequence_length > 0 ? std::min<int64_t>(info.sequence_length, max_sequence_steps)
                                  : max_sequence_steps;
}

SequenceSignal::SequenceSignal(const protos::ModelConfig& model,
                               const std::vector<fg::FeatureInfo>& infos, protos::FgMode mode,
                               const std::vector<RawInput>& raw_inputs,
                               const std::set<std::string>& reserved,
                               const GenDataOptions& options) {
  const bool encoded = mode == protos::FG_NONE;
  std::map<std::string, const fg::FeatureInfo*> by_name;
  for (const auto& info : infos) by_name.emplace(info.name, &info);
  const auto groups = SequenceGroups(model);

  // The sequences whose steps are drawn here, in feature order: for FG_NONE every sequence a
  // group reads; otherwise (below) only those with a signal pair.
  std::set<std::string> grouped;
  for (const auto& names : groups) {
    for (const auto& name : names) {
      auto it = by_name.find(name);
      if (it != by_name.end() && it->second->is_sequence) grouped.insert(it->second->sequence_name);
    }
  }

  // Pairs, the first one per history feature.
  std::vector<std::pair<const fg::FeatureInfo*, const fg::FeatureInfo*>> candidates;
  if (options.sequence_signal_variance > 0) {
    std::set<const fg::FeatureInfo*> seen;
    for (const auto& names : groups) {
      for (const auto& pair : GroupPairs(names, by_name)) {
        if (seen.insert(pair.second).second) candidates.push_back(pair);
      }
    }
  }

  // Readers of a raw column (FG modes): the features whose inputs draw from it.
  auto readers = [&](const std::string& column) {
    std::vector<const fg::FeatureInfo*> out;
    for (const auto& info : infos) {
      for (const auto& input : info.inputs) {
        if (input.is_all || input.side == fg::Side::kConst) continue;
        if (input.side == fg::Side::kFeature && mode == protos::FG_DAG) continue;
        if (input.column == column) {
          out.push_back(&info);
          break;
        }
      }
    }
    return out;
  };
  auto raw_sequence = [&](const std::string& column, bool* found) {
    *found = false;
    for (const RawInput& raw : raw_inputs) {
      if (raw.column == column) {
        *found = true;
        return raw.sequence;
      }
    }
    return false;
  };
  // The slot of one side of a pair, or "" (with `why`) when it cannot carry the signal.
  auto slot_of = [&](const fg::FeatureInfo& info, bool history, std::string* why) -> std::string {
    auto no = [&](const std::string& reason) {
      *why = reason;
      return std::string();
    };
    if (!info.is_sparse) return no(info.name + " is not sparse");
    if (info.weighted) return no(info.name + " is weighted");
    if (encoded) {
      return reserved.count(info.name) ? no(info.name + " is a grouping key or label") : info.name;
    }
    if (info.type != "id_feature" || info.inputs.size() != 1) {
      return no(info.name + " is not an id_feature of one input");
    }
    const fg::FeatureInput& input = info.inputs[0];
    if (input.is_all || input.side == fg::Side::kConst ||
        (input.side == fg::Side::kFeature && mode == protos::FG_DAG) ||
        input.is_sequence != history) {
      return no(info.name + " does not read a raw column");
    }
    bool found = false;
    if (raw_sequence(input.column, &found) != history || !found) {
      return no(info.name + "'s column " + input.column + " is drawn otherwise");
    }
    if (reserved.count(input.column)) {
      return no("column " + input.column + " is a grouping key or label");
    }
    for (const fg::FeatureInfo* reader : readers(input.column)) {
      // Pool values must be ids every reader keeps apart.
      if (reader->type != "id_feature" || reader->weighted || !TokenBucketizer(*reader)) {
        return no("column " + input.column + " is also read by " + reader->name);
      }
    }
    return input.column;
  };

  // Valid pairs grouped by query slot (one pool each).
  struct Candidate {
    const fg::FeatureInfo* query;
    const fg::FeatureInfo* history;
    std::string query_slot, history_slot;
  };
  std::vector<Candidate> valid;
  std::set<std::string> history_slots;
  for (const auto& [query, history] : candidates) {
    std::string why;
    std::string query_slot = slot_of(*query, false, &why);
    std::string history_slot = query_slot.empty() ? "" : slot_of(*history, true, &why);
    if (!history_slot.empty() && !history_slots.insert(history_slot).second) {
      why = history->name + "'s column is paired already";
      history_slot.clear();
    }
    if (query_slot.empty() || history_slot.empty()) {
      LOG_INFO << "gen_data: (" << query->name << ", " << history->name
               << ") carries no sequence signal: " << why;
      continue;
    }
    valid.push_back({query, history, query_slot, history_slot});
  }

  const int64_t min_pool = std::min<int64_t>(kMinPoolValues, options.sequence_pool_size);
  std::set<std::string> pooled;
  for (const Candidate& first : valid) {
    if (!pooled.insert(first.query_slot).second) continue;
    // Every feature the pool's values reach: the query's, and the histories paired with it.
    std::vector<const Candidate*> members;
    std::vector<const fg::FeatureInfo*> checked;
    for (const Candidate& c : valid) {
      if (c.query_slot != first.query_slot) continue;
      members.push_back(&c);
      if (encoded) {
        checked.push_back(c.query);
        checked.push_back(c.history);
      } else {
        for (const auto* r : readers(c.query_slot)) checked.push_back(r);
        for (const auto* r : readers(c.history_slot)) checked.push_back(r);
      }
    }
    std::sort(checked.begin(), checked.end());
    checked.erase(std::unique(checked.begin(), checked.end()), checked.end());

    Pool pool;
    pool.slot = first.query_slot;
    pool.values = PoolValues(*first.query, checked, encoded, options.sequence_pool_size,
                             HashString(first.query_slot) ^ SplitMix64(options.seed ^ 0x5e9u));
    if (static_cast<int64_t>(pool.values.size()) < min_pool) {
      for (const Candidate* c : members) {
        LOG_INFO << "gen_data: (" << c->query->name << ", " << c->history->name
                 << ") carries no sequence signal: " << pool.values.size()
                 << " distinct values (at least " << min_pool << " needed)";
      }
      continue;
    }
    pools_.push_back(std::move(pool));
    for (const Candidate* c : members) {
      Pair pair;
      pair.query_feature = c->query->name;
      pair.history_feature = c->history->name;
      pair.history_slot = c->history_slot;
      pair.pool = static_cast<int>(pools_.size()) - 1;
      pairs_.push_back(pair);
    }
  }

  // Pairs in feature order of the histories; sequences in feature order, each with its pairs.
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < infos.size(); ++i) position.emplace(infos[i].name, i);
  std::stable_sort(pairs_.begin(), pairs_.end(), [&](const Pair& a, const Pair& b) {
    return position.at(a.history_feature) < position.at(b.history_feature);
  });
  std::map<std::string, std::vector<int>> sequence_pairs;
  for (const auto& info : infos) {
    for (size_t p = 0; p < pairs_.size(); ++p) {
      if (pairs_[p].history_feature == info.name) {
        sequence_pairs[info.sequence_name].push_back(static_cast<int>(p));
      }
    }
  }
  for (const auto& info : infos) {
    if (!info.is_sequence || step_index_.count(info.sequence_name)) continue;
    auto with_pairs = sequence_pairs.find(info.sequence_name);
    const bool signal = with_pairs != sequence_pairs.end();
    if (!signal && !(encoded && grouped.count(info.sequence_name))) continue;
    Sequence sequence;
    sequence.name = info.sequence_name;
    sequence.max_steps = MaxSequenceSteps(info, options.max_sequence_steps);
    if (signal) {
      sequence.pairs = with_pairs->second;
      // The key (what makes a step relevant) is the last paired attribute, a category-like
      // one in TorchEasyRec's configs (adgroup_id, cate_id, brand: brand; item, cate: cate),
      // drawn from few values so the attention can learn which keys are equal.
      sequence.key_pair = sequence.pairs.back();
      sequence.key_values = std::min<int64_t>(
          kKeyValues, static_cast<int64_t>(pools_[pairs_[sequence.key_pair].pool].values.size()));
      const double per_step =
          kRelevantShare + (1.0 - kRelevantShare) / static_cast<double>(sequence.key_values);
      sequence.norm = std::sqrt(MeanRelevantWhenAny(per_step, sequence.max_steps));
      ++signal_sequences_;
    }
    step_index_[sequence.name] = sequences_.size();
    sequences_.push_back(std::move(sequence));
  }
  if (signal_sequences_ > 0) {
    scale_ = std::sqrt(options.sequence_signal_variance / signal_sequences_);
  }
  for (const Pair& pair : pairs_) {
    LOG_INFO << "gen_data: sequence signal on (" << pair.query_feature << ", "
             << pair.history_feature << "), " << pools_[pair.pool].values.size() << " values";
  }
}

std::vector<std::pair<std::string, std::string>> SequenceSignal::PairNames() const {
  std::vector<std::pair<std::string, std::string>> names;
  for (const Pair& pair : pairs_) names.emplace_back(pair.query_feature, pair.history_feature);
  return names;
}

SequenceSignal::HistoryPool SequenceSignal::PoolOf(const std::string& history_feature) const {
  HistoryPool out;
  for (size_t p = 0; p < pairs_.size(); ++p) {
    if (pairs_[p].history_feature != history_feature) continue;
    const Pool& pool = pools_[pairs_[p].pool];
    out.values = pool.values;
    for (size_t v = 0; v < pool.values.size(); ++v) {
      out.hidden.push_back(ItemValue(pairs_[p].pool, v));
    }
    for (const Sequence& sequence : sequences_) {
      if (sequence.key_pair != static_cast<int>(p)) continue;
      out.key = true;
      out.key_values = sequence.key_values;
      out.relevant_share = RelevantStepShare(
          kRelevantShare + (1.0 - kRelevantShare) / static_cast<double>(sequence.key_values),
          sequence.max_steps);
    }
  }
  return out;
}

double SequenceSignal::ItemValue(int pool, size_t v) const {
  // Box-Muller on two hashed uniforms: a fixed N(0, 1) value per (pool, value).
  const uint64_t a = SplitMix64(HashString(pools_[pool].slot) ^ (static_cast<uint64_t>(v) * 2 + 1));
  const uint64_t b = SplitMix64(a ^ 0x9e3779b97f4a7c15ULL);
  const double u1 = (static_cast<double>(a >> 11) + 0.5) / 9007199254740992.0;
  const double u2 = static_cast<double>(b >> 11) / 9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

SequenceRow SequenceSignal::Draw(std::mt19937_64& rng) const {
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  SequenceRow row;
  std::vector<int> steps(sequences_.size());
  for (size_t s = 0; s < sequences_.size(); ++s) {
    steps[s] = static_cast<int>(rng() % static_cast<uint64_t>(sequences_[s].max_steps + 1));
    row.steps[sequences_[s].name] = steps[s];
  }
  // The target's value of every pool; a key pool's target is one of its first key values.
  std::vector<size_t> target(pools_.size());
  std::vector<int64_t> key_count(pools_.size(), 0);
  for (const Sequence& sequence : sequences_) {
    if (sequence.key_pair >= 0) key_count[pairs_[sequence.key_pair].pool] = sequence.key_values;
  }
  for (size_t p = 0; p < pools_.size(); ++p) {
    const uint64_t range = key_count[p] > 0 ? key_count[p] : pools_[p].values.size();
    target[p] = rng() % range;
    row.targets[pools_[p].slot] = pools_[p].values[target[p]];
  }
  for (size_t s = 0; s < sequences_.size(); ++s) {
    const Sequence& sequence = sequences_[s];
    if (sequence.pairs.empty()) continue;
    const int n = steps[s];
    // A step is relevant to the target when its key equals the target's; the label depends on
    // the mean hidden value of the relevant steps' other attributes. Attention that picks out
    // the relevant steps reads that mean from its output; pooling mixes in the other steps.
    const Pair& key = pairs_[sequence.key_pair];
    const size_t target_key = target[key.pool];
    std::vector<char> relevant(n, 0);
    {
      std::vector<std::string>& tokens = row.histories[key.history_slot];
      tokens.resize(n);
      for (int t = 0; t < n; ++t) {
        const size_t v = uniform(rng) < kRelevantShare
                             ? target_key
                             : rng() % static_cast<uint64_t>(sequence.key_values);
        relevant[t] = v == target_key;
        tokens[t] = pools_[key.pool].values[v];
      }
      // A history with no relevant step gets one: softmax attention cannot tell "no step is
      // relevant" from "these steps are" (it normalises over what it sees), so without this
      // a quarter to a half of the rows would carry a term no target attention can read.
      if (n > 0 && std::find(relevant.begin(), relevant.end(), 1) == relevant.end()) {
        const int t = static_cast<int>(rng() % static_cast<uint64_t>(n));
        relevant[t] = 1;
        tokens[t] = pools_[key.pool].values[target_key];
      }
    }
    int items = 0;
    std::vector<double> value(n, 0.0);
    for (int p : sequence.pairs) {
      if (p == sequence.key_pair) continue;
      const Pair& pair = pairs_[p];
      const Pool& pool = pools_[pair.pool];
      std::vector<std::string>& tokens = row.histories[pair.history_slot];
      tokens.resize(n);
      for (int t = 0; t < n; ++t) {
        const size_t v = rng() % pool.values.size();
        tokens[t] = pool.values[v];
        value[t] += ItemValue(pair.pool, v);
      }
      ++items;
    }
    if (items == 0) {
      // A single paired attribute is key and item at once: the keys' own values.
      for (int t = 0; t < n; ++t) value[t] = ItemValue(key.pool, relevant[t] ? target_key : 0);
      items = 1;
    }
    double sum = 0.0;
    int count = 0;
    for (int t = 0; t < n; ++t) {
      if (!relevant[t]) continue;
      sum += value[t] / std::sqrt(static_cast<double>(items));
      ++count;
    }
    row.matches += count > 0;
    if (count > 0) row.term += scale_ * sequence.norm * sum / count;
  }
  return row;
}

}  // namespace tzrec::gen_data_internal
