// String (and float) to bucket hashing of feature generation (no LibTorch).
//
// TorchEasyRec's FG hashes a value's text with the C++ standard library's std::hash of
// libstdc++ (a MurmurHash2 variant over the bytes, seed 0xc70f6907) and takes it modulo
// hash_bucket_size; float results (expr_feature) hash their 4 IEEE bytes the same way, with
// 0.0 -> 0. We spell the algorithm out instead of calling std::hash so the ids do not depend
// on the standard library a binary was built with. With the environment variable
// USE_FARM_HASH_TO_BUCKETIZE=true both switch to FarmHash Fingerprint64 (Debian's
// libfarmhash), the function behind TensorFlow's string_to_hash_bucket_fast, so data and
// models of the EasyRec (TensorFlow) lineage hash identically.
#pragma once

#include <cstdint>
#include <string_view>

namespace tzrec::fg {

enum class HashKind { kStdHash, kFarmHash };

// The process-wide choice (read once from USE_FARM_HASH_TO_BUCKETIZE).
HashKind DefaultHashKind();

// libstdc++'s std::hash<std::string> on 64-bit targets, written out.
uint64_t StdStringHash(std::string_view bytes);
// libstdc++'s std::hash<float>: 0 for +-0.0, else the string hash of the 4 bytes.
uint64_t StdFloatHash(float value);
// FarmHash Fingerprint64 (TensorFlow's string_to_hash_bucket_fast).
uint64_t FarmFingerprint64(std::string_view bytes);

// Bucket of a text value / a float value in [0, buckets).
int64_t HashToBucket(std::string_view text, uint64_t buckets, HashKind kind);
int64_t HashFloatToBucket(float value, uint64_t buckets, HashKind kind);

}  // namespace tzrec::fg
