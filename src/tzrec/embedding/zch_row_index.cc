#include "tzrec/embedding/zch_row_index.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "tzrec/common/error.h"

namespace tzrec {
namespace {

constexpr int64_t kEmpty = std::numeric_limits<int64_t>::max();

}  // namespace

ZchRowIndex::History ZchRowIndex::History::Merge(const std::vector<History>& parts) {
  std::vector<std::tuple<int64_t, int64_t, int64_t>> all;
  for (const History& part : parts) {
    for (size_t i = 0; i < part.ids.size(); ++i) {
      all.emplace_back(part.ids[i], part.counts[i], part.last_access.empty() ? 0 : part.last_access[i]);
    }
  }
  std::sort(all.begin(), all.end());
  History merged;
  for (const auto& [id, count, last] : all) {
    if (!merged.ids.empty() && merged.ids.back() == id) {
      merged.counts.back() += count;
      merged.last_access.back() = std::max(merged.last_access.back(), last);
      continue;
    }
    merged.ids.push_back(id);
    merged.counts.push_back(count);
    merged.last_access.push_back(last);
  }
  return merged;
}

ZchRowIndex::ZchRowIndex(const fg::ZchSpec& spec, std::string table) : spec_(spec), table_(std::move(table)) {
  TZREC_CHECK(spec_.size > 0 && spec_.eviction_interval > 0, "zch table '", table_, "': bad spec");
  uses_counts_ = spec_.policy != fg::ZchSpec::Policy::kLru;
  uses_last_access_ = spec_.policy != fg::ZchSpec::Policy::kLfu;
  sorted_ids_.assign(spec_.size, kEmpty);
  rows_.resize(spec_.size);
  std::iota(rows_.begin(), rows_.end(), int64_t{0});
  if (uses_counts_) counts_.assign(spec_.size, 0);
  if (uses_last_access_) last_access_.assign(spec_.size, 0);
}

int64_t ZchRowIndex::admitted() const {
  return std::count_if(sorted_ids_.begin(), sorted_ids_.end(), [](int64_t id) { return id != kEmpty; });
}

void ZchRowIndex::Map(const int64_t* ids, int64_t n, int64_t* rows) const {
  // The last slot is searched only by equality (TorchRec searches all but the last position).
  const auto begin = sorted_ids_.begin();
  const auto end = sorted_ids_.end() - 1;
  const int64_t shared = spec_.size - 1;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = ids[i];
    const int64_t pos = std::lower_bound(begin, end, id) - begin;
    rows[i] = id != kEmpty && sorted_ids_[pos] == id ? rows_[pos] : shared;
  }
}

bool ZchRowIndex::Record(const std::vector<std::pair<const int64_t*, int64_t>>& parts) {
  if (!started_) {
    started_ = true;
    last_eviction_step_ = step_;
  }
  ++step_;
  int64_t total = 0;
  for (const auto& part : parts) total += part.second;
  if (history_capacity_ < 0 && total > 0) {
    history_capacity_ = static_cast<int64_t>(static_cast<double>(total) * spec_.eviction_interval * 1.25);
    history_.reserve(history_capacity_);
    if (uses_last_access_) history_step_.reserve(history_capacity_);
  }
  for (const auto& [ids, n] : parts) {
    const int64_t room = std::max<int64_t>(history_capacity_ - static_cast<int64_t>(history_.size()), 0);
    const int64_t take = std::min(n, room);
    history_.insert(history_.end(), ids, ids + take);
    if (uses_last_access_) history_step_.insert(history_step_.end(), take, step_);
  }
  if (step_ - last_eviction_step_ != spec_.eviction_interval) return false;
  last_eviction_step_ = step_;
  return true;
}

ZchRowIndex::History ZchRowIndex::TakeHistory() {
  std::vector<std::pair<int64_t, int64_t>> entries;
  entries.reserve(history_.size());
  for (size_t i = 0; i < history_.size(); ++i) {
    if (history_[i] == kEmpty) continue;
    entries.emplace_back(history_[i], uses_last_access_ ? history_step_[i] : 0);
  }
  history_.clear();
  history_step_.clear();
  std::sort(entries.begin(), entries.end());
  History history;
  for (const auto& [id, step] : entries) {
    if (!history.ids.empty() && history.ids.back() == id) {
      ++history.counts.back();
      history.last_access.back() = std::max(history.last_access.back(), step);
      continue;
    }
    history.ids.push_back(id);
    history.counts.push_back(1);
    history.last_access.push_back(step);
  }
  return history;
}

