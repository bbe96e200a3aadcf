#include "tzrec/data/data_position.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "tzrec/common/error.h"

namespace tzrec {

void RowPositions::AddRange(const std::string& source_id, int64_t first, int64_t count) {
  if (count <= 0) return;
  int32_t index = -1;
  for (size_t i = 0; i < sources.size(); ++i) {
    if (sources[i] == source_id) index = static_cast<int32_t>(i);
  }
  if (index < 0) {
    index = static_cast<int32_t>(sources.size());
    sources.push_back(source_id);
  }
  source.insert(source.end(), count, index);
  for (int64_t i = 0; i < count; ++i) row.push_back(first + i);
}

void RowPositions::Append(const RowPositions& other) {
  std::vector<int32_t> remap(other.sources.size());
  for (size_t i = 0; i < other.sources.size(); ++i) {
    auto it = std::find(sources.begin(), sources.end(), other.sources[i]);
    if (it == sources.end()) {
      remap[i] = static_cast<int32_t>(sources.size());
      sources.push_back(other.sources[i]);
    } else {
      remap[i] = static_cast<int32_t>(it - sources.begin());
    }
  }
  if (!event_time.empty() || !other.event_time.empty()) {
    event_time.resize(row.size(), -1.0);
    if (other.event_time.empty()) {
      event_time.insert(event_time.end(), other.row.size(), -1.0);
    } else {
      event_time.insert(event_time.end(), other.event_time.begin(), other.event_time.end());
    }
  }
  for (int32_t s : other.source) source.push_back(remap[s]);
  row.insert(row.end(), other.row.begin(), other.row.end());
}

double RowPositions::MaxEventTime() const {
  double latest = -1.0;
  for (double t : event_time) latest = std::max(latest, t);
  return latest;
}

RowPositions RowPositions::Slice(int64_t begin, int64_t end) const {
  RowPositions out;
  out.sources = sources;
  out.source.assign(source.begin() + begin, source.begin() + end);
  out.row.assign(row.begin() + begin, row.begin() + end);
  if (!event_time.empty()) out.event_time.assign(event_time.begin() + begin, event_time.begin() + end);
  return out;
}

void DataloaderState::Consume(const RowPositions& positions) {
  if (positions.readers > 0) {
    next_reader_ = positions.next_reader;
    readers_ = positions.readers;
  }
  std::vector<int64_t> last(positions.sources.size(), -1);
  for (size_t i = 0; i < positions.size(); ++i) {
    int64_t& value = last[positions.source[i]];
    value = std::max(value, positions.row[i]);
  }
  for (size_t s = 0; s < last.size(); ++s) {
    if (last[s] < 0) continue;
    auto [it, inserted] = consumed_.emplace(positions.sources[s], last[s]);
    if (!inserted) it->second = std::max(it->second, last[s]);
  }
}

void DataloaderState::Merge(const DataloaderState& other) {
  data_ts_watermark_ = std::max(data_ts_watermark_, other.data_ts_watermark_);
  for (const auto& kv : other.consumed_) {
    auto [it, inserted] = consumed_.emplace(kv.first, kv.second);
    if (!inserted) it->second = std::max(it->second, kv.second);
  }
  epochs_completed_ = std::max(epochs_completed_, other.epochs_completed_);
  if (next_reader_ != other.next_reader_ || readers_ != other.readers_) {
    next_reader_ = -1;
    readers_ = 0;
  }
}

void DataloaderState::FinishEpoch() {
  consumed_.clear();
  ++epochs_completed_;
  next_reader_ = -1;
  readers_ = 0;
}

std::string DataloaderState::ToJson() const {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const auto& [source, row] : consumed_) json[source] = row;
  json["__epochs_completed__"] = epochs_completed_;
  if (data_ts_watermark_ >= 0) json["__data_ts_watermark__"] = data_ts_watermark_;
  if (readers_ > 0) {
    json["__tzrec_next_reader__"] = next_reader_;
    json["__tzrec_readers__"] = readers_;
  }
  return json.dump(2) + "\n";
}

