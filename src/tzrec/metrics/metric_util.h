// Helpers shared by the metric implementations (not part of the metric interface): reading a
// factory's config message, config errors that name the path, bytes for kGather states, a
// total order on floats for canonical sorting, and the portable pair sampler of the xauc
// metrics. Stateless functions; thread-safe.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tzrec/common/error.h"
#include "tzrec/metrics/metric.h"

namespace tzrec {
namespace metrics_internal {

// The factory's config as its generated message type; the default message when the caller
// passed none (every field at its proto default).
template <typename T>
const T& ConfigAs(const MetricContext& ctx) {
  if (ctx.config == nullptr) return T::default_instance();
  TZREC_CHECK(ctx.config->GetDescriptor() == T::descriptor(), "metric config is ",
              ctx.config->GetDescriptor()->full_name(), ", expected ",
              T::descriptor()->full_name());
  return static_cast<const T&>(*ctx.config);
}

// "<where>.<member>[.<field>]", e.g. "model_config.metrics[0].xauc.sample_ratio".
inline std::string ConfigPath(const MetricContext& ctx, const std::string& member,
                              const std::string& field = "") {
  std::string path = ctx.where.empty() ? member : ctx.where + "." + member;
  if (!field.empty()) path += "." + field;
  return path;
}

// The prediction a binary metric reads: "probs" for one logit, "probs1" for two classes.
inline std::string BinaryPrediction(const MetricContext& ctx, const std::string& member) {
  if (ctx.num_class < 1 || ctx.num_class > 2) {
    Fail(ConfigPath(ctx, member), ": num_class must be <= 2 for ", member, " (got ", ctx.num_class,
         ")");
  }
  return ctx.num_class == 1 ? "probs" : "probs1";
}

// Regression metrics read "y", which only one-output (num_class 1) heads produce.
inline void RequireRegression(const MetricContext& ctx, const std::string& member) {
  if (ctx.num_class != 1) {
    Fail(ConfigPath(ctx, member), ": num_class must be 1 for ", member,
         " (it reads the regression output y; got ", ctx.num_class, ")");
  }
}

// A binned metric's `thresholds` (TorchEasyRec's default 200), checked.
inline int CheckedThresholds(const MetricContext& ctx, const std::string& member, uint32_t thresholds) {
  if (thresholds < 2 || thresholds > (1u << 24)) {
    Fail(ConfigPath(ctx, member, "thresholds"), ": must be in [2, 16777216] (got ", thresholds, ")");
  }
  return static_cast<int>(thresholds);
}

inline void CheckInput(const MetricInput& input, int pred_width, int label_width,
                       const char* metric) {
  TZREC_CHECK(input.rows >= 0, metric);
  TZREC_CHECK(input.rows == 0 || (input.preds != nullptr && input.labels != nullptr), metric);
  TZREC_CHECK(input.pred_width == pred_width, metric, ": pred_width ", input.pred_width,
              " != ", pred_width);
  TZREC_CHECK(input.label_width == label_width, metric, ": label_width ", input.label_width,
              " != ", label_width);
}

// Plain values as bytes (ranks of one job share the architecture, so native layout is fine).
template <typename T>
void AppendPods(const T* values, size_t count, std::string* out) {
  out->append(reinterpret_cast<const char*>(values), count * sizeof(T));
}
template <typename T>
void AppendPod(const T& value, std::string* out) {
  AppendPods(&value, 1, out);
}
// Reads `count` values at `*pos`, appending them to `out`.
template <typename T>
void ReadPods(const std::string& in, size_t* pos, size_t count, std::vector<T>* out) {
  TZREC_CHECK(*pos + count * sizeof(T) <= in.size(), "truncated gathered metric state");
  size_t old = out->size();
  out->resize(old + count);
  if (count > 0) std::memcpy(out->data() + old, in.data() + *pos, count * sizeof(T));
  *pos += count * sizeof(T);
}
template <typename T>
T ReadPod(const std::string& in, size_t* pos) {
  std::vector<T> one;
  ReadPods(in, pos, 1, &one);
  return one[0];
}

// A strict weak order on floats with NaN after everything (NaNs tie with each other), so
// sorting is well defined whatever the predictions.
inline bool FloatLess(float a, float b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a < b;
}

// Uniform in [0, n) by rejection: unlike std::uniform_int_distribution the sequence is the
// same for every standard library, so sampled metrics are reproducible everywhere.
inline uint64_t UniformBelow(std::mt19937_64* rng, uint64_t n) {
  const uint64_t max = std::mt19937_64::max();
  const uint64_t limit = max - max % n;  // [0, limit) holds a whole number of n-cycles
  uint64_t x;
  do {
    x = (*rng)();
  } while (x >= limit);
  return x % n;
}

// Mixes a 64-bit value into a well-spread seed (splitmix64's finaliser).
inline uint64_t MixSeed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The (group key, prediction, label) rows a grouped metric accumulates; gathered over ranks as
// bytes (kGather), so the grouped value is computed over every rank's rows.
class KeyedRows {
 public:
  void Add(const MetricInput& input, const char* metric) {
    CheckInput(input, 1, 1, metric);
    TZREC_CHECK(input.rows == 0 || input.group_keys != nullptr, metric, " needs group keys");
    keys_.insert(keys_.end(), input.group_keys, input.group_keys + input.rows);
    preds_.insert(preds_.end(), input.preds, input.preds + input.rows);
    labels_.insert(labels_.end(), input.labels, input.labels + input.rows);
  }
  void Clear() {
    keys_.clear();
    preds_.clear();
    labels_.clear();
  }
  std::string Serialize() const {
    std::string bytes;
    AppendPod<uint64_t>(keys_.size(), &bytes);
    AppendPods(keys_.data(), keys_.size(), &bytes);
    AppendPods(preds_.data(), preds_.size(), &bytes);
    AppendPods(labels_.data(), labels_.size(), &bytes);
    return bytes;
  }
  // Replaces the rows by every rank's, in rank order.
  void Load(const std::vector<std::string>& per_rank, const char* metric) {
    Clear();
    for (const std::string& bytes : per_rank) {
      size_t pos = 0;
      const uint64_t n = ReadPod<uint64_t>(bytes, &pos);
      ReadPods(bytes, &pos, n, &keys_);
      ReadPods(bytes, &pos, n, &preds_);
      ReadPods(bytes, &pos, n, &labels_);
      TZREC_CHECK(pos == bytes.size(), metric, ": trailing gathered bytes");
    }
  }
  // The rows stably sorted by key, and where each key's run starts (plus the end).
  struct ByKey {
    std::vector<int64_t> keys;
    std::vector<float> preds;
    std::vector<float> labels;
    std::vector<size_t> starts;
  };
  ByKey SortedByKey() const {
    const size_t n = keys_.size();
    std::vector<size_t> order(n);
    for (size_t i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return keys_[a] < keys_[b]; });
    ByKey out;
    out.keys.resize(n);
    out.preds.resize(n);
    out.labels.resize(n);
    for (size_t i = 0; i < n; ++i) {
      out.keys[i] = keys_[order[i]];
      out.preds[i] = preds_[order[i]];
      out.labels[i] = labels_[order[i]];
      if (i == 0 || out.keys[i] != out.keys[i - 1]) out.starts.push_back(i);
    }
    out.starts.push_back(n);
    return out;
  }

