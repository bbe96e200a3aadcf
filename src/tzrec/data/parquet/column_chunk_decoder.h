// Decodes one column chunk (all pages of one leaf column in one row group) into levels and
// dense values.
//
// Handles dictionary pages, data pages v1 and v2, every supported codec and encoding, and page
// CRCs. The chunk's bytes are untrusted: sizes and counts are checked against the chunk, the
// page and the column metadata, so corrupt input fails (tzrec::Error without file name, row
// group or column; the file reader adds them) instead of reading out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tzrec/data/parquet/parquet_encoding.h"
#include "tzrec/data/parquet/parquet_format.h"
#include "tzrec/data/parquet/parquet_schema.h"

namespace tzrec {
namespace parquet {

struct LeafData {
  size_t num_levels = 0;
  std::vector<uint8_t> def_levels;  // empty when max_def == 0 (every value present)
  std::vector<uint8_t> rep_levels;  // empty when max_rep == 0 (one level per row)
  ValueBuffer values;               // the non-null values, in order
};

// `data` holds the chunk's bytes (from its first page to total_compressed_size);
// `num_rows` is the row group's row count, checked against the decoded levels.
void DecodeColumnChunk(const uint8_t* data, size_t size, const ColumnMetaData& meta,
                       const LeafColumn& leaf, int64_t num_rows, bool verify_checksums,
                       LeafData* out);

}  // namespace parquet
}  // namespace tzrec