double ZchRowIndex::Score(int64_t count, int64_t last_access) const {
  // TorchRec computes these in float32 (an int64 tensor to a float power is float32), so ties
  // and their order come out the same.
  switch (spec_.policy) {
    case fg::ZchSpec::Policy::kLfu:
      return static_cast<double>(count);
    case fg::ZchSpec::Policy::kLru: {
      const float distance = std::pow(static_cast<float>(step_ - last_access + 1), spec_.decay_exponent);
      return -static_cast<double>(distance);
    }
    case fg::ZchSpec::Policy::kDistanceLfu: {
      const float distance = std::pow(static_cast<float>(step_ - last_access + 1), spec_.decay_exponent);
      return static_cast<double>(static_cast<float>(count) / distance);
    }
  }
  return 0.0;
}

std::vector<bool> ZchRowIndex::FilterMask(const std::vector<int64_t>& counts) {
  const size_t n = counts.size();
  std::vector<bool> keep(n, true);
  if (spec_.filter == fg::ZchSpec::Filter::kNone || n == 0) return keep;
  double total = 0;
  for (int64_t c : counts) total += static_cast<double>(c);
  switch (spec_.filter) {
    case fg::ZchSpec::Filter::kAverage: {
      const float threshold = static_cast<float>(total / static_cast<double>(n));
      for (size_t i = 0; i < n; ++i) keep[i] = static_cast<float>(counts[i]) > threshold;
      break;
    }
    case fg::ZchSpec::Filter::kDynamic: {
      const float threshold = static_cast<float>(1.0 / static_cast<double>(n) * spec_.filter_param) *
                              static_cast<float>(total);
      for (size_t i = 0; i < n; ++i) keep[i] = static_cast<float>(counts[i]) > threshold;
      break;
    }
    case fg::ZchSpec::Filter::kProbabilistic: {
      // Seeded by table and step, so every rank draws the same (their merged histories agree).
      std::mt19937_64 rng(std::hash<std::string>()(table_) ^ static_cast<uint64_t>(step_) * 0x9E3779B97F4A7C15ull);
      std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
      const float stay = 1.0f - static_cast<float>(spec_.filter_param);
      for (size_t i = 0; i < n; ++i) {
        const float score = 1.0f - std::pow(stay, static_cast<float>(counts[i]));
        keep[i] = score > uniform(rng);
      }
      break;
    }
    case fg::ZchSpec::Filter::kNone:
      break;
  }
  return keep;
}

