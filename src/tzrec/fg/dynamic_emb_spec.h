// DynamicEmbSpec: a feature's `dynamicemb` settings (TorchEasyRec's DynamicEmbedding, which it
// hands to NVIDIA's GPU-only dynamicemb): a table keyed by raw int64 ids that grows row by row
// up to max_capacity, evicts the lowest-scored id when full, and may admit a new id only once
// it has been seen `threshold` times. embedding/dynamic_row_index.h does the work on CPU.
// Plain data; thread-safe to share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <google/protobuf/message.h>

namespace tzrec::fg {

// How the rows of ids are initialised (DynamicEmbInitializerArgs, defaults resolved).
struct DynamicEmbInit {
  enum class Mode { kUniform, kNormal, kTruncatedNormal, kConstant };
  Mode mode = Mode::kUniform;
  double mean = 0.0;
  double std_dev = -1.0;  // < 0: 1 / sqrt(embedding_dim) of the table it initialises
  double lower = 0.0;     // uniform and truncated normal bounds
  double upper = 0.0;
  double value = 0.0;     // constant
  bool operator==(const DynamicEmbInit& o) const {
    return mode == o.mode && mean == o.mean && std_dev == o.std_dev && lower == o.lower && upper == o.upper &&
           value == o.value;
  }
};

struct DynamicEmbSpec {
  // What an id's score is, the lowest being evicted first: the training step of its last
  // access (STEP; TIMESTAMP ranks ids the same way, see dynamic_row_index.h), its access count
  // (LFU), or none (NO_EVICTION: a full table refuses new ids).
  enum class Score { kStep, kTimestamp, kLfu, kNoEviction };

  int64_t max_capacity = 0;  // rows
  Score score = Score::kStep;
  DynamicEmbInit init;       // rows of admitted ids (default uniform +-1/sqrt(max_capacity))
  double eval_value = 0.0;   // evaluation / serving: ids without a row read this constant
  // frequency_admission_strategy: an id gets a row once seen in `admission_threshold`
  // training steps (its occurrences there under LFU); until then it reads `unadmitted_value`
  // and its gradient is dropped. 0: every id is admitted.
  int64_t admission_threshold = 0;
  double unadmitted_value = 0.0;
  int64_t counter_capacity = 0;  // ids the admission counter holds (lowest counts dropped)

  // "step, 100000 rows, admission after 5" (logs, sharing errors).
  std::string Describe() const;
  bool operator==(const DynamicEmbSpec& o) const {
    return max_capacity == o.max_capacity && score == o.score && init == o.init && eval_value == o.eval_value &&
           admission_threshold == o.admission_threshold && unadmitted_value == o.unadmitted_value &&
           counter_capacity == o.counter_capacity;
  }
};

// The `dynamicemb` of a feature message, if set, defaults resolved as TorchEasyRec resolves
// them. Fields that cannot apply on CPU are explained (GPU caching, hash buckets) or refused
// (CUSTOMIZED scores need Python hooks, init_table, non-constant initialisers for ids without
// a row); `where` prefixes errors.
std::optional<DynamicEmbSpec> ParseDynamicEmbSpec(const google::protobuf::Message& feature, const std::string& where);

}  // namespace tzrec::fg
