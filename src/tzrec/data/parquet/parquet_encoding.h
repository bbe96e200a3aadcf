// Parquet value and level encodings: RLE/bit-packed hybrid, DELTA_BINARY_PACKED, the delta
// byte-array encodings, BYTE_STREAM_SPLIT and PLAIN, decoding into widened dense buffers.
//
// Decoders take untrusted bytes: every read is bounds-checked and a shortfall throws
// tzrec::Error ("... truncated") instead of reading past the page. Values are widened on the
// way in (INT32/BOOLEAN -> int64, FLOAT -> double) because that is what RecordBatch holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tzrec/data/parquet/parquet_format.h"
#include "tzrec/data/record_batch.h"

namespace tzrec {
namespace parquet {

// Dense non-null values of one leaf column (or of a dictionary) in output form.
struct ValueBuffer {
  ColumnType type = ColumnType::kInt64;
  std::vector<int64_t> ints;
  std::vector<double> doubles;
  std::vector<uint32_t> offsets{0};  // kString: value i is chars[offsets[i], offsets[i+1])
  std::string chars;

  size_t size() const {
    return type == ColumnType::kString
               ? offsets.size() - 1
               : (type == ColumnType::kInt64 ? ints.size() : doubles.size());
  }
  std::string_view StringAt(size_t i) const {
    return std::string_view(chars).substr(offsets[i], offsets[i + 1] - offsets[i]);
  }
  void AppendString(std::string_view value);
  void Clear();
};

// The ValueBuffer type a physical type decodes to.
ColumnType OutputTypeOf(PhysicalType type);

// Bits needed for values 0..max_value (0 for max_value 0).
int BitWidthFor(uint64_t max_value);

// RLE / bit-packed hybrid runs without a length prefix (levels, dictionary indices and RLE
// booleans add their own framing around this).
class RleBitPackedDecoder {
 public:
  RleBitPackedDecoder(const uint8_t* data, size_t size, int bit_width);
  // Decodes exactly `count` values; fails if the runs end first.
  void Decode(size_t count, uint32_t* out);
  void Decode(size_t count, uint8_t* out);  // for levels; fails on values above 255

 private:
  bool NextRun();
  template <typename T>
  void DecodeInto(size_t count, T* out);

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  int bit_width_;
  // Current run: either `run_left_` copies of `run_value_`, or `run_left_` packed values
  // starting at bit `packed_bit_` of data_.
  bool run_is_packed_ = false;
  uint64_t run_left_ = 0;
  uint32_t run_value_ = 0;
  uint64_t packed_bit_ = 0;
};

// Appends the RLE/bit-packed hybrid encoding of `values` (each < 2^bit_width) to `out`.
void EncodeRleBitPacked(const uint32_t* values, size_t count, int bit_width, std::string* out);
void EncodeRleBitPacked(const uint8_t* values, size_t count, int bit_width, std::string* out);

// DELTA_BINARY_PACKED for INT32 (wrapping in 32 bits) and INT64.
class DeltaBinaryPackedDecoder {
 public:
  DeltaBinaryPackedDecoder(const uint8_t* data, size_t size, bool is_int32);
  uint64_t total_values() const { return total_values_; }
  // Decodes the next `count` values; fails past total_values() or truncated data.
  void Decode(size_t count, int64_t* out);
  // Bytes used by the values decoded so far; once all are decoded, where the encoding ends.
  size_t bytes_consumed() const { return pos_; }

 private:
  uint64_t ReadVarint();
  void StartBlock();
  void StartMiniblock();

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  bool is_int32_;
  uint64_t block_size_ = 0;
  uint64_t miniblocks_per_block_ = 0;
  uint64_t values_per_miniblock_ = 0;
  uint64_t total_values_ = 0;
  uint64_t decoded_ = 0;
  uint64_t last_value_ = 0;  // wrapping arithmetic, as the format prescribes
  uint64_t min_delta_ = 0;
  std::vector<uint8_t> bit_widths_;
  size_t miniblock_index_ = 0;   // within the current block
  uint64_t miniblock_left_ = 0;  // values left in the current miniblock
  size_t miniblock_start_ = 0;   // byte offset of the current miniblock's packed values
  uint64_t miniblock_pos_ = 0;   // values already taken from it
};

// Decoders that append `count` values to `out` and return the bytes consumed.
size_t DecodePlain(PhysicalType type, int32_t type_length, const uint8_t* data, size_t size,
                   size_t count, ValueBuffer* out);
size_t DecodeDeltaBinaryPacked(PhysicalType type, const uint8_t* data, size_t size, size_t count,
                               ValueBuffer* out);
size_t DecodeDeltaLengthByteArray(const uint8_t* data, size_t size, size_t count, ValueBuffer* out);
size_t DecodeDeltaByteArray(const uint8_t* data, size_t size, size_t count, ValueBuffer* out);
size_t DecodeByteStreamSplit(PhysicalType type, const uint8_t* data, size_t size, size_t count,
                             ValueBuffer* out);
// BOOLEAN with RLE encoding (data pages v2): 4-byte length prefix, then bit width 1 runs.
size_t DecodeRleBooleans(const uint8_t* data, size_t size, size_t count, ValueBuffer* out);

// PLAIN encoders for the writer (ints/doubles narrowed to the physical type by the caller).
void EncodePlainBooleans(const std::vector<int64_t>& values, std::string* out);

}  // namespace parquet
}  // namespace tzrec
