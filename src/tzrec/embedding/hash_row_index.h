// The id -> row map of a hash-stored embedding table: rows are handed out in order of first
// touch, so a table's memory follows the ids actually seen rather than its declared size. Also
// the row -> slot map of per-step gradient sums (fused_lookup.cc, dist/data_parallel.cc).
//
// A thin wrapper over tsl::robin_map (Debian's robin-map-dev: open addressing with
// robin-hood probing, about 3x faster than std::unordered_map on the per-batch lookups here).
// Not thread-safe: the owning table locks around it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace tzrec {

class HashRowIndex {
 public:
  HashRowIndex();
  ~HashRowIndex();
  HashRowIndex(const HashRowIndex&) = delete;
  HashRowIndex& operator=(const HashRowIndex&) = delete;

  // Row of `id`, or -1 when it has none.
  int64_t Find(int64_t id) const;
  // Row of `id`; an unseen id gets the next row (`*inserted` set).
  int64_t FindOrInsert(int64_t id, bool* inserted);
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  // id of each row, in row order.
  const std::vector<int64_t>& ids() const { return ids_; }
  void Clear();
  // Room for `n` ids without rehashing.
  void Reserve(int64_t n);

 private:
  struct Map;
  std::unique_ptr<Map> map_;
  std::vector<int64_t> ids_;
};

}  // namespace tzrec
