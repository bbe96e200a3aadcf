// Helpers shared by the metric implementations (not part of the metric interface): reading a
// factory's config message, config errors that name the path, bytes for kGather states, a
// total order on floats for canonical sorting, and the portable pair sampler of the xauc
// metrics. Stateless functions; thread-safe.
#pragma once

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

}  // namespace metrics_internal
}  // namespace tzrec
