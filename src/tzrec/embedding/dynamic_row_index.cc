#include "tzrec/embedding/dynamic_row_index.h"

#include <tsl/robin_map.h>

#include <algorithm>
#include <set>
#include <utility>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"

namespace tzrec {

struct DynamicRowIndex::Maps {
  tsl::robin_map<int64_t, int64_t> row_of;   // held id -> row
  std::set<std::pair<int64_t, int64_t>> by_score;  // (score, id) of held ids; empty for NO_EVICTION
  tsl::robin_map<int64_t, int64_t> counter;  // admission: id -> count
};

DynamicRowIndex::DynamicRowIndex(const fg::DynamicEmbSpec& spec, std::string table)
    : spec_(spec), table_(std::move(table)), maps_(std::make_unique<Maps>()) {
  TZREC_CHECK(spec_.max_capacity > 0, "dynamicemb table '", table_, "' without capacity");
}

DynamicRowIndex::~DynamicRowIndex() = default;

void DynamicRowIndex::Map(const int64_t* ids, int64_t n, int64_t fallback, int64_t* rows) const {
  const auto& row_of = maps_->row_of;
  for (int64_t i = 0; i < n; ++i) {
    auto it = row_of.find(ids[i]);
    rows[i] = it == row_of.end() ? fallback : it->second;
  }
}

void DynamicRowIndex::Hold(int64_t id, int64_t row, int64_t score) {
  maps_->row_of[id] = row;
  if (row == size()) {
    id_of_row_.push_back(id);
    score_of_row_.push_back(score);
    touched_of_row_.push_back(step_);
  } else {
    id_of_row_[row] = id;
    score_of_row_[row] = score;
    touched_of_row_[row] = step_;
  }
  if (spec_.score != fg::DynamicEmbSpec::Score::kNoEviction) maps_->by_score.emplace(score, id);
}

DynamicRowIndex::Admitted DynamicRowIndex::Train(const std::vector<int64_t>& ids,
                                                 const std::vector<int64_t>& counts) {
  TZREC_CHECK(ids.size() == counts.size());
  ++step_;
  const bool lfu = spec_.score == fg::DynamicEmbSpec::Score::kLfu;
  const bool evicts = spec_.score != fg::DynamicEmbSpec::Score::kNoEviction;
  auto& by_score = maps_->by_score;
  // Ids of this step holding rows: refresh their scores. The others are candidates.
  std::vector<std::pair<int64_t, int64_t>> candidates;  // (score, id)
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = maps_->row_of.find(ids[i]);
    if (it == maps_->row_of.end()) {
      candidates.emplace_back(lfu ? counts[i] : step_, ids[i]);
      continue;
    }
    const int64_t row = it->second;
    const int64_t score = lfu ? score_of_row_[row] + counts[i] : step_;
    if (evicts && score != score_of_row_[row]) {
      by_score.erase({score_of_row_[row], ids[i]});
      by_score.emplace(score, ids[i]);
    }
    score_of_row_[row] = score;
    touched_of_row_[row] = step_;
  }
  if (spec_.admission_threshold > 0) {
    // Count this step's sighting of each new id; those reaching the threshold leave the counter.
    auto& counter = maps_->counter;
    std::vector<std::pair<int64_t, int64_t>> admitted;
    for (size_t i = 0, j = 0; i < ids.size() && j < candidates.size(); ++i) {
      if (ids[i] != candidates[j].second) continue;
      int64_t& count = counter[ids[i]];
      count += lfu ? counts[i] : 1;
      if (count >= spec_.admission_threshold) {
        counter.erase(ids[i]);
        admitted.push_back(candidates[j]);
      }
      ++j;
    }
    candidates = std::move(admitted);
    if (static_cast<int64_t>(counter.size()) > spec_.counter_capacity) {
      // A bounded counter: the ids seen least (ties: larger ids) are forgotten.
      std::vector<std::pair<int64_t, int64_t>> entries;  // (count, -id)
      entries.reserve(counter.size());
      for (const auto& [id, count] : counter) entries.emplace_back(count, -id);
      const size_t drop = counter.size() - static_cast<size_t>(spec_.counter_capacity);
      std::nth_element(entries.begin(), entries.begin() + static_cast<int64_t>(drop), entries.end());
      for (size_t k = 0; k < drop; ++k) counter.erase(-entries[k].second);
    }
  }
  // Highest scores first, ties by smaller id.
  std::sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  Admitted out;
  auto victim = by_score.begin();
  int64_t refused = 0;
  for (const auto& [score, id] : candidates) {
    int64_t row = -1;
    if (size() < capacity()) {
      row = size();
    } else if (evicts) {
      while (victim != by_score.end() && touched_of_row_[maps_->row_of.at(victim->second)] == step_) ++victim;
      if (victim != by_score.end() && victim->first <= score) {
        auto held = maps_->row_of.find(victim->second);
        row = held->second;
        maps_->row_of.erase(held);
        victim = by_score.erase(victim);
      }
    }
    if (row < 0) {
      ++refused;
      continue;
    }
    Hold(id, row, score);
    out.rows.push_back(row);
    out.ids.push_back(id);
  }
  if (refused > 0 && !evicts && !warned_full_) {
    warned_full_ = true;
    LOG_WARNING << "dynamicemb table '" << table_ << "' (NO_EVICTION) is full at max_capacity " << capacity()
                << ": new ids read the admission constant and do not train; raise max_capacity or use an "
                   "evicting score_strategy";
  }
  return out;
}

