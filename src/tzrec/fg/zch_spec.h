// ZchSpec: a feature's `zch` (zero-collision hashing) settings, as TorchEasyRec maps them onto
// TorchRec's managed-collision module: a table of zch_size rows, raw ids admitted to rows and
// evicted from them every eviction_interval training steps by an LFU, LRU or distance-LFU
// policy (embedding/zch_row_index.h does the work). Plain data; thread-safe to share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <google/protobuf/message.h>

namespace tzrec::fg {

struct ZchSpec {
  enum class Policy { kLfu, kLru, kDistanceLfu };
  // TorchRec's threshold filters (threshold_filtering_func): ids whose history count is not
  // above the threshold are neither admitted nor update their slot's metadata that round.
  enum class Filter { kNone, kAverage, kDynamic, kProbabilistic };

  int64_t size = 0;               // rows; the last is shared by ids not (yet) admitted
  int64_t eviction_interval = 5;  // training steps between admissions / evictions
  Policy policy = Policy::kLfu;
  float decay_exponent = 1.0f;    // lru, distance_lfu
  Filter filter = Filter::kNone;
  // kDynamic: threshold_skew_multiplier (10); kProbabilistic: per_id_probability (0.01).
  double filter_param = 0.0;

  // "lfu, 10000 rows, eviction every 2 steps" (logs, sharing errors).
  std::string Describe() const;
  bool operator==(const ZchSpec& o) const {
    return size == o.size && eviction_interval == o.eviction_interval && policy == o.policy &&
           decay_exponent == o.decay_exponent && filter == o.filter && filter_param == o.filter_param;
  }
};

// The `zch` of a feature message, if set. TorchEasyRec evaluates threshold_filtering_func as
// Python; we accept its three named filters, bare or bound with functools.partial
// ("partial(dynamic_threshold_filter, threshold_skew_multiplier=5)"), and fail on anything
// else. `where` prefixes errors.
std::optional<ZchSpec> ParseZchSpec(const google::protobuf::Message& feature, const std::string& where);

}  // namespace tzrec::fg
