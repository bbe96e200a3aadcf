// The per-row interface between feature generation and one feature type's operator (no
// LibTorch). FeatureGenerator (feature_generator.h) reads each input's values for a row (or a
// sequence step) into InputItems, calls the feature's FeatureOp, then applies default_value
// and the bucketizer to what the op yields. Ops are immutable; Compute must be thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tzrec/common/registry.h"

namespace tzrec::fg {

// One input's values for one row (or one sequence step).
struct InputItems {
  bool missing = true;
  std::string_view text;                // whole value (raw_text inputs)
  std::vector<std::string_view> items;  // split values
  std::string scratch;                  // text of a numeric cell
  void Reset() {
    missing = true;
    text = {};
    items.clear();
  }
};

// What an op yields for one row/step, before default_value and bucketizing.
struct OpValues {
  enum class Kind { kTexts, kNumbers, kIds };
  Kind kind = Kind::kTexts;
  std::vector<std::string> texts;
  std::vector<double> numbers;
  std::vector<int64_t> ids;
  std::vector<float> weights;  // weighted id features
  bool empty() const { return texts.empty() && numbers.empty() && ids.empty(); }
  void Clear() {
    texts.clear();
    numbers.clear();
    ids.clear();
    weights.clear();
  }
};

class FeatureOp {
 public:
  virtual ~FeatureOp() = default;
  // Fills `out` (already cleared) from the inputs (in FeatureInfo::inputs order). Returns
  // false with `error` set for bad input values.
  virtual bool Compute(const std::vector<InputItems>& inputs, OpValues* out,
                       std::string* error) const = 0;
  // Kind of values this op yields (the default value is parsed accordingly).
  virtual OpValues::Kind kind() const = 0;
  // Ops that yield ids (kIds: tokenize) turn the default value into ids the same way.
  virtual void EncodeDefault(const std::string& text, std::vector<int64_t>* ids) const {}
};

struct FeatureInfo;
// The op of `info`'s feature type (FeatureTypeRegistry); errors name the config path.
std::unique_ptr<FeatureOp> CreateFeatureOp(const FeatureInfo& info);

using FeatureOpFactory = std::function<std::unique_ptr<FeatureOp>(const FeatureInfo&)>;
// Feature types by config name (FeatureConfig's `feature` oneof members, also as
// sequence_<type>, and SeqFeatureConfig's), each with the config fields it honours.
Registry<FeatureOpFactory>& FeatureTypeRegistry();

}  // namespace tzrec::fg
