#include "tzrec/embedding/row_init.h"

#include <ATen/Parallel.h>
#include <ATen/core/Generator.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>

namespace tzrec {
namespace {

// splitmix64's finaliser: a bijective mix with full avalanche, enough for initial values.
inline uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// A uniform double in (0, 1) from 53 random bits.
inline double Unit(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

// A standard normal draw for (row_key, column, attempt): Box-Muller over two independent units.
inline double Gaussian(uint64_t row_key, uint64_t column, uint64_t attempt) {
  const uint64_t key = Mix(row_key ^ Mix(column * 0x2545F4914F6CDD1DULL + attempt));
  const double u1 = Unit(Mix(key)), u2 = Unit(Mix(key + 1));
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

inline void InitOneRow(const RowInit& init, int64_t row, int column_begin, int cols, float* out) {
  const uint64_t row_key = Mix(init.seed ^ Mix(static_cast<uint64_t>(row)));
  switch (init.mode) {
    case RowInit::Mode::kUniform: {
      const float scale = static_cast<float>((init.high - init.low) / 16777216.0);
      const float low = static_cast<float>(init.low);
      for (int c = 0; c < cols; ++c) {
        // 24 random bits: every value a float can hold exactly in [0, 1).
        const uint64_t bits = Mix(row_key + static_cast<uint64_t>(column_begin + c)) >> 40;
        out[c] = low + scale * static_cast<float>(bits);
      }
      return;
    }
    case RowInit::Mode::kNormal:
      for (int c = 0; c < cols; ++c) {
        out[c] = static_cast<float>(init.mean + init.std_dev * Gaussian(row_key, column_begin + c, 0));
      }
      return;
    case RowInit::Mode::kTruncatedNormal:
      for (int c = 0; c < cols; ++c) {
        // Rejection: exact for any bounds; after 64 misses (bounds far in a tail) the value is
        // clamped, which no sensible configuration reaches.
        double v = init.mean;
        for (uint64_t attempt = 0; attempt < 64; ++attempt) {
          v = init.mean + init.std_dev * Gaussian(row_key, column_begin + c, attempt);
          if (v >= init.low && v <= init.high) break;
        }
        out[c] = static_cast<float>(std::min(std::max(v, init.low), init.high));
      }
      return;
    case RowInit::Mode::kConstant:
      std::fill(out, out + cols, static_cast<float>(init.value));
      return;
  }
}

}  // namespace

uint64_t TableInitSeed(const std::string& name) {
  const uint64_t base = at::detail::getDefaultCPUGenerator().current_seed();
  uint64_t h = 0xCBF29CE484222325ULL;  // FNV-1a over the name
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001B3ULL;
  return Mix(base ^ Mix(h));
}

RowInit RowInit::ForTable(const std::string& name, int64_t logical_rows) {
  RowInit init;
  init.seed = TableInitSeed(name);
  const double bound = std::sqrt(1.0 / static_cast<double>(std::max<int64_t>(1, logical_rows)));
  init.low = -bound;
  init.high = bound;
  return init;
}

void InitializeRows(const RowInit& init, const int64_t* rows, int64_t n, int column_begin, int cols,
                    float* out, int64_t stride) {
  at::parallel_for(0, n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) InitOneRow(init, rows[i], column_begin, cols, out + i * stride);
  });
}

void InitializeRowRange(const RowInit& init, int64_t first_row, int64_t row_step, int64_t n, int column_begin,
                        int cols, float* out, int64_t stride) {
  at::parallel_for(0, n, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      InitOneRow(init, first_row + i * row_step, column_begin, cols, out + i * stride);
    }
  });
}

}  // namespace tzrec