DynamicRowIndex::State DynamicRowIndex::SaveState() const {
  State state;
  state.step = step_;
  std::vector<std::pair<int64_t, int64_t>> held;  // (id, row)
  held.reserve(id_of_row_.size());
  for (size_t r = 0; r < id_of_row_.size(); ++r) held.emplace_back(id_of_row_[r], static_cast<int64_t>(r));
  std::sort(held.begin(), held.end());
  for (const auto& [id, row] : held) {
    state.ids.push_back(id);
    state.scores.push_back(score_of_row_[row]);
  }
  std::vector<std::pair<int64_t, int64_t>> counted(maps_->counter.begin(), maps_->counter.end());
  std::sort(counted.begin(), counted.end());
  for (const auto& [id, count] : counted) {
    state.counter_ids.push_back(id);
    state.counter_counts.push_back(count);
  }
  return state;
}

void DynamicRowIndex::RestoreState(const State& state, const std::string& what) {
  if (state.scores.size() != state.ids.size()) Fail(what, ": ", state.ids.size(), " ids but ", state.scores.size(), " scores");
  if (state.counter_counts.size() != state.counter_ids.size()) {
    Fail(what, ": ", state.counter_ids.size(), " counter ids but ", state.counter_counts.size(), " counts");
  }
  if (static_cast<int64_t>(state.ids.size()) > capacity()) {
    Fail(what, ": ", state.ids.size(), " ids saved but max_capacity is ", capacity());
  }
  if (!std::is_sorted(state.ids.begin(), state.ids.end()) ||
      std::adjacent_find(state.ids.begin(), state.ids.end()) != state.ids.end()) {
    Fail(what, ": ids are not strictly ascending");
  }
  maps_ = std::make_unique<Maps>();
  id_of_row_.clear();
  score_of_row_.clear();
  touched_of_row_.clear();
  step_ = state.step;
  for (size_t i = 0; i < state.ids.size(); ++i) Hold(state.ids[i], static_cast<int64_t>(i), state.scores[i]);
  // Restored rows count as not accessed in the current step.
  std::fill(touched_of_row_.begin(), touched_of_row_.end(), step_ - 1);
  for (size_t i = 0; i < state.counter_ids.size(); ++i) maps_->counter[state.counter_ids[i]] = state.counter_counts[i];
}

}  // namespace tzrec
