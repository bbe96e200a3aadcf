#include "tzrec/embedding/hash_row_index.h"

#include <tsl/robin_map.h>

namespace tzrec {

struct HashRowIndex::Map {
  tsl::robin_map<int64_t, int64_t> rows;
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

void HashRowIndex::Clear() {
  map_->rows.clear();
  ids_.clear();
}

}  // namespace tzrec