 private:
  std::vector<int64_t> keys_;
  std::vector<float> preds_;
  std::vector<float> labels_;
};

// Mean over rows of a per-row error of the regression output (mean_absolute_error,
// mean_squared_error); NaN before any row. kSum.
class MeanRowError : public Metric {
 public:
  MeanRowError(const char* name, double (*error)(double diff)) : name_(name), error_(error) {}
  void Update(const MetricInput& input) override {
    CheckInput(input, 1, 1, name_);
    for (int64_t i = 0; i < input.rows; ++i) {
      sum_ += error_(static_cast<double>(input.preds[i]) - input.labels[i]);
    }
    count_ += static_cast<double>(input.rows);
  }
  double Compute() const override { return count_ > 0.0 ? sum_ / count_ : std::nan(""); }
  void Reset() override { sum_ = count_ = 0.0; }
  MetricCombine combine() const override { return MetricCombine::kSum; }
  void AppendState(std::vector<double>* state) const override {
    state->push_back(sum_);
    state->push_back(count_);
  }
  void LoadState(const std::vector<double>& state, size_t* offset) override {
    sum_ = state.at((*offset)++);
    count_ = state.at((*offset)++);
  }

 private:
  const char* name_;
  double (*error_)(double);
  double sum_ = 0.0;
  double count_ = 0.0;
};

}  // namespace metrics_internal
}  // namespace tzrec
