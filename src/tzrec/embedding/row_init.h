// Deterministic initial values of embedding rows.
//
// Each initial value is a pure function of (table seed, logical row, logical column): a
// counter-based generator instead of one random stream over the whole table. So a row
// allocated on first touch (hash-stored tables), a rank's shard, and the whole table held by
// one process all start from the same values, without drawing the rows nobody holds; and a
// row never trained can be recomputed at inference. Values are uniform in +-sqrt(1/rows)
// (TorchRec's default bound), or as a dynamicemb table's initializer says (uniform, normal,
// truncated normal, constant). Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <string>

namespace tzrec {

// The seed of table `name`: the default torch generator's seed (so runs are reproducible as
// before) mixed with the table name (so tables differ). Does not advance the generator.
uint64_t TableInitSeed(const std::string& name);

// How the rows of one logical table are initialised.
struct RowInit {
  enum class Mode { kUniform, kNormal, kTruncatedNormal, kConstant };
  uint64_t seed = 0;
  Mode mode = Mode::kUniform;
  double low = 0.0, high = 0.0;  // uniform in [low, high); truncated normal's bounds
  double mean = 0.0, std_dev = 1.0;  // (truncated) normal
  double value = 0.0;                // constant
  // Uniform in +-sqrt(1/logical_rows).
  static RowInit ForTable(const std::string& name, int64_t logical_rows);
};

// Writes columns [column_begin, column_begin + cols) of logical rows `rows[0..n)` to
// out + i * stride (floats). Parallel over rows for large n.
void InitializeRows(const RowInit& init, const int64_t* rows, int64_t n, int column_begin, int cols,
                    float* out, int64_t stride);
// The same for the n logical rows first_row, first_row + row_step, ... (a row-wise shard's
// rows are every world_size-th).
void InitializeRowRange(const RowInit& init, int64_t first_row, int64_t row_step, int64_t n, int column_begin,
                        int cols, float* out, int64_t stride);

}  // namespace tzrec
