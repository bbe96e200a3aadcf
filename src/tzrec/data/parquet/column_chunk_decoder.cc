#include "tzrec/data/parquet/column_chunk_decoder.h"

#include <zlib.h>

#include <algorithm>
#include <string>

#include "tzrec/common/error.h"
#include "tzrec/data/parquet/parquet_codec.h"

namespace tzrec {
namespace parquet {
namespace {

// Deprecated BIT_PACKED level encoding: fixed width, most significant bit first.
size_t DecodeBitPackedLevels(const uint8_t* data, size_t size, size_t count, int bit_width,
                             uint8_t* out) {
  uint64_t bytes = (static_cast<uint64_t>(count) * bit_width + 7) / 8;
  if (bytes > size) Fail("BIT_PACKED levels truncated: need ", bytes, " bytes, have ", size);
  uint64_t bit = 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t value = 0;
    for (int b = 0; b < bit_width; ++b, ++bit) {
      value = (value << 1) | ((data[bit >> 3] >> (7 - (bit & 7))) & 1);
    }
    out[i] = static_cast<uint8_t>(value);
  }
  return static_cast<size_t>(bytes);
}

class ChunkDecoder {
 public:
  ChunkDecoder(const ColumnMetaData& meta, const LeafColumn& leaf, bool verify_checksums,
               LeafData* out)
      : meta_(meta), leaf_(leaf), verify_checksums_(verify_checksums), out_(out) {
    out_->values.type = OutputTypeOf(leaf.type);
  }

  void Run(const uint8_t* data, size_t size, int64_t num_rows);

 private:
  void DictionaryPage(const PageHeader& header, const uint8_t* page);
  void DataPageV1(const PageHeader& header, const uint8_t* page);
  void DataPageV2(const PageHeader& header, const uint8_t* page);
  size_t DecodeLevels(Encoding encoding, const uint8_t* data, size_t size, size_t count,
                      int max_level, const char* what, uint8_t* out);
  size_t CountPresent(size_t start, size_t count) const;
  void DecodeValues(Encoding encoding, const uint8_t* data, size_t size, size_t count);
  size_t CheckPageValueCount(int64_t num_values) const;

