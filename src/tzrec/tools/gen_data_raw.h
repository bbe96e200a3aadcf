// gen_data's raw inputs for FG_NORMAL / FG_DAG configs: which raw columns the features read
// and how each one's values are drawn per feature type (ids the bucketizer accepts, numbers an
// expression can take, maps, texts), plus the samplers the rest of gen_data shares.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tzrec/fg/feature_info.h"
#include "tzrec/tools/gen_data.h"

namespace tzrec::gen_data_internal {

// Zipf-like rank in [0, n): inverse CDF of a continuous power law with exponent s > 1.
int64_t SampleZipf(std::mt19937_64& rng, int64_t n, double s);
std::string FormatFloat(double value);

// How one raw column's values are drawn, from the first feature input that reads it.
struct RawInput {
  std::string column;
  const fg::FeatureInfo* info = nullptr;
  size_t input_index = 0;  // which of the feature's inputs
  bool sequence = false;
};

// The raw columns of `infos` in first-use order (FG_DAG: not those another feature produces).
std::vector<RawInput> PlanRawInputs(const std::vector<fg::FeatureInfo>& infos, protos::FgMode mode);

// Whether the feature's normalizer or expression takes a log, square root or power of its
// inputs (Criteo's `expr=log(x+3)`): negative draws would turn into NaN features and labels.
bool NeedsNonnegativeInputs(const fg::FeatureInfo& info);

class RawValueDrawer {
 public:
  explicit RawValueDrawer(const GenDataOptions& options) : options_(options) {}
  // One value (one row, or one sequence step) of a raw input.
  std::string RawValue(const RawInput& raw, std::mt19937_64& rng) const;

 private:
  // A categorical token the feature's bucketizer accepts.
  std::string Token(const fg::FeatureInfo& info, std::mt19937_64& rng, const char* prefix,
                    int64_t domain) const;
  // A number inside the feature's boundaries (with a margin), nonnegative where needed.
  std::string Number(const fg::FeatureInfo& info, std::normal_distribution<double>& normal,
                     std::mt19937_64& rng) const;

  GenDataOptions options_;
};

}  // namespace tzrec::gen_data_internal