DataloaderState DataloaderState::FromJson(const std::string& text, const std::string& where) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    Fail(where, ": not valid JSON: ", e.what());
  }
  if (!json.is_object()) Fail(where, ": expected a JSON object of source -> row");
  DataloaderState state;
  for (const auto& [key, value] : json.items()) {
    if (key == "__data_ts_watermark__") {
      if (!value.is_number() || !std::isfinite(value.get<double>())) {
        Fail(where, ": '", key, "' must be a number of seconds, got ", value.dump());
      }
      state.data_ts_watermark_ = value.get<double>();
      continue;
    }
    if (!value.is_number_integer()) {
      if (key.rfind("__", 0) == 0) continue;  // other tools' bookkeeping, not a row
      Fail(where, ": '", key, "' must map to an integer row, got ", value.dump());
    }
    // Unsigned values beyond int64 would wrap; every value here is a count or a row index.
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      Fail(where, ": '", key, "' is out of range: ", value.dump());
    }
    const int64_t number = value.get<int64_t>();
    auto in_int32 = [&](int64_t low) {
      if (number < low || number > INT32_MAX) {
        Fail(where, ": '", key, "' must be in [", low, ", ", INT32_MAX, "], got ", number);
      }
      return static_cast<int32_t>(number);
    };
    if (key == "__epochs_completed__") {
      if (number < 0) Fail(where, ": '", key, "' must be >= 0, got ", number);
      state.epochs_completed_ = number;
    } else if (key == "__tzrec_next_reader__") {
      state.next_reader_ = in_int32(-1);
    } else if (key == "__tzrec_readers__") {
      state.readers_ = in_int32(0);
    } else if (key.rfind("__", 0) != 0) {
      if (number < 0) Fail(where, ": row of source '", key, "' must be >= 0, got ", number);
      state.consumed_[key] = number;
    }
  }
  if (state.next_reader_ >= 0 && state.next_reader_ >= std::max<int32_t>(state.readers_, 1)) {
    Fail(where, ": __tzrec_next_reader__ ", state.next_reader_, " is not one of the ",
         state.readers_, " readers");
  }
  return state;
}

RowInterval SliceRows(int64_t total, int64_t slice, int64_t slices, int64_t batch_size,
                      bool drop_redundant_bs_eq_one) {
  const int64_t size = total / slices;
  const int64_t split_point = total % slices;
  int64_t begin, end;
  if (slice < split_point) {
    begin = slice * (size + 1);
    end = begin + size + 1;
  } else {
    begin = split_point * (size + 1) + (slice - split_point) * size;
    end = begin + size;
  }
  if (drop_redundant_bs_eq_one && split_point != 0 && batch_size > 0 &&
      (end - begin) % batch_size == 1 && size % batch_size == 0) {
    end -= 1;
  }
  return {begin, end};
}

std::vector<RowInterval> RemainingIntervals(const DataloaderState* state,
                                            const std::string& input_path, int64_t total) {
  std::vector<std::pair<int64_t, int64_t>> entries;  // (start, consumed)
  if (state) {
    for (const auto& [key, consumed] : state->consumed()) {
      const size_t colon = key.rfind(':');
      if (colon == std::string::npos || key.compare(0, colon, input_path) != 0 ||
          colon != input_path.size()) {
        continue;
      }
      int64_t start = 0;
      try {
        start = std::stoll(key.substr(colon + 1));
      } catch (const std::exception&) {
        Fail(DataloaderState::kFileName, ": key '", key, "' does not end in :<row>");
      }
      entries.emplace_back(start, consumed);
    }
  }
  if (entries.empty()) return {{0, total}};
  std::sort(entries.begin(), entries.end());
  std::vector<RowInterval> remaining;
  for (size_t i = 0; i < entries.size(); ++i) {
    const int64_t range_end = i + 1 < entries.size() ? entries[i + 1].first : total;
    if (entries[i].second + 1 < range_end) remaining.push_back({entries[i].second + 1, range_end});
  }
  return remaining;
}

std::vector<RowInterval> WorkerIntervals(const std::vector<RowInterval>& remaining, int64_t slice,
                                         int64_t slices, int64_t batch_size,
                                         bool drop_redundant_bs_eq_one) {
  int64_t total = 0;
  for (const auto& interval : remaining) total += interval.end - interval.begin;
  const RowInterval logical = SliceRows(total, slice, slices, batch_size, drop_redundant_bs_eq_one);
  std::vector<RowInterval> result;
  int64_t position = 0;
  for (const auto& interval : remaining) {
    const int64_t length = interval.end - interval.begin;
    const int64_t overlap_begin = std::max(logical.begin, position);
    const int64_t overlap_end = std::min(logical.end, position + length);
    if (overlap_begin < overlap_end) {
      result.push_back({interval.begin + (overlap_begin - position),
                        interval.begin + (overlap_end - position)});
    }
    position += length;
    if (position >= logical.end) break;
  }
  return result;
}

}  // namespace tzrec
