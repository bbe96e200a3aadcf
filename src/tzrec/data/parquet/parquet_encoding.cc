#include "tzrec/data/parquet/parquet_encoding.h"

#include <cstring>
#include <limits>

#include "tzrec/common/error.h"

namespace tzrec {
namespace parquet {
namespace {

// Reads `width` (<= 64) bits starting at bit `bit` of `data`, least significant bit first.
// The caller guarantees the bits lie inside the buffer.
uint64_t ReadBits(const uint8_t* data, uint64_t bit, int width) {
  if (width == 0) return 0;
  if (width > 56) {
    uint64_t low = ReadBits(data, bit, 32);
    return low | (ReadBits(data, bit + 32, width - 32) << 32);
  }
  const uint8_t* p = data + (bit >> 3);
  int shift = static_cast<int>(bit & 7);
  int bytes = (shift + width + 7) >> 3;
  uint64_t word = 0;
  for (int i = 0; i < bytes; ++i) word |= static_cast<uint64_t>(p[i]) << (8 * i);
  return (word >> shift) & (width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1);
}

uint32_t LoadU32(const uint8_t* p) {
  uint32_t value;
  std::memcpy(&value, p, 4);
  return value;
}

void NeedBytes(size_t available, uint64_t needed, const char* what) {
  if (needed > available) {
    Fail(what, " truncated: needs ", needed, " bytes but only ", available, " are left");
  }
}

void AppendPackedBits(const uint32_t* values, size_t count, int bit_width, std::string* out) {
  uint64_t buffer = 0;
  int filled = 0;
  for (size_t i = 0; i < count; ++i) {
    buffer |= static_cast<uint64_t>(values[i]) << filled;
    filled += bit_width;
    while (filled >= 8) {
      out->push_back(static_cast<char>(buffer & 0xff));
      buffer >>= 8;
      filled -= 8;
    }
  }
  if (filled > 0) out->push_back(static_cast<char>(buffer & 0xff));
}

void AppendVarint(uint64_t value, std::string* out) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

}  // namespace

void ValueBuffer::AppendString(std::string_view value) {
  if (chars.size() + value.size() > std::numeric_limits<uint32_t>::max()) {
    Fail("string data exceeds 4 GiB in one batch; use smaller row groups");
  }
  chars.append(value.data(), value.size());
  offsets.push_back(static_cast<uint32_t>(chars.size()));
}

void ValueBuffer::Clear() {
  ints.clear();
  doubles.clear();
  offsets.assign(1, 0);
  chars.clear();
}

ColumnType OutputTypeOf(PhysicalType type) {
  switch (type) {
    case PhysicalType::kFloat:
    case PhysicalType::kDouble: return ColumnType::kDouble;
    case PhysicalType::kByteArray:
    case PhysicalType::kFixedLenByteArray: return ColumnType::kString;
    default: return ColumnType::kInt64;
  }
}

int BitWidthFor(uint64_t max_value) {
  int width = 0;
  while (max_value > 0) {
    ++width;
    max_value >>= 1;
  }
  return width;
}

// ------------------------------------------------------------- RLE / bit-packed hybrid

RleBitPackedDecoder::RleBitPackedDecoder(const uint8_t* data, size_t size, int bit_width)
    : data_(data), size_(size), bit_width_(bit_width) {
  if (bit_width < 0 || bit_width > 32) Fail("RLE bit width ", bit_width, " is out of range 0..32");
}

bool RleBitPackedDecoder::NextRun() {
  while (pos_ < size_) {
    uint64_t header = 0;
    for (int shift = 0;; shift += 7) {
      if (pos_ >= size_ || shift > 63) Fail("RLE run header truncated or too long");
      uint8_t byte = data_[pos_++];
      header |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) break;
    }
    if (header & 1) {
      uint64_t groups = header >> 1;
      uint64_t bytes = groups * static_cast<uint64_t>(bit_width_);
      // Writers may end the last packed run early; take the values that are really there.
      uint64_t available = std::min<uint64_t>(bytes, size_ - pos_);
      run_is_packed_ = true;
      run_left_ = bit_width_ == 0 ? groups * 8 : available * 8 / bit_width_;
      run_left_ = std::min(run_left_, groups * 8);
      packed_bit_ = static_cast<uint64_t>(pos_) * 8;
      pos_ += available;
    } else {
      int value_bytes = (bit_width_ + 7) / 8;
      NeedBytes(size_ - pos_, value_bytes, "RLE run value");
      uint32_t value = 0;
      for (int i = 0; i < value_bytes; ++i)
        value |= static_cast<uint32_t>(data_[pos_ + i]) << (8 * i);
      pos_ += value_bytes;
      if (bit_width_ < 32 && (value >> bit_width_) != 0) {
        Fail("RLE run value ", value, " does not fit in ", bit_width_, " bits");
      }
      run_is_packed_ = false;
      run_left_ = header >> 1;
      run_value_ = value;
    }
    if (run_left_ > 0) return true;
  }
  return false;
}

template <typename T>
void RleBitPackedDecoder::DecodeInto(size_t count, T* out) {
  size_t done = 0;
  while (done < count) {
    if (run_left_ == 0 && !NextRun()) {
      Fail("RLE/bit-packed data ends after ", done, " of ", count, " values");
    }
    size_t take = static_cast<size_t>(std::min<uint64_t>(run_left_, count - done));
    if (run_is_packed_) {
      for (size_t i = 0; i < take; ++i) {
        uint64_t value = ReadBits(data_, packed_bit_, bit_width_);
        packed_bit_ += bit_width_;
        if (value > std::numeric_limits<T>::max()) Fail("level value ", value, " exceeds 255");
        out[done + i] = static_cast<T>(value);
      }
    } else {
      if (run_value_ > std::numeric_limits<T>::max())
        Fail("level value ", run_value_, " exceeds 255");
      std::fill(out + done, out + done + take, static_cast<T>(run_value_));
    }
    run_left_ -= take;
    done += take;
  }
}

void RleBitPackedDecoder::Decode(size_t count, uint32_t* out) { DecodeInto(count, out); }
void RleBitPackedDecoder::Decode(size_t count, uint8_t* out) { DecodeInto(count, out); }

namespace {

template <typename T>
void EncodeRleBitPackedImpl(const T* values, size_t count, int bit_width, std::string* out) {
  // Runs of 8+ equal values become RLE runs; everything else goes into bit-packed groups of 8.
  // A packed run can only end on a group boundary (except at the very end), so a long run
  // first tops the pending literals up to a multiple of 8.
  std::vector<uint32_t> literals;
  auto flush_literals = [&] {
    if (literals.empty()) return;
    size_t groups = (literals.size() + 7) / 8;
    literals.resize(groups * 8, 0);  // only the final run is ever padded
    AppendVarint((static_cast<uint64_t>(groups) << 1) | 1, out);
    AppendPackedBits(literals.data(), literals.size(), bit_width, out);
    literals.clear();
  };
  int value_bytes = (bit_width + 7) / 8;
  size_t i = 0;
  while (i < count) {
    size_t run = 1;
    while (i + run < count && values[i + run] == values[i]) ++run;
    if (run >= 8 && literals.size() % 8 != 0) {
      size_t pad = std::min(run, 8 - literals.size() % 8);
      for (size_t k = 0; k < pad; ++k) literals.push_back(values[i]);
      i += pad;
      continue;
    }
    if (run >= 8) {
      flush_literals();
      AppendVarint(static_cast<uint64_t>(run) << 1, out);
      uint32_t value = values[i];
      for (int b = 0; b < value_bytes; ++b)
        out->push_back(static_cast<char>((value >> (8 * b)) & 0xff));
      i += run;
    } else {
      for (size_t k = 0; k < run; ++k) literals.push_back(values[i]);
      i += run;
    }
  }
  flush_literals();
}

}  // namespace

void EncodeRleBitPacked(const uint32_t* values, size_t count, int bit_width, std::string* out) {
  EncodeRleBitPackedImpl(values, count, bit_width, out);
}

void EncodeRleBitPacked(const uint8_t* values, size_t count, int bit_width, std::string* out) {
  EncodeRleBitPackedImpl(values, count, bit_width, out);
}

// ------------------------------------------------------------------ DELTA_BINARY_PACKED

DeltaBinaryPackedDecoder::DeltaBinaryPackedDecoder(const uint8_t* data, size_t size, bool is_int32)
    : data_(data), size_(size), is_int32_(is_int32) {
  block_size_ = ReadVarint();
  miniblocks_per_block_ = ReadVarint();
  total_values_ = ReadVarint();
  uint64_t first = ReadVarint();
  last_value_ = (first >> 1) ^ (~(first & 1) + 1);  // zigzag
  if (block_size_ == 0 || block_size_ > (uint64_t{1} << 31) || miniblocks_per_block_ == 0 ||
      block_size_ % miniblocks_per_block_ != 0 || (block_size_ / miniblocks_per_block_) % 8 != 0 ||
      miniblocks_per_block_ > size_) {
    Fail("DELTA_BINARY_PACKED header is invalid (block size ", block_size_, ", ",
         miniblocks_per_block_, " miniblocks)");
  }
  values_per_miniblock_ = block_size_ / miniblocks_per_block_;
  miniblock_index_ = miniblocks_per_block_;  // no block started yet
}

uint64_t DeltaBinaryPackedDecoder::ReadVarint() {
  uint64_t value = 0;
  for (int shift = 0;; shift += 7) {
    if (pos_ >= size_ || shift > 63) Fail("DELTA_BINARY_PACKED varint truncated or too long");
    uint8_t byte = data_[pos_++];
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return value;
  }
}

void DeltaBinaryPackedDecoder::StartBlock() {
  uint64_t raw = ReadVarint();
  min_delta_ = (raw >> 1) ^ (~(raw & 1) + 1);
  NeedBytes(size_ - pos_, miniblocks_per_block_, "DELTA_BINARY_PACKED block header");
  bit_widths_.assign(data_ + pos_, data_ + pos_ + miniblocks_per_block_);
  pos_ += miniblocks_per_block_;
  miniblock_index_ = 0;
  StartMiniblock();
}

void DeltaBinaryPackedDecoder::StartMiniblock() {
  int width = bit_widths_[miniblock_index_];
  if (width > 64) Fail("DELTA_BINARY_PACKED miniblock bit width ", width, " exceeds 64");
  uint64_t bytes = values_per_miniblock_ * static_cast<uint64_t>(width) / 8;
  miniblock_start_ = pos_;
  // The final miniblock should be padded to full length, but accept writers that stop early.
  pos_ += static_cast<size_t>(std::min<uint64_t>(bytes, size_ - pos_));
  miniblock_left_ = values_per_miniblock_;
  miniblock_pos_ = 0;
}

void DeltaBinaryPackedDecoder::Decode(size_t count, int64_t* out) {
  for (size_t i = 0; i < count; ++i) {
    if (decoded_ >= total_values_) {
      Fail("DELTA_BINARY_PACKED data holds ", total_values_, " values, more were expected");
    }
    if (decoded_ > 0) {
      if (miniblock_left_ == 0) {
        if (miniblock_index_ + 1 >= miniblocks_per_block_) {
          StartBlock();
        } else {
          ++miniblock_index_;
          StartMiniblock();
        }
      }
      int width = bit_widths_[miniblock_index_];
      uint64_t bit = static_cast<uint64_t>(miniblock_start_) * 8 + miniblock_pos_ * width;
      if (bit + width > static_cast<uint64_t>(size_) * 8) {
        Fail("DELTA_BINARY_PACKED miniblock truncated");
      }
      uint64_t delta = ReadBits(data_, bit, width);
      ++miniblock_pos_;
      --miniblock_left_;
      last_value_ += min_delta_ + delta;
    }
    out[i] = is_int32_ ? static_cast<int32_t>(static_cast<uint32_t>(last_value_))
                       : static_cast<int64_t>(last_value_);
    ++decoded_;
  }
}

// ------------------------------------------------------------------------ value decoders

size_t DecodePlain(PhysicalType type, int32_t type_length, const uint8_t* data, size_t size,
                   size_t count, ValueBuffer* out) {
  switch (type) {
    case PhysicalType::kBoolean: {
      size_t bytes = (count + 7) / 8;
      NeedBytes(size, bytes, "PLAIN BOOLEAN values");
      for (size_t i = 0; i < count; ++i) out->ints.push_back((data[i >> 3] >> (i & 7)) & 1);
      return bytes;
    }
    case PhysicalType::kInt32: {
      NeedBytes(size, uint64_t{4} * count, "PLAIN INT32 values");
      for (size_t i = 0; i < count; ++i) {
        out->ints.push_back(static_cast<int32_t>(LoadU32(data + 4 * i)));
      }
      return 4 * count;
    }
    case PhysicalType::kInt64: {
      NeedBytes(size, uint64_t{8} * count, "PLAIN INT64 values");
      size_t start = out->ints.size();
      out->ints.resize(start + count);
      std::memcpy(out->ints.data() + start, data, 8 * count);
      return 8 * count;
    }
    case PhysicalType::kFloat: {
      NeedBytes(size, uint64_t{4} * count, "PLAIN FLOAT values");
      for (size_t i = 0; i < count; ++i) {
        float value;
        std::memcpy(&value, data + 4 * i, 4);
        out->doubles.push_back(value);
      }
      return 4 * count;
    }
    case PhysicalType::kDouble: {
      NeedBytes(size, uint64_t{8} * count, "PLAIN DOUBLE values");
      size_t start = out->doubles.size();
      out->doubles.resize(start + count);
      std::memcpy(out->doubles.data() + start, data, 8 * count);
      return 8 * count;
    }
    case PhysicalType::kByteArray: {
      size_t pos = 0;
      for (size_t i = 0; i < count; ++i) {
        NeedBytes(size - pos, 4, "PLAIN BYTE_ARRAY length");
        uint32_t length = LoadU32(data + pos);
        pos += 4;
        NeedBytes(size - pos, length, "PLAIN BYTE_ARRAY value");
        out->AppendString(std::string_view(reinterpret_cast<const char*>(data + pos), length));
        pos += length;
      }
      return pos;
    }
    case PhysicalType::kFixedLenByteArray: {
      if (type_length < 0) Fail("FIXED_LEN_BYTE_ARRAY with negative length ", type_length);
      uint64_t bytes = static_cast<uint64_t>(type_length) * count;
      NeedBytes(size, bytes, "PLAIN FIXED_LEN_BYTE_ARRAY values");
      for (size_t i = 0; i < count; ++i) {
        out->AppendString(std::string_view(
            reinterpret_cast<const char*>(data + i * static_cast<size_t>(type_length)),
            static_cast<size_t>(type_length)));
      }
      return static_cast<size_t>(bytes);
    }
    default: break;
  }
  Fail("PLAIN decoding of ", PhysicalTypeName(type), " is not supported yet");
}

size_t DecodeDeltaBinaryPacked(PhysicalType type, const uint8_t* data, size_t size, size_t count,
                               ValueBuffer* out) {
  if (type != PhysicalType::kInt32 && type != PhysicalType::kInt64) {
    Fail("DELTA_BINARY_PACKED is only valid for INT32/INT64, not ", PhysicalTypeName(type));
  }
  DeltaBinaryPackedDecoder decoder(data, size, type == PhysicalType::kInt32);
  if (decoder.total_values() != count) {
    Fail("DELTA_BINARY_PACKED holds ", decoder.total_values(), " values but the page has ", count,
         " non-null values");
  }
  size_t start = out->ints.size();
  out->ints.resize(start + count);
  decoder.Decode(count, out->ints.data() + start);
  return decoder.bytes_consumed();
}

namespace {

// Decodes `count` DELTA_BINARY_PACKED lengths (each must be >= 0); returns bytes consumed.
size_t DecodeLengths(const uint8_t* data, size_t size, size_t count, const char* what,
                     std::vector<int64_t>* lengths) {
  DeltaBinaryPackedDecoder decoder(data, size, /*is_int32=*/true);
  if (decoder.total_values() != count) {
    Fail(what, " holds ", decoder.total_values(), " values but the page has ", count,
         " non-null values");
  }
  lengths->resize(count);
  decoder.Decode(count, lengths->data());
  for (int64_t length : *lengths) {
    if (length < 0) Fail(what, " has a negative length ", length);
  }
  return decoder.bytes_consumed();
}

}  // namespace

size_t DecodeDeltaLengthByteArray(const uint8_t* data, size_t size, size_t count,
                                  ValueBuffer* out) {
  std::vector<int64_t> lengths;
  size_t pos = DecodeLengths(data, size, count, "DELTA_LENGTH_BYTE_ARRAY lengths", &lengths);
  for (int64_t length : lengths) {
    NeedBytes(size - pos, static_cast<uint64_t>(length), "DELTA_LENGTH_BYTE_ARRAY value");
    out->AppendString(std::string_view(reinterpret_cast<const char*>(data + pos), length));
    pos += static_cast<size_t>(length);
  }
  return pos;
}

size_t DecodeDeltaByteArray(const uint8_t* data, size_t size, size_t count, ValueBuffer* out) {
  std::vector<int64_t> prefixes;
  size_t pos = DecodeLengths(data, size, count, "DELTA_BYTE_ARRAY prefix lengths", &prefixes);
  std::vector<int64_t> suffixes;
  pos += DecodeLengths(data + pos, size - pos, count, "DELTA_BYTE_ARRAY suffix lengths", &suffixes);
  std::string previous;
  std::string value;
  for (size_t i = 0; i < count; ++i) {
    if (static_cast<uint64_t>(prefixes[i]) > previous.size()) {
      Fail("DELTA_BYTE_ARRAY prefix length ", prefixes[i], " exceeds the previous value's ",
           previous.size(), " bytes");
    }
    NeedBytes(size - pos, static_cast<uint64_t>(suffixes[i]), "DELTA_BYTE_ARRAY suffix");
    value.assign(previous, 0, static_cast<size_t>(prefixes[i]));
    value.append(reinterpret_cast<const char*>(data + pos), static_cast<size_t>(suffixes[i]));
    pos += static_cast<size_t>(suffixes[i]);
    out->AppendString(value);
    previous.swap(value);
  }
  return pos;
}

size_t DecodeByteStreamSplit(PhysicalType type, const uint8_t* data, size_t size, size_t count,
                             ValueBuffer* out) {
  size_t width;
  switch (type) {
    case PhysicalType::kInt32:
    case PhysicalType::kFloat: width = 4; break;
    case PhysicalType::kInt64:
    case PhysicalType::kDouble: width = 8; break;
    default: Fail("BYTE_STREAM_SPLIT of ", PhysicalTypeName(type), " is not supported yet");
  }
  NeedBytes(size, uint64_t{width} * count, "BYTE_STREAM_SPLIT values");
  for (size_t i = 0; i < count; ++i) {
    uint8_t bytes[8];
    for (size_t k = 0; k < width; ++k) bytes[k] = data[k * count + i];
    switch (type) {
      case PhysicalType::kInt32: out->ints.push_back(static_cast<int32_t>(LoadU32(bytes))); break;
      case PhysicalType::kFloat: {
        float value;
        std::memcpy(&value, bytes, 4);
        out->doubles.push_back(value);
        break;
      }
      case PhysicalType::kInt64: {
        int64_t value;
        std::memcpy(&value, bytes, 8);
        out->ints.push_back(value);
        break;
      }
      default: {
        double value;
        std::memcpy(&value, bytes, 8);
        out->doubles.push_back(value);
      }
    }
  }
  return width * count;
}

size_t DecodeRleBooleans(const uint8_t* data, size_t size, size_t count, ValueBuffer* out) {
  NeedBytes(size, 4, "RLE BOOLEAN length prefix");
  uint32_t length = LoadU32(data);
  NeedBytes(size - 4, length, "RLE BOOLEAN values");
  std::vector<uint8_t> bits(count);
  RleBitPackedDecoder(data + 4, length, 1).Decode(count, bits.data());
  out->ints.insert(out->ints.end(), bits.begin(), bits.end());
  return 4 + static_cast<size_t>(length);
}

void EncodePlainBooleans(const std::vector<int64_t>& values, std::string* out) {
  size_t start = out->size();
  out->resize(start + (values.size() + 7) / 8, '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i]) (*out)[start + (i >> 3)] |= static_cast<char>(1 << (i & 7));
  }
}

}  // namespace parquet
}  // namespace tzrec
