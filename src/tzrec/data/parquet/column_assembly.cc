#include "tzrec/data/parquet/column_assembly.h"

#include "tzrec/common/error.h"

namespace tzrec {
namespace parquet {
namespace {

void ResetColumn(ColumnType type, Column* column) {
  column->type = type;
  column->valid.clear();
  column->offsets.assign(1, 0);
  column->chars.clear();
  column->ints.clear();
  column->doubles.clear();
}

// Appends dense value `index` (or a null) as the next slot of `out`.
void AppendSlot(const ValueBuffer& values, bool present, size_t index, Column* out) {
  out->valid.push_back(present ? 1 : 0);
  switch (values.type) {
    case ColumnType::kInt64: out->ints.push_back(present ? values.ints[index] : 0); break;
    case ColumnType::kDouble: out->doubles.push_back(present ? values.doubles[index] : 0.0); break;
    case ColumnType::kString: {
      if (present) {
        std::string_view text = values.StringAt(index);
        out->chars.append(text.data(), text.size());
      }
      out->offsets.push_back(static_cast<uint32_t>(out->chars.size()));
      break;
    }
  }
}

void AssembleFlat(const LeafColumn& leaf, LeafData* data, Column* out) {
  ValueBuffer& values = data->values;
  const size_t n = data->num_levels;
  if (leaf.max_def == 0) {  // required: the dense values are the column
    TZREC_CHECK(values.size() == n, values.size(), " values for ", n, " rows");
    out->valid.assign(n, 1);
    out->ints = std::move(values.ints);
    out->doubles = std::move(values.doubles);
    out->offsets = std::move(values.offsets);
    out->chars = std::move(values.chars);
    return;
  }
  const uint8_t* def = data->def_levels.data();
  const uint8_t present_level = static_cast<uint8_t>(leaf.max_def);
  size_t next = 0;
  out->valid.resize(n);
  for (size_t i = 0; i < n; ++i) out->valid[i] = def[i] == present_level;
  size_t present = 0;
  for (size_t i = 0; i < n; ++i) present += out->valid[i];
  if (present != values.size()) Fail(present, " non-null levels but ", values.size(), " values");
  switch (values.type) {
    case ColumnType::kInt64:
      out->ints.assign(n, 0);
      for (size_t i = 0; i < n; ++i) {
        if (out->valid[i]) out->ints[i] = values.ints[next++];
      }
      break;
    case ColumnType::kDouble:
      out->doubles.assign(n, 0.0);
      for (size_t i = 0; i < n; ++i) {
        if (out->valid[i]) out->doubles[i] = values.doubles[next++];
      }
      break;
    case ColumnType::kString:
      out->offsets.resize(n + 1);
      for (size_t i = 0; i < n; ++i) {
        if (out->valid[i]) ++next;
        out->offsets[i + 1] = values.offsets[next];
      }
      out->chars = std::move(values.chars);
      break;
  }
}

}  // namespace

void AssembleLeaf(const LeafColumn& leaf, LeafData* data, std::vector<ParquetListLevel>* lists,
                  Column* values) {
  ResetColumn(data->values.type, values);
  if (leaf.max_rep == 0) {
    AssembleFlat(leaf, data, values);
    return;
  }
  const int max_rep = leaf.max_rep;
  lists->assign(max_rep, ParquetListLevel());
  const ValueBuffer& dense = data->values;
  size_t next = 0;
  for (size_t i = 0; i < data->num_levels; ++i) {
    const int r = data->rep_levels[i];
    const int d = data->def_levels[i];
    if (r > 0) {
      const ParquetListLevel& level = (*lists)[r - 1];
      if (level.size() == 0 || level.offsets.back() == level.offsets[level.size() - 1] ||
          d < leaf.entry_def[r - 1]) {
        Fail("levels (repetition ", r, ", definition ", d, ") at position ", i,
             " continue a list that has no entries");
      }
    }
    bool slot = false;
    for (int j = 1; j <= max_rep; ++j) {
      ParquetListLevel& level = (*lists)[j - 1];
      if (j > r) {  // a new list starts at this level, inside the entry just opened above
        level.valid.push_back(d >= leaf.list_def[j - 1] ? 1 : 0);
        level.offsets.push_back(level.offsets.back());
      }
      if (j >= r) {
        if (d < leaf.entry_def[j - 1]) break;  // null or empty list: nothing deeper
        ++level.offsets.back();
        slot = j == max_rep;
      }
    }
    if (slot) {
      bool present = d == leaf.max_def;
      if (present && next >= dense.size()) Fail("more non-null levels than values");
      AppendSlot(dense, present, present ? next++ : 0, values);
    }
  }
  if (next != dense.size()) Fail(dense.size(), " values but only ", next, " non-null levels");
}

}  // namespace parquet
}  // namespace tzrec
