// The bucketize step of feature generation: a value (text or number) to an embedding row id.
//
// Built from a feature message's bucketizer fields with TorchEasyRec's precedence:
// zch / dynamicemb > hash_bucket_size > num_buckets > vocab_list > vocab_dict > vocab_file >
// boundaries.
//   zch, dynamicemb   hash of the value's text modulo 2^63 - 1 (rows: zch_size through the
//                     managed-collision index, or max_capacity through the dynamic table)
//   hash_bucket_size  hash of the value's text (fg_hash.h) modulo the size
//   num_buckets       the value is the id; it must be an integer in [0, num_buckets)
//   vocab_list        without default_bucketize_value the list is [default_value, "<OOV>",
//                     entries...]: the default value maps to 0, unknown values to 1, entries
//                     from 2; with it the list is used as is and unknown values map to it
//   vocab_dict        entries map to their ids; default_value maps to 0 unless
//                     default_bucketize_value is set; unknown values map to
//                     default_bucketize_value (1 when unset)
//   vocab_file        one token per line ("token" or "token id"); needs default_bucketize_value
//   boundaries        number of boundaries <= value (a value on a boundary goes up)
// Immutable after construction; safe to share between threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <google/protobuf/message.h>

#include "tzrec/fg/fg_hash.h"

namespace tzrec::fg {

// The largest bucket count (hash_bucket_size, num_buckets, vocabulary ids) accepted: 2^40.
constexpr int64_t kMaxBuckets = int64_t{1} << 40;
// The hash range of zch features' ids (TorchEasyRec's MAX_HASH_BUCKET_SIZE, 2^63 - 1).
constexpr int64_t kZchHashBuckets = INT64_MAX;

class Bucketizer {
 public:
  enum class Kind { kNone, kHash, kNumBuckets, kVocab, kBoundaries };

  Bucketizer() = default;
  // Reads the bucketizer fields present on `feature` (any feature message type). `where`
  // prefixes errors (e.g. "feature_configs[2].id_feature"). Vocab files are read relative to
  // the feature's asset_dir when it has one.
  static Bucketizer FromConfig(const google::protobuf::Message& feature, const std::string& where);

  Kind kind() const { return kind_; }
  bool active() const { return kind_ != Kind::kNone; }
  // Embedding rows the ids fall into.
  int64_t num_embeddings() const { return num_embeddings_; }
  // kVocab etc.: what fg.json calls the bucketizer (for create_fg_json).
  const std::vector<std::string>& effective_vocab_list() const { return vocab_list_; }
  const std::vector<std::pair<std::string, int64_t>>& effective_vocab_dict() const {
    return vocab_dict_entries_;
  }
  const std::vector<double>& boundaries() const { return boundaries_; }

  // Bucket of a text value. Returns false with `error` set when the value cannot be bucketized
  // (num_buckets: not an integer or out of range; boundaries: not a number).
  bool FromText(std::string_view text, int64_t* id, std::string* error) const;
  // Bucket of a number (expr/raw/lookup results).
  bool FromNumber(double value, int64_t* id, std::string* error) const;

 private:
  Kind kind_ = Kind::kNone;
  int64_t num_embeddings_ = 0;
  uint64_t buckets_ = 0;
  HashKind hash_kind_ = HashKind::kStdHash;
  std::vector<double> boundaries_;
  std::vector<std::string> vocab_list_;
  std::vector<std::pair<std::string, int64_t>> vocab_dict_entries_;
  std::unordered_map<std::string, int64_t> vocab_;
  int64_t oov_id_ = 1;
};

}  // namespace tzrec::fg
