#include "tzrec/embedding/hash_row_index.h"

#include <tsl/robin_map.h>

namespace tzrec {

namespace {

// std::hash<int64_t> is the identity, and with a power-of-two table the low bits pick the
// bucket: ids that come in runs (small raw ids, a storage's rows table after table) then fill
// runs of neighbouring buckets and every insert probes to the end of its run. A multiplicative
// mix (Fibonacci hashing's constant, high bits folded down) spreads them.
struct MixedHash {
  size_t operator()(int64_t id) const {
    const uint64_t x = static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ULL;
    return static_cast<size_t>(x ^ (x >> 32));
  }
};

}  // namespace

struct HashRowIndex::Map {
  tsl::robin_map<int64_t, int64_t, MixedHash> rows;
};

HashRowIndex::HashRowIndex() : map_(std::make_unique<Map>()) {}
HashRowIndex::~HashRowIndex() = default;

int64_t HashRowIndex::Find(int64_t id) const {
  auto it = map_->rows.find(id);
  return it == map_->rows.end() ? -1 : it->second;
}

int64_t HashRowIndex::FindOrInsert(int64_t id, bool* inserted) {
  auto [it, added] = map_->rows.try_emplace(id, static_cast<int64_t>(ids_.size()));
  *inserted = added;
  if (added) ids_.push_back(id);
  return it->second;
}

void HashRowIndex::Reserve(int64_t n) {
  map_->rows.reserve(static_cast<size_t>(n));
  ids_.reserve(static_cast<size_t>(n));
}

void HashRowIndex::Clear() {
  map_->rows.clear();
  ids_.clear();
}

}  // namespace tzrec
