#include "tzrec/data/parsed_batch.h"

#include "tzrec/common/error.h"

namespace tzrec {

void ParsedBatch::Append(const ParsedBatch& other) {
  TZREC_CHECK(sampled_rows == 0 && other.sampled_rows == 0, "appending batches with sampled rows");
  if (size == 0 && sparse.empty() && dense.empty() && labels.empty() && reserved.empty()) {
    *this = other;
    return;
  }
  for (const auto& kv : other.sparse) sparse[kv.first].Append(kv.second);
  for (const auto& kv : other.dense) {
    auto& mine = dense[kv.first];
    mine.dim = kv.second.dim;
    mine.Append(kv.second);
  }
  for (const auto& kv : other.labels) {
    auto& mine = labels[kv.first];
    mine.insert(mine.end(), kv.second.begin(), kv.second.end());
  }
  for (const auto& kv : other.sample_weights) {
    auto& mine = sample_weights[kv.first];
    mine.insert(mine.end(), kv.second.begin(), kv.second.end());
  }
  for (const auto& kv : other.reserved) {
    auto& mine = reserved[kv.first];
    mine.insert(mine.end(), kv.second.begin(), kv.second.end());
  }
  for (const auto& kv : other.id_columns) {
    auto& mine = id_columns[kv.first];
    mine.insert(mine.end(), kv.second.begin(), kv.second.end());
  }
  positions.Append(other.positions);
  size += other.size;
}

ParsedBatch ParsedBatch::Slice(int64_t begin, int64_t end) const {
  TZREC_CHECK(0 <= begin && begin <= end && end <= size);
  TZREC_CHECK(sampled_rows == 0, "slicing a batch with sampled rows");
  ParsedBatch out;
  for (const auto& kv : id_columns) {
    out.id_columns[kv.first].assign(kv.second.begin() + begin, kv.second.begin() + end);
  }
  out.size = end - begin;
  for (const auto& kv : sparse) {
    const SparseValues& src = kv.second;
    SparseValues& dst = out.sparse[kv.first];
    dst.sequence = src.sequence;
    dst.lengths.assign(src.lengths.begin() + begin, src.lengths.begin() + end);
    int64_t value_begin = 0, value_end = 0;
    if (!src.sequence) {
      for (int64_t i = 0; i < begin; ++i) value_begin += src.lengths[i];
      value_end = value_begin;
      for (int64_t i = begin; i < end; ++i) value_end += src.lengths[i];
    } else {
      int64_t step_begin = 0, step_end = 0;
      for (int64_t i = 0; i < begin; ++i) step_begin += src.lengths[i];
      step_end = step_begin;
      for (int64_t i = begin; i < end; ++i) step_end += src.lengths[i];
      for (int64_t j = 0; j < step_begin; ++j) value_begin += src.key_lengths[j];
      value_end = value_begin;
      for (int64_t j = step_begin; j < step_end; ++j) value_end += src.key_lengths[j];
      dst.key_lengths.assign(src.key_lengths.begin() + step_begin, src.key_lengths.begin() + step_end);
    }
    dst.values.assign(src.values.begin() + value_begin, src.values.begin() + value_end);
    if (!src.weights.empty()) {
      dst.weights.assign(src.weights.begin() + value_begin, src.weights.begin() + value_end);
    }
  }
  for (const auto& kv : dense) {
    const DenseValues& src = kv.second;
    DenseValues& dst = out.dense[kv.first];
    dst.dim = src.dim;
    dst.sequence = src.sequence;
    int64_t row_begin = begin, row_end = end;
    if (src.sequence) {
      dst.lengths.assign(src.lengths.begin() + begin, src.lengths.begin() + end);
      row_begin = row_end = 0;
      for (int64_t i = 0; i < begin; ++i) row_begin += src.lengths[i];
      row_end = row_begin;
      for (int64_t i = begin; i < end; ++i) row_end += src.lengths[i];
    }
    dst.values.assign(src.values.begin() + row_begin * dst.dim, src.values.begin() + row_end * dst.dim);
  }
  for (const auto& kv : labels) {
    out.labels[kv.first].assign(kv.second.begin() + begin, kv.second.begin() + end);
  }
  for (const auto& kv : sample_weights) {
    out.sample_weights[kv.first].assign(kv.second.begin() + begin, kv.second.begin() + end);
  }
  for (const auto& kv : reserved) {
    out.reserved[kv.first].assign(kv.second.begin() + begin, kv.second.begin() + end);
  }
  if (positions.size() == static_cast<size_t>(size)) out.positions = positions.Slice(begin, end);
  return out;
}

ParsedBatch ParsedBatch::TakeRows(const std::vector<int64_t>& rows) const {
  TZREC_CHECK(sampled_rows == 0, "taking rows of a batch with sampled rows");
  for (int64_t row : rows) TZREC_CHECK(row >= 0 && row < size, "row ", row, " of ", size);
  // Offsets of each row's first value (and, for sequences, first step), then copies.
  auto prefix = [](const std::vector<int32_t>& counts) {
    std::vector<int64_t> offsets(counts.size() + 1, 0);
    for (size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + counts[i];
    return offsets;
  };
  ParsedBatch out;
  out.size = static_cast<int64_t>(rows.size());
  for (const auto& [name, src] : sparse) {
    SparseValues& dst = out.sparse[name];
    dst.sequence = src.sequence;
    const std::vector<int64_t> row_offsets = prefix(src.lengths);  // values, or steps
    const std::vector<int64_t> step_offsets = src.sequence ? prefix(src.key_lengths) : std::vector<int64_t>();
    for (int64_t row : rows) {
      dst.lengths.push_back(src.lengths[row]);
      int64_t begin = row_offsets[row], end = row_offsets[row + 1];
      if (src.sequence) {
        dst.key_lengths.insert(dst.key_lengths.end(), src.key_lengths.begin() + begin, src.key_lengths.begin() + end);
        begin = step_offsets[begin];
        end = step_offsets[end];
      }
      dst.values.insert(dst.values.end(), src.values.begin() + begin, src.values.begin() + end);
      if (!src.weights.empty()) dst.weights.insert(dst.weights.end(), src.weights.begin() + begin, src.weights.begin() + end);
    }
  }
  for (const auto& [name, src] : dense) {
    DenseValues& dst = out.dense[name];
    dst.dim = src.dim;
    dst.sequence = src.sequence;
    const std::vector<int64_t> row_offsets = src.sequence ? prefix(src.lengths) : std::vector<int64_t>();
    for (int64_t row : rows) {
      int64_t begin = row, end = row + 1;
      if (src.sequence) {
        dst.lengths.push_back(src.lengths[row]);
        begin = row_offsets[row];
        end = row_offsets[row + 1];
      }
      dst.values.insert(dst.values.end(), src.values.begin() + begin * src.dim, src.values.begin() + end * src.dim);
    }
  }
  auto take = [&](const auto& columns, auto* out_columns) {
    for (const auto& [name, values] : columns) {
      auto& dst = (*out_columns)[name];
      for (int64_t row : rows) dst.push_back(values[row]);
    }
  };
  take(labels, &out.labels);
  take(sample_weights, &out.sample_weights);
  take(reserved, &out.reserved);
  return out;
}

}  // namespace tzrec
