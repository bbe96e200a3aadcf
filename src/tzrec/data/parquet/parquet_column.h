// ParquetColumn: one top-level Parquet field in structured (Arrow-like) form, as the reader
// returns it on request and as the writer takes it.
//
// A plain column is just `values` (one entry per row, nulls via values.valid). Lists add one
// ParquetListLevel per nesting level, outermost first: level 0 has one list per row, and each
// list at level k spans children [offsets[i], offsets[i+1]) in level k+1 (or in `values` for
// the innermost level). A map is a single list level whose children are entries: keys[j] and
// values[j] (keys are never null). Empty and null lists differ: a null list has valid = 0
// and no children.
//
// Examples, for rows [[1, 2], null, []] of LIST<INT64>:
//   lists[0].valid = {1, 0, 1}, lists[0].offsets = {0, 2, 2, 2}, values.ints = {1, 2}.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tzrec/data/record_batch.h"

namespace tzrec {

struct ParquetListLevel {
  std::vector<uint8_t> valid;        // one per list at this level; 0 = null list
  std::vector<uint32_t> offsets{0};  // list i holds children [offsets[i], offsets[i+1])

  size_t size() const { return valid.size(); }
  // Appends a list with `num_children` children (0 for null or empty lists).
  void Append(bool is_valid, uint32_t num_children) {
    valid.push_back(is_valid ? 1 : 0);
    offsets.push_back(offsets.back() + num_children);
  }
};

struct ParquetColumn {
  std::string name;
  std::vector<ParquetListLevel> lists;  // empty for a plain column
  bool is_map = false;                  // lists.size() == 1; children are key/value entries
  Column keys;                          // is_map only: one per entry
  Column values;                        // one per row, innermost list item or map entry

  size_t num_rows() const { return lists.empty() ? values.size() : lists[0].size(); }
};

}  // namespace tzrec
