#include "tzrec/fg/fg_hash.h"

#include <farmhash.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace tzrec::fg {
namespace {

constexpr uint64_t kStdHashSeed = 0xc70f6907ULL;
constexpr uint64_t kMul = (0xc6a4a793ULL << 32) + 0x5bd1e995ULL;

inline uint64_t ShiftMix(uint64_t v) { return v ^ (v >> 47); }

// Little-endian load of the last 1..7 bytes, as libstdc++'s load_bytes does on x86/ARM.
inline uint64_t LoadTail(const unsigned char* p, size_t n) {
  uint64_t result = 0;
  for (size_t i = n; i-- > 0;) result = (result << 8) + p[i];
  return result;
}

}  // namespace

HashKind DefaultHashKind() {
  static const HashKind kind = [] {
    const char* env = std::getenv("USE_FARM_HASH_TO_BUCKETIZE");
    if (!env) return HashKind::kStdHash;
    std::string value(env);
    for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return (value == "true" || value == "1") ? HashKind::kFarmHash : HashKind::kStdHash;
  }();
  return kind;
}

uint64_t StdStringHash(std::string_view bytes) {
  const auto* buf = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t len = bytes.size();
  const size_t aligned = len & ~static_cast<size_t>(7);
  uint64_t hash = kStdHashSeed ^ (static_cast<uint64_t>(len) * kMul);
  for (size_t i = 0; i < aligned; i += 8) {
    uint64_t word;
    std::memcpy(&word, buf + i, 8);
    hash ^= ShiftMix(word * kMul) * kMul;
    hash *= kMul;
  }
  if ((len & 7) != 0) {
    hash ^= LoadTail(buf + aligned, len & 7);
    hash *= kMul;
  }
  hash = ShiftMix(hash) * kMul;
  return ShiftMix(hash);
}

uint64_t StdFloatHash(float value) {
  if (value == 0.0f) return 0;
  char bytes[sizeof(float)];
  std::memcpy(bytes, &value, sizeof(float));
  return StdStringHash(std::string_view(bytes, sizeof(float)));
}

uint64_t FarmFingerprint64(std::string_view bytes) {
  return util::Fingerprint64(bytes.data(), bytes.size());
}

int64_t HashToBucket(std::string_view text, uint64_t buckets, HashKind kind) {
  uint64_t hash = kind == HashKind::kFarmHash ? FarmFingerprint64(text) : StdStringHash(text);
  return static_cast<int64_t>(hash % buckets);
}

int64_t HashFloatToBucket(float value, uint64_t buckets, HashKind kind) {
  if (kind == HashKind::kFarmHash) {
    char bytes[sizeof(float)];
    std::memcpy(bytes, &value, sizeof(float));
    return static_cast<int64_t>(FarmFingerprint64(std::string_view(bytes, sizeof(float))) % buckets);
  }
  return static_cast<int64_t>(StdFloatHash(value) % buckets);
}

}  // namespace tzrec::fg
