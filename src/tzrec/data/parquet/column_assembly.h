// Record assembly: turns one leaf column's repetition/definition levels and dense values back
// into rows (nulls, list boundaries), the inverse of the writer's shredding.
#pragma once

#include <vector>

#include "tzrec/data/parquet/column_chunk_decoder.h"
#include "tzrec/data/parquet/parquet_column.h"
#include "tzrec/data/parquet/parquet_schema.h"

namespace tzrec {
namespace parquet {

// Fills `values` with one slot per row (max_rep == 0) or per innermost list item, and, for
// repeated leaves, `lists` with leaf.max_rep levels. Consumes `data`. Fails on level
// sequences no valid file produces (e.g. continuing a list that was never started).
void AssembleLeaf(const LeafColumn& leaf, LeafData* data, std::vector<ParquetListLevel>* lists,
                  Column* values);

}  // namespace parquet
}  // namespace tzrec