std::vector<int64_t> ZchRowIndex::Evict(const History& history) {
  const int64_t size = spec_.size;
  // Filtered, then ordered by count (descending; equal counts keep id order).
  const std::vector<bool> keep = FilterMask(history.counts);
  std::vector<size_t> order;
  for (size_t i = 0; i < history.ids.size(); ++i) {
    if (keep[i]) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return history.counts[a] > history.counts[b]; });
  // Ids holding a slot update its metadata; the others are the newcomers.
  struct Newcomer {
    int64_t id, count, last_access;
  };
  std::vector<Newcomer> newcomers;
  for (size_t i : order) {
    const int64_t id = history.ids[i];
    const int64_t pos = std::lower_bound(sorted_ids_.begin(), sorted_ids_.end() - 1, id) - sorted_ids_.begin();
    if (sorted_ids_[pos] == id) {
      if (uses_counts_) counts_[pos] += history.counts[i];
      if (uses_last_access_) last_access_[pos] = history.last_access[i];
      continue;
    }
    newcomers.push_back({id, history.counts[i], history.last_access.empty() ? 0 : history.last_access[i]});
  }
  // The last slot is kept for ids without a row: it scores above everything.
  if (uses_counts_) counts_[size - 1] = std::numeric_limits<int64_t>::max();
  if (uses_last_access_) last_access_[size - 1] = step_;
  const int64_t k = static_cast<int64_t>(newcomers.size());
  if (k == 0) return {};

  // Rank = descending score, then position (slots 0..size-1, newcomers size..size+k-1): the
  // order of a stable descending argsort over [slots, newcomers]. The `size` best stay.
  std::vector<double> score(size + k);
  for (int64_t i = 0; i < size; ++i) {
    score[i] = Score(uses_counts_ ? counts_[i] : 0, uses_last_access_ ? last_access_[i] : 0);
  }
  for (int64_t j = 0; j < k; ++j) score[size + j] = Score(newcomers[j].count, newcomers[j].last_access);
  auto better = [&](int64_t a, int64_t b) { return score[a] > score[b] || (score[a] == score[b] && a < b); };
  // Only the k worst slots can lose; rank them with the newcomers.
  const int64_t m = std::min(k, size);
  std::vector<int64_t> slots(size);
  std::iota(slots.begin(), slots.end(), int64_t{0});
  std::nth_element(slots.begin(), slots.begin() + (size - m), slots.end(), better);
  std::vector<int64_t> worst(slots.begin() + (size - m), slots.end());
  std::sort(worst.begin(), worst.end(), better);
  std::vector<int64_t> incoming(k);
  std::iota(incoming.begin(), incoming.end(), size);
  std::sort(incoming.begin(), incoming.end(), better);
  std::vector<int64_t> ranked(m + k);
  std::merge(worst.begin(), worst.end(), incoming.begin(), incoming.end(), ranked.begin(), better);
  std::vector<int64_t> losers, winners;  // slots out, newcomers in, each in rank order
  for (int64_t r = 0; r < m + k; ++r) {
    if (r < m && ranked[r] >= size) winners.push_back(ranked[r] - size);
    if (r >= m && ranked[r] < size) losers.push_back(ranked[r]);
  }
  TZREC_CHECK(losers.size() == winners.size(), "zch eviction of table '", table_, "'");

  std::vector<int64_t> evicted_rows;
  std::vector<bool> changed(size, false);
  for (size_t i = 0; i < losers.size(); ++i) {
    const int64_t pos = losers[i];
    const Newcomer& in = newcomers[winners[i]];
    sorted_ids_[pos] = in.id;
    if (uses_counts_) counts_[pos] = in.count;
    if (uses_last_access_) last_access_[pos] = in.last_access;
    evicted_rows.push_back(rows_[pos]);
    changed[pos] = true;
  }
  // Back to id order: the unchanged slots are still sorted (empty ones last, in their order),
  // the changed ones are sorted and merged in; their ids are new, so no ties.
  std::vector<int64_t> kept_pos, changed_pos;
  for (int64_t i = 0; i < size; ++i) (changed[i] ? changed_pos : kept_pos).push_back(i);
  std::sort(changed_pos.begin(), changed_pos.end(),
            [&](int64_t a, int64_t b) { return sorted_ids_[a] < sorted_ids_[b]; });
  std::vector<int64_t> merged(size);
  std::merge(kept_pos.begin(), kept_pos.end(), changed_pos.begin(), changed_pos.end(), merged.begin(),
             [&](int64_t a, int64_t b) { return sorted_ids_[a] < sorted_ids_[b]; });
  auto permute = [&](std::vector<int64_t>* values) {
    if (values->empty()) return;
    std::vector<int64_t> out(size);
    for (int64_t i = 0; i < size; ++i) out[i] = (*values)[merged[i]];
    values->swap(out);
  };
  permute(&sorted_ids_);
  permute(&rows_);
  permute(&counts_);
  permute(&last_access_);
  std::sort(evicted_rows.begin(), evicted_rows.end());
  return evicted_rows;
}

ZchRowIndex::State ZchRowIndex::SaveState() const {
  return {sorted_ids_, rows_, counts_, last_access_, step_, history_capacity_};
}

void ZchRowIndex::RestoreState(State state, const std::string& where) {
  const int64_t size = spec_.size;
  auto check_size = [&](const std::vector<int64_t>& v, const char* name, bool needed) {
    if (!needed) return;
    if (static_cast<int64_t>(v.size()) != size) {
      Fail(where, ": zch ", name, " of table '", table_, "' has ", v.size(), " entries, the table's zch_size is ", size);
    }
  };
  check_size(state.sorted_ids, "ids", true);
  check_size(state.rows, "rows", true);
  check_size(state.counts, "counts", uses_counts_);
  check_size(state.last_access, "last_access_iter", uses_last_access_);
  for (int64_t i = 1; i < size; ++i) {
    if (state.sorted_ids[i] < state.sorted_ids[i - 1] ||
        (state.sorted_ids[i] == state.sorted_ids[i - 1] && state.sorted_ids[i] != kEmpty)) {
      Fail(where, ": zch ids of table '", table_, "' are not sorted and unique at position ", i);
    }
  }
  std::vector<bool> seen(size, false);
  for (int64_t row : state.rows) {
    if (row < 0 || row >= size || seen[row]) {
      Fail(where, ": zch rows of table '", table_, "' are not a permutation of [0, ", size, ")");
    }
    seen[row] = true;
  }
  if (state.step < 0) Fail(where, ": zch step of table '", table_, "' is negative");
  sorted_ids_ = std::move(state.sorted_ids);
  rows_ = std::move(state.rows);
  if (uses_counts_) counts_ = std::move(state.counts);
  if (uses_last_access_) last_access_ = std::move(state.last_access);
  step_ = state.step;
  started_ = false;
  history_capacity_ = std::max<int64_t>(state.history_capacity, -1);
  history_.clear();
  history_step_.clear();
}

}  // namespace tzrec
