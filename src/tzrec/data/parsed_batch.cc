#include "tzrec/data/parsed_batch.h"

#include "tzrec/common/error.h"

namespace tzrec {

void ParsedBatch::Append(const ParsedBatch& other) {
  if (size == 0 && sparse.empty() && dense.empty() && labels.empty()) {
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
  positions.Append(other.positions);
  size += other.size;
}

ParsedBatch ParsedBatch::Slice(int64_t begin, int64_t end) const {
  TZREC_CHECK(0 <= begin && begin <= end && end <= size);
  ParsedBatch out;
  out.size = end - begin;
  for (const auto& kv : sparse) {
    const SparseValues& src = kv.second;
    int64_t value_begin = 0;
    for (int64_t i = 0; i < begin; ++i) value_begin += src.lengths[i];
    int64_t value_end = value_begin;
    for (int64_t i = begin; i < end; ++i) value_end += src.lengths[i];
    SparseValues& dst = out.sparse[kv.first];
    dst.values.assign(src.values.begin() + value_begin, src.values.begin() + value_end);
    dst.lengths.assign(src.lengths.begin() + begin, src.lengths.begin() + end);
  }
  for (const auto& kv : dense) {
    DenseValues& dst = out.dense[kv.first];
    dst.dim = kv.second.dim;
    dst.values.assign(kv.second.values.begin() + begin * dst.dim,
                      kv.second.values.begin() + end * dst.dim);
  }
  for (const auto& kv : labels) {
    out.labels[kv.first].assign(kv.second.begin() + begin, kv.second.begin() + end);
  }
  for (const auto& kv : sample_weights) {
    out.sample_weights[kv.first].assign(kv.second.begin() + begin, kv.second.begin() + end);
  }
  if (positions.size() == static_cast<size_t>(size)) out.positions = positions.Slice(begin, end);
  return out;
}

}  // namespace tzrec