  const ColumnMetaData& meta_;
  const LeafColumn& leaf_;
  bool verify_checksums_;
  LeafData* out_;
  bool has_dictionary_ = false;
  ValueBuffer dictionary_;
  std::string scratch_;
  std::vector<uint32_t> indices_;
};

void ChunkDecoder::Run(const uint8_t* data, size_t size, int64_t num_rows) {
  const int64_t expected = meta_.num_values;
  if (expected < 0) Fail("column chunk metadata has a negative value count ", expected);
  if (leaf_.max_rep == 0 && expected != num_rows) {
    Fail("column chunk holds ", expected, " values but the row group has ", num_rows, " rows");
  }
  size_t pos = 0;
  int page_index = 0;
  while (static_cast<int64_t>(out_->num_levels) < expected) {
    if (pos >= size) {
      Fail("column chunk ends after ", out_->num_levels, " of its ", expected, " values");
    }
    try {
      size_t header_size = 0;
      PageHeader header = DecodePageHeader(data + pos, size - pos, &header_size);
      pos += header_size;
      if (header.compressed_page_size < 0 || header.uncompressed_page_size < 0) {
        Fail("page header has negative sizes");
      }
      size_t compressed = static_cast<size_t>(header.compressed_page_size);
      if (compressed > size - pos) {
        Fail("page of ", compressed, " bytes overruns the column chunk (", size - pos,
             " bytes left)");
      }
      const uint8_t* page = data + pos;
      pos += compressed;
      if (header.has_crc && verify_checksums_) {
        uint32_t actual = static_cast<uint32_t>(crc32(0L, page, static_cast<uInt>(compressed)));
        if (actual != header.crc) {
          Fail("page CRC mismatch (stored ", header.crc, ", computed ", actual, ")");
        }
      }
      switch (header.type) {
        case PageType::kDictionaryPage: DictionaryPage(header, page); break;
        case PageType::kDataPage: DataPageV1(header, page); break;
        case PageType::kDataPageV2: DataPageV2(header, page); break;
        default: break;  // index pages and future page types carry no values
      }
    } catch (const Error& e) {
      Fail("page ", page_index, ": ", e.what());
    }
    ++page_index;
  }
  if (leaf_.max_rep > 0) {
    if (out_->num_levels > 0 && out_->rep_levels[0] != 0) {
      Fail("first repetition level is ", int(out_->rep_levels[0]), ", expected 0");
    }
    int64_t rows = std::count(out_->rep_levels.begin(), out_->rep_levels.end(), uint8_t{0});
    if (rows != num_rows) {
      Fail("column chunk holds ", rows, " rows but the row group has ", num_rows);
    }
  }
}

size_t ChunkDecoder::CheckPageValueCount(int64_t num_values) const {
  int64_t left = meta_.num_values - static_cast<int64_t>(out_->num_levels);
  if (num_values < 0 || num_values > left) {
    Fail("page holds ", num_values, " values but only ", left,
         " remain according to the column chunk metadata");
  }
  return static_cast<size_t>(num_values);
}

void ChunkDecoder::DictionaryPage(const PageHeader& header, const uint8_t* page) {
  if (!header.has_dictionary_page_header) Fail("dictionary page lacks its header");
  if (has_dictionary_ || out_->num_levels > 0) {
    Fail("dictionary page after the first page of the column chunk");
  }
  const DictionaryPageHeader& dict = header.dictionary_page_header;
  if (dict.encoding != Encoding::kPlain && dict.encoding != Encoding::kPlainDictionary) {
    Fail("dictionary page encoding ", EncodingName(dict.encoding), " is not supported yet");
  }
  if (dict.num_values < 0) Fail("dictionary page has a negative value count");
  Decompress(meta_.codec, page, header.compressed_page_size, header.uncompressed_page_size,
             &scratch_);
  dictionary_.type = OutputTypeOf(leaf_.type);
  DecodePlain(leaf_.type, leaf_.type_length, reinterpret_cast<const uint8_t*>(scratch_.data()),
              scratch_.size(), static_cast<size_t>(dict.num_values), &dictionary_);
  has_dictionary_ = true;
}

size_t ChunkDecoder::DecodeLevels(Encoding encoding, const uint8_t* data, size_t size, size_t count,
                                  int max_level, const char* what, uint8_t* out) {
  int bit_width = BitWidthFor(static_cast<uint64_t>(max_level));
  size_t consumed;
  if (encoding == Encoding::kRle) {
    if (size < 4) Fail(what, " levels truncated (no length prefix)");
    uint32_t length = static_cast<uint32_t>(data[0]) | (static_cast<uint32_t>(data[1]) << 8) |
                      (static_cast<uint32_t>(data[2]) << 16) |
                      (static_cast<uint32_t>(data[3]) << 24);
    if (length > size - 4) {
      Fail(what, " levels claim ", length, " bytes but the page has ", size - 4, " left");
    }
    RleBitPackedDecoder(data + 4, length, bit_width).Decode(count, out);
    consumed = 4 + static_cast<size_t>(length);
  } else if (encoding == Encoding::kBitPacked) {
    consumed = DecodeBitPackedLevels(data, size, count, bit_width, out);
  } else {
    Fail(what, " level encoding ", EncodingName(encoding), " is not supported yet");
  }
  for (size_t i = 0; i < count; ++i) {
    if (out[i] > max_level) Fail(what, " level ", int(out[i]), " exceeds the maximum ", max_level);
  }
  return consumed;
}

size_t ChunkDecoder::CountPresent(size_t start, size_t count) const {
  if (leaf_.max_def == 0) return count;
  const uint8_t* levels = out_->def_levels.data() + start;
  return static_cast<size_t>(
      std::count(levels, levels + count, static_cast<uint8_t>(leaf_.max_def)));
}

void ChunkDecoder::DataPageV1(const PageHeader& header, const uint8_t* page) {
  if (!header.has_data_page_header) Fail("data page lacks its DataPageHeader");
  const DataPageHeader& dp = header.data_page_header;
  size_t count = CheckPageValueCount(dp.num_values);
  Decompress(meta_.codec, page, header.compressed_page_size, header.uncompressed_page_size,
             &scratch_);
  const uint8_t* p = reinterpret_cast<const uint8_t*>(scratch_.data());
  size_t left = scratch_.size();
  size_t start = out_->num_levels;
  if (leaf_.max_rep > 0) {
    out_->rep_levels.resize(start + count);
    size_t used = DecodeLevels(dp.repetition_level_encoding, p, left, count, leaf_.max_rep,
                               "repetition", out_->rep_levels.data() + start);
    p += used;
    left -= used;
  }
  if (leaf_.max_def > 0) {
    out_->def_levels.resize(start + count);
    size_t used = DecodeLevels(dp.definition_level_encoding, p, left, count, leaf_.max_def,
                               "definition", out_->def_levels.data() + start);
    p += used;
    left -= used;
  }
  DecodeValues(dp.encoding, p, left, CountPresent(start, count));
  out_->num_levels += count;
}

void ChunkDecoder::DataPageV2(const PageHeader& header, const uint8_t* page) {
  if (!header.has_data_page_header_v2) Fail("data page v2 lacks its DataPageHeaderV2");
  const DataPageHeaderV2& dp = header.data_page_header_v2;
  size_t count = CheckPageValueCount(dp.num_values);
  int64_t rep_bytes = dp.repetition_levels_byte_length;
  int64_t def_bytes = dp.definition_levels_byte_length;
  if (rep_bytes < 0 || def_bytes < 0 || rep_bytes + def_bytes > header.compressed_page_size ||
      rep_bytes + def_bytes > header.uncompressed_page_size) {
    Fail("data page v2 level lengths (", rep_bytes, " + ", def_bytes, ") do not fit in the page");
  }
  size_t start = out_->num_levels;
  if (leaf_.max_rep > 0) {
    out_->rep_levels.resize(start + count);
    RleBitPackedDecoder(page, rep_bytes, BitWidthFor(leaf_.max_rep))
        .Decode(count, out_->rep_levels.data() + start);
    for (size_t i = start; i < start + count; ++i) {
      if (out_->rep_levels[i] > leaf_.max_rep) {
        Fail("repetition level ", int(out_->rep_levels[i]), " exceeds the maximum ", leaf_.max_rep);
      }
    }
  }
  if (leaf_.max_def > 0) {
    out_->def_levels.resize(start + count);
    RleBitPackedDecoder(page + rep_bytes, def_bytes, BitWidthFor(leaf_.max_def))
        .Decode(count, out_->def_levels.data() + start);
    for (size_t i = start; i < start + count; ++i) {
      if (out_->def_levels[i] > leaf_.max_def) {
        Fail("definition level ", int(out_->def_levels[i]), " exceeds the maximum ", leaf_.max_def);
      }
    }
  }
  size_t present = CountPresent(start, count);
  if (dp.num_nulls < 0 || static_cast<size_t>(dp.num_nulls) != count - present) {
    Fail("data page v2 states ", dp.num_nulls, " nulls but its levels hold ", count - present);
  }
  const uint8_t* values = page + rep_bytes + def_bytes;
  size_t values_size = static_cast<size_t>(header.compressed_page_size - rep_bytes - def_bytes);
  size_t values_uncompressed =
      static_cast<size_t>(header.uncompressed_page_size - rep_bytes - def_bytes);
  if (dp.is_compressed && meta_.codec != Codec::kUncompressed) {
    Decompress(meta_.codec, values, values_size, values_uncompressed, &scratch_);
    values = reinterpret_cast<const uint8_t*>(scratch_.data());
    values_size = scratch_.size();
  }
  DecodeValues(dp.encoding, values, values_size, present);
  out_->num_levels += count;
}

void ChunkDecoder::DecodeValues(Encoding encoding, const uint8_t* data, size_t size, size_t count) {
  if (count == 0) return;  // all-null pages may omit the value section entirely
  ValueBuffer* out = &out_->values;
  size_t before = out->size();
  switch (encoding) {
    case Encoding::kPlain:
      DecodePlain(leaf_.type, leaf_.type_length, data, size, count, out);
      break;
    case Encoding::kPlainDictionary:
    case Encoding::kRleDictionary: {
      if (!has_dictionary_) Fail("dictionary-encoded page without a dictionary page");
      if (size < 1) Fail("dictionary indices truncated (no bit width)");
      int bit_width = data[0];
      if (bit_width > 32) Fail("dictionary index bit width ", bit_width, " exceeds 32");
      indices_.resize(count);
      RleBitPackedDecoder(data + 1, size - 1, bit_width).Decode(count, indices_.data());
      size_t entries = dictionary_.size();
      for (uint32_t index : indices_) {
        if (index >= entries) {
          Fail("dictionary index ", index, " out of range (dictionary has ", entries, " entries)");
        }
      }
      switch (out->type) {
        case ColumnType::kInt64:
          for (uint32_t index : indices_) out->ints.push_back(dictionary_.ints[index]);
          break;
        case ColumnType::kDouble:
          for (uint32_t index : indices_) out->doubles.push_back(dictionary_.doubles[index]);
          break;
        case ColumnType::kString:
          for (uint32_t index : indices_) out->AppendString(dictionary_.StringAt(index));
          break;
      }
      break;
    }
    case Encoding::kRle:
      if (leaf_.type != PhysicalType::kBoolean) {
        Fail("RLE encoding of ", PhysicalTypeName(leaf_.type), " values is not supported yet");
      }
      DecodeRleBooleans(data, size, count, out);
      break;
    case Encoding::kDeltaBinaryPacked:
      DecodeDeltaBinaryPacked(leaf_.type, data, size, count, out);
      break;
    case Encoding::kDeltaLengthByteArray:
      if (leaf_.type != PhysicalType::kByteArray) {
        Fail("DELTA_LENGTH_BYTE_ARRAY of ", PhysicalTypeName(leaf_.type), " is invalid");
      }
      DecodeDeltaLengthByteArray(data, size, count, out);
      break;
    case Encoding::kDeltaByteArray:
      if (leaf_.type != PhysicalType::kByteArray) {
        Fail("DELTA_BYTE_ARRAY of ", PhysicalTypeName(leaf_.type), " is not supported yet");
      }
      DecodeDeltaByteArray(data, size, count, out);
      break;
    case Encoding::kByteStreamSplit:
      DecodeByteStreamSplit(leaf_.type, data, size, count, out);
      break;
    default: Fail("value encoding ", EncodingName(encoding), " is not supported yet");
  }
  TZREC_CHECK(out->size() == before + count, "decoded ", out->size() - before, " of ", count);
  if (leaf_.zero_extend_int32) {
    for (size_t i = before; i < out->ints.size(); ++i) {
      out->ints[i] = static_cast<uint32_t>(out->ints[i]);
    }
  }
}

}  // namespace

void DecodeColumnChunk(const uint8_t* data, size_t size, const ColumnMetaData& meta,
                       const LeafColumn& leaf, int64_t num_rows, bool verify_checksums,
                       LeafData* out) {
  if (!CodecSupported(meta.codec)) {
    Fail("compression codec ", CodecName(meta.codec), " is not supported yet");
  }
  if (meta.type != leaf.type) {
    Fail("column chunk type ", PhysicalTypeName(meta.type), " differs from the schema's ",
         PhysicalTypeName(leaf.type));
  }
  *out = LeafData();
  ChunkDecoder(meta, leaf, verify_checksums, out).Run(data, size, num_rows);
}

}  // namespace parquet
}  // namespace tzrec
