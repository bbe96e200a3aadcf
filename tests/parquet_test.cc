// Tests of our Parquet reader and writer (src/tzrec/data/parquet/): byte-level checks of the
// encodings against hand-computed bytes and spec examples, round trips across types, codecs,
// nullability, nesting and row groups, and every error path on deliberately corrupt files.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>

#include "test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/data/parquet/parquet_codec.h"
#include "tzrec/data/parquet/parquet_encoding.h"
#include "tzrec/data/parquet/parquet_format.h"
#include "tzrec/data/parquet/parquet_reader.h"
#include "tzrec/data/parquet/parquet_writer.h"
#include "tzrec/data/parquet/thrift_compact.h"

namespace tzrec {
namespace {

using testing::TempDir;
namespace pq = parquet;
template <typename T>
using Opt = std::optional<T>;

// ------------------------------------------------------------------- column builders

void Append(Column* c, const Opt<int64_t>& v) {
  c->type = ColumnType::kInt64;
  c->ints.push_back(v.value_or(0));
  c->valid.push_back(v.has_value());
}
void Append(Column* c, const Opt<double>& v) {
  c->type = ColumnType::kDouble;
  c->doubles.push_back(v.value_or(0.0));
  c->valid.push_back(v.has_value());
}
void Append(Column* c, const Opt<std::string>& v) {
  c->type = ColumnType::kString;
  c->AppendString(v.value_or(""), v.has_value());
}

template <typename T>
Column MakeColumn(const std::string& name, const std::vector<Opt<T>>& values) {
  Column c;
  c.name = name;
  c.type = std::is_same_v<T, std::string> ? ColumnType::kString
           : std::is_same_v<T, double>    ? ColumnType::kDouble
                                          : ColumnType::kInt64;
  for (const auto& v : values) Append(&c, v);
  return c;
}

template <typename T>
ParquetColumn PlainColumn(const std::string& name, const std::vector<Opt<T>>& values) {
  ParquetColumn column;
  column.name = name;
  column.values = MakeColumn(name, values);
  return column;
}

template <typename T>
using ListRows = std::vector<Opt<std::vector<Opt<T>>>>;

template <typename T>
ParquetColumn ListColumn(const std::string& name, const ListRows<T>& rows) {
  ParquetColumn column;
  column.name = name;
  column.lists.resize(1);
  column.values = MakeColumn<T>("", {});
  for (const auto& row : rows) {
    column.lists[0].Append(row.has_value(), row ? static_cast<uint32_t>(row->size()) : 0);
    if (row) {
      for (const auto& item : *row) Append(&column.values, item);
    }
  }
  return column;
}

template <typename T>
ParquetColumn ListListColumn(const std::string& name, const std::vector<Opt<ListRows<T>>>& rows) {
  ParquetColumn column;
  column.name = name;
  column.lists.resize(2);
  column.values = MakeColumn<T>("", {});
  for (const auto& row : rows) {
    column.lists[0].Append(row.has_value(), row ? static_cast<uint32_t>(row->size()) : 0);
    if (!row) continue;
    for (const auto& sub : *row) {
      column.lists[1].Append(sub.has_value(), sub ? static_cast<uint32_t>(sub->size()) : 0);
      if (sub) {
        for (const auto& item : *sub) Append(&column.values, item);
      }
    }
  }
  return column;
}

template <typename K, typename V>
ParquetColumn MapColumn(const std::string& name,
                        const std::vector<Opt<std::vector<std::pair<K, Opt<V>>>>>& rows) {
  ParquetColumn column;
  column.name = name;
  column.is_map = true;
  column.lists.resize(1);
  column.keys = MakeColumn<K>("", {});
  column.values = MakeColumn<V>("", {});
  for (const auto& row : rows) {
    column.lists[0].Append(row.has_value(), row ? static_cast<uint32_t>(row->size()) : 0);
    if (!row) continue;
    for (const auto& [key, value] : *row) {
      Append(&column.keys, Opt<K>(key));
      Append(&column.values, value);
    }
  }
  return column;
}

// Equal validity, and equal values where valid (doubles bit for bit, so NaN and -0 count).
void ExpectSameValues(const Column& expected, const Column& actual, const std::string& what) {
  ASSERT_EQ(expected.type, actual.type) << what;
  ASSERT_EQ(expected.valid, actual.valid) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (!expected.valid[i]) continue;
    switch (expected.type) {
      case ColumnType::kInt64:
        EXPECT_EQ(expected.ints[i], actual.ints[i]) << what << " @" << i;
        break;
      case ColumnType::kDouble:
        EXPECT_EQ(0, std::memcmp(&expected.doubles[i], &actual.doubles[i], 8))
            << what << " @" << i << ": " << expected.doubles[i] << " vs " << actual.doubles[i];
        break;
      case ColumnType::kString:
        EXPECT_EQ(expected.StringAt(i), actual.StringAt(i)) << what << " @" << i;
        break;
    }
  }
}

void ExpectSameColumn(const ParquetColumn& expected, const ParquetColumn& actual) {
  ASSERT_EQ(expected.name, actual.name);
  ASSERT_EQ(expected.is_map, actual.is_map) << expected.name;
  ASSERT_EQ(expected.lists.size(), actual.lists.size()) << expected.name;
  for (size_t k = 0; k < expected.lists.size(); ++k) {
    EXPECT_EQ(expected.lists[k].valid, actual.lists[k].valid) << expected.name << " level " << k;
    EXPECT_EQ(expected.lists[k].offsets, actual.lists[k].offsets)
        << expected.name << " level " << k;
  }
  if (expected.is_map) ExpectSameValues(expected.keys, actual.keys, expected.name + " keys");
  ExpectSameValues(expected.values, actual.values, expected.name + " values");
}

// Concatenates the structured columns of every row group of `path`.
std::vector<ParquetColumn> ReadAllGroups(const std::string& path, ParquetReadOptions options = {}) {
  ParquetFileReader reader(path, options);
  std::vector<ParquetColumn> all;
  for (int g = 0; g < reader.num_row_groups(); ++g) {
    std::vector<ParquetColumn> part = reader.ReadRowGroupColumns(g);
    if (all.empty()) {
      all = std::move(part);
      continue;
    }
    for (size_t c = 0; c < part.size(); ++c) {
      ParquetColumn& to = all[c];
      const ParquetColumn& from = part[c];
      for (size_t k = 0; k < from.lists.size(); ++k) {
        uint32_t base = to.lists[k].offsets.back();
        to.lists[k].valid.insert(to.lists[k].valid.end(), from.lists[k].valid.begin(),
                                 from.lists[k].valid.end());
        for (size_t i = 1; i < from.lists[k].offsets.size(); ++i) {
          to.lists[k].offsets.push_back(base + from.lists[k].offsets[i]);
        }
      }
      for (auto [src, dst] : {std::pair<const Column*, Column*>{&from.values, &to.values},
                              std::pair<const Column*, Column*>{&from.keys, &to.keys}}) {
        for (size_t i = 0; i < src->size(); ++i) {
          switch (src->type) {
            case ColumnType::kInt64:
              Append(dst, src->valid[i] ? Opt<int64_t>(src->ints[i]) : std::nullopt);
              break;
            case ColumnType::kDouble:
              Append(dst, src->valid[i] ? Opt<double>(src->doubles[i]) : std::nullopt);
              break;
            case ColumnType::kString:
              Append(dst, src->valid[i] ? Opt<std::string>(std::string(src->StringAt(i)))
                                        : std::nullopt);
              break;
          }
        }
      }
    }
  }
  return all;
}

std::string ReadBytes(const std::string& path) { return ReadFileToString(path); }
void WriteBytes(const std::string& path, const std::string& bytes) {
  testing::WriteFile(path, bytes);
}

// ------------------------------------------------------------- Thrift compact protocol

TEST(ParquetThriftTest, SkipsUnknownFieldsOfEveryWireType) {
  pq::ThriftCompactWriter out;
  out.BeginStruct();
  out.FieldI32(1, 1);
  out.FieldListBegin(2, pq::kThriftStruct, 2);
  out.BeginStruct();  // root
  out.FieldString(4, "schema");
  out.FieldI32(5, 1);
  out.EndStruct();
  out.BeginStruct();
  out.FieldI32(1, static_cast<int32_t>(pq::PhysicalType::kInt64));
  out.FieldI32(3, 0);
  out.FieldString(4, "x");
  out.FieldStructBegin(30);  // unknown struct holding every wire type
  out.FieldBool(1, true);
  out.FieldBool(2, false);
  out.FieldI64(3, -5);
  out.FieldString(4, "ignored");
  out.FieldListBegin(5, pq::kThriftBinary, 20);
  for (int i = 0; i < 20; ++i) out.ListString("e");
  out.EndStruct();
  out.EndStruct();
  out.FieldI64(3, 0);
  out.FieldListBegin(4, pq::kThriftStruct, 0);
  out.FieldString(6, "writer");
  // The outer struct stays open: append unknown fields the writer has no helpers for, by hand.
  std::string bytes = out.Release();
  bytes += std::string("\x1b\x01\x85\x01\x61\x02", 6);     // field 7: map<binary,i32>{"a": 1}
  bytes += std::string("\x17", 1) + std::string(8, '\0');  // field 8: double
  bytes += std::string("\x13\x07", 2);                     // field 9: byte
  bytes += std::string("\x1a\x21\x01\x02", 4);             // field 10: set<bool> {true, false}
  bytes += std::string("\x00", 1);                         // stop
  pq::FileMetaData metadata =
      pq::DecodeFileMetaData(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  ASSERT_EQ(metadata.schema.size(), 2u);
  EXPECT_EQ(metadata.schema[1].name, "x");
  EXPECT_EQ(metadata.schema[1].type, pq::PhysicalType::kInt64);
  EXPECT_EQ(metadata.created_by, "writer");
}

TEST(ParquetThriftTest, RejectsDeepNestingHugeListsAndTruncation) {
  std::string deep(200, '\xfc');  // unknown field 15, a struct, nested again and again
  EXPECT_TZREC_ERROR(
      pq::DecodeFileMetaData(reinterpret_cast<const uint8_t*>(deep.data()), deep.size()),
      "nested deeper");
  std::string huge("\x29\xfc\xff\xff\xff\x0f", 6);  // field 2: list<struct> of ~2^32 elements
  EXPECT_TZREC_ERROR(
      pq::DecodeFileMetaData(reinterpret_cast<const uint8_t*>(huge.data()), huge.size()),
      "bytes left");
  std::string truncated(
      "\x15\x02\x58\x10"
      "ab",
      6);  // created_by: 16 bytes, 2 present
  EXPECT_TZREC_ERROR(
      pq::DecodeFileMetaData(reinterpret_cast<const uint8_t*>(truncated.data()), truncated.size()),
      "corrupt Thrift metadata");
  std::string missing("\x15\x02\x00", 3);  // version only
  EXPECT_TZREC_ERROR(
      pq::DecodeFileMetaData(reinterpret_cast<const uint8_t*>(missing.data()), missing.size()),
      "lacks required field schema");
}

// ---------------------------------------------------------------- byte-level encodings

TEST(ParquetEncodingTest, RleBitPackedHybridHandComputedBytes) {
  // The spec's bit-packing example: 0..7 at bit width 3 pack to 0x88 0xC6 0xFA; header
  // (1 group << 1) | 1 = 0x03. Then an RLE run: 5 copies of 4 -> header 5 << 1 = 0x0A, 0x04.
  const uint8_t bytes[] = {0x03, 0x88, 0xC6, 0xFA, 0x0A, 0x04};
  std::vector<uint32_t> values(13);
  pq::RleBitPackedDecoder(bytes, sizeof(bytes), 3).Decode(13, values.data());
  EXPECT_EQ(values, (std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 4, 4, 4, 4, 4}));
  std::vector<uint32_t> more(14);
  EXPECT_TZREC_ERROR(pq::RleBitPackedDecoder(bytes, sizeof(bytes), 3).Decode(14, more.data()),
                     "ends after 13");
  const uint8_t too_wide[] = {0x02, 0x09};  // RLE value 9 does not fit in 3 bits
  EXPECT_TZREC_ERROR(pq::RleBitPackedDecoder(too_wide, 2, 3).Decode(1, more.data()),
                     "does not fit");

  // Our encoder: ten 1s at width 1 are one RLE run; a short mixed run is bit-packed.
  std::string encoded;
  std::vector<uint32_t> ones(10, 1);
  pq::EncodeRleBitPacked(ones.data(), ones.size(), 1, &encoded);
  EXPECT_EQ(encoded, std::string("\x14\x01", 2));
  encoded.clear();
  std::vector<uint32_t> mixed{0, 1, 2, 3, 4, 5, 6, 7};
  pq::EncodeRleBitPacked(mixed.data(), mixed.size(), 3, &encoded);
  EXPECT_EQ(encoded, std::string("\x03\x88\xC6\xFA", 4));
}

TEST(ParquetEncodingTest, RleBitPackedRoundTripsRandomRuns) {
  std::mt19937 rng(7);
  for (int width : {0, 1, 2, 3, 7, 8, 13, 20, 32}) {
    std::vector<uint32_t> values;
    uint64_t limit = width == 32 ? 0xffffffffu : (uint64_t{1} << width) - 1;
    while (values.size() < 3000) {
      uint32_t value = static_cast<uint32_t>(rng() % (limit + 1));
      size_t run = rng() % 3 == 0 ? rng() % 40 : 1;
      values.insert(values.end(), run + 1, value);
    }
    std::string encoded;
    pq::EncodeRleBitPacked(values.data(), values.size(), width, &encoded);
    std::vector<uint32_t> decoded(values.size());
    pq::RleBitPackedDecoder(reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size(), width)
        .Decode(decoded.size(), decoded.data());
    EXPECT_EQ(values, decoded) << "bit width " << width;
  }
}

// A straightforward DELTA_BINARY_PACKED encoder (block 128, 4 miniblocks) as a reference.
std::string ReferenceDeltaEncode(const std::vector<int64_t>& values) {
  std::string out;
  auto varint = [&](uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  };
  auto zigzag = [](int64_t v) {
    return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
  };
  varint(128);
  varint(4);
  varint(values.size());
  varint(zigzag(values.empty() ? 0 : values[0]));
  for (size_t start = 1; start < values.size(); start += 128) {
    std::vector<uint64_t> deltas;
    for (size_t i = start; i < std::min(values.size(), start + 128); ++i) {
      deltas.push_back(static_cast<uint64_t>(values[i]) - static_cast<uint64_t>(values[i - 1]));
    }
    int64_t min_delta = static_cast<int64_t>(deltas[0]);
    for (uint64_t d : deltas) min_delta = std::min(min_delta, static_cast<int64_t>(d));
    varint(zigzag(min_delta));
    std::vector<std::vector<uint64_t>> minis(4);
    std::string widths(4, '\0');
    for (size_t i = 0; i < deltas.size(); ++i)
      minis[i / 32].push_back(deltas[i] - static_cast<uint64_t>(min_delta));
    std::string packed;
    for (int m = 0; m < 4; ++m) {
      if (minis[m].empty()) continue;
      int width = 0;
      for (uint64_t v : minis[m]) width = std::max(width, pq::BitWidthFor(v));
      widths[m] = static_cast<char>(width);
      minis[m].resize(32, 0);
      unsigned __int128 buffer = 0;
      int filled = 0;
      for (uint64_t v : minis[m]) {
        buffer |= static_cast<unsigned __int128>(v) << filled;
        filled += width;
        while (filled >= 8) {
          packed.push_back(static_cast<char>(buffer & 0xff));
          buffer >>= 8;
          filled -= 8;
        }
      }
    }
    out += widths + packed;
  }
  return out;
}

TEST(ParquetEncodingTest, DeltaBinaryPackedSpecExamples) {
  // Spec example 1: 1 2 3 4 5 -> deltas all 1, min delta 1, every bit width 0.
  const uint8_t example1[] = {0x80, 0x01, 0x04, 0x05, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00};
  pq::ValueBuffer out;
  EXPECT_EQ(
      pq::DecodeDeltaBinaryPacked(pq::PhysicalType::kInt64, example1, sizeof(example1), 5, &out),
      sizeof(example1));
  EXPECT_EQ(out.ints, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  // Spec example 2: 7 5 3 1 2 3 4 5 -> min delta -2 (zigzag 3), relative deltas 0 0 0 3 3 3 3
  // at bit width 2 in the first miniblock (32 values * 2 bits = 8 bytes).
  const uint8_t example2[] = {0x80, 0x01, 0x04, 0x08, 0x0E, 0x03, 0x02, 0x00, 0x00,
                              0x00, 0xC0, 0x3F, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  out.Clear();
  EXPECT_EQ(
      pq::DecodeDeltaBinaryPacked(pq::PhysicalType::kInt32, example2, sizeof(example2), 8, &out),
      sizeof(example2));
  EXPECT_EQ(out.ints, (std::vector<int64_t>{7, 5, 3, 1, 2, 3, 4, 5}));
  out.Clear();
  EXPECT_TZREC_ERROR(pq::DecodeDeltaBinaryPacked(pq::PhysicalType::kInt32, example2, 11, 8, &out),
                     "truncated");
  EXPECT_TZREC_ERROR(
      pq::DecodeDeltaBinaryPacked(pq::PhysicalType::kInt32, example2, sizeof(example2), 9, &out),
      "holds 8 values");
}

TEST(ParquetEncodingTest, DeltaBinaryPackedMatchesReferenceEncoder) {
  std::mt19937_64 rng(11);
  std::vector<int64_t> values{std::numeric_limits<int64_t>::max(),
                              std::numeric_limits<int64_t>::min(), 0, -1};
  for (int i = 0; i < 700; ++i) {
    values.push_back(i % 50 == 0 ? static_cast<int64_t>(rng())
                                 : values.back() + static_cast<int64_t>(rng() % 1000) - 300);
  }
  std::string encoded = ReferenceDeltaEncode(values);
  pq::ValueBuffer out;
  size_t used = pq::DecodeDeltaBinaryPacked(pq::PhysicalType::kInt64,
                                            reinterpret_cast<const uint8_t*>(encoded.data()),
                                            encoded.size(), values.size(), &out);
  EXPECT_EQ(used, encoded.size());
  EXPECT_EQ(out.ints, values);
}

TEST(ParquetEncodingTest, DeltaByteArraysAndByteStreamSplit) {
  // DELTA_LENGTH_BYTE_ARRAY: lengths 3, 0, 2 then "abc" "de".
  std::string dlba = ReferenceDeltaEncode({3, 0, 2}) + "abcde";
  pq::ValueBuffer out;
  out.type = ColumnType::kString;
  EXPECT_EQ(pq::DecodeDeltaLengthByteArray(reinterpret_cast<const uint8_t*>(dlba.data()),
                                           dlba.size(), 3, &out),
            dlba.size());
  EXPECT_EQ(out.StringAt(0), "abc");
  EXPECT_EQ(out.StringAt(1), "");
  EXPECT_EQ(out.StringAt(2), "de");
  // DELTA_BYTE_ARRAY: "apple", "apply", "ape" = prefixes 0 4 2, suffixes "apple" "y" "e".
  std::string dba = ReferenceDeltaEncode({0, 4, 2}) + ReferenceDeltaEncode({5, 1, 1}) + "appleye";
  out.Clear();
  pq::DecodeDeltaByteArray(reinterpret_cast<const uint8_t*>(dba.data()), dba.size(), 3, &out);
  EXPECT_EQ(out.StringAt(0), "apple");
  EXPECT_EQ(out.StringAt(1), "apply");
  EXPECT_EQ(out.StringAt(2), "ape");
  std::string bad = ReferenceDeltaEncode({0, 9, 2}) + ReferenceDeltaEncode({5, 1, 1}) + "appleye";
  out.Clear();
  EXPECT_TZREC_ERROR(
      pq::DecodeDeltaByteArray(reinterpret_cast<const uint8_t*>(bad.data()), bad.size(), 3, &out),
      "exceeds the previous value");
  // BYTE_STREAM_SPLIT of floats 1.0f (00 00 80 3f) and -2.0f (00 00 00 c0): byte k of every
  // value, stream after stream.
  const uint8_t split[] = {0x00, 0x00, 0x00, 0x00, 0x80, 0x00, 0x3f, 0xc0};
  pq::ValueBuffer floats;
  floats.type = ColumnType::kDouble;
  pq::DecodeByteStreamSplit(pq::PhysicalType::kFloat, split, sizeof(split), 2, &floats);
  EXPECT_EQ(floats.doubles, (std::vector<double>{1.0, -2.0}));
}

TEST(ParquetCodecTest, RoundTripsAndRejectsCorruptPages) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "value " + std::to_string(i % 37) + ";";
  for (pq::Codec codec : {pq::Codec::kUncompressed, pq::Codec::kSnappy, pq::Codec::kGzip,
                          pq::Codec::kZstd, pq::Codec::kLz4Raw}) {
    std::string packed;
    pq::Compress(codec, text.data(), text.size(), 0, &packed);
    std::string unpacked;
    pq::Decompress(codec, reinterpret_cast<const uint8_t*>(packed.data()), packed.size(),
                   text.size(), &unpacked);
    EXPECT_EQ(unpacked, text) << pq::CodecName(codec);
    EXPECT_TZREC_ERROR(pq::Decompress(codec, reinterpret_cast<const uint8_t*>(packed.data()),
                                      packed.size(), text.size() + 1, &unpacked),
                       pq::CodecName(codec));
    if (codec == pq::Codec::kUncompressed) continue;
    std::string garbage = packed;
    for (size_t i = 0; i < garbage.size(); i += 3)
      garbage[i] = static_cast<char>(garbage[i] ^ 0x5a);
    try {
      pq::Decompress(codec, reinterpret_cast<const uint8_t*>(garbage.data()), garbage.size(),
                     text.size(), &unpacked);
      EXPECT_NE(unpacked, text) << pq::CodecName(codec);  // corruption undetectable by the codec
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(pq::CodecName(codec)), std::string::npos) << e.what();
    }
  }
  std::string unpacked;
  EXPECT_TZREC_ERROR(pq::Decompress(pq::Codec::kBrotli, nullptr, 0, 0, &unpacked),
                     "not supported yet");
}

// --------------------------------------------------------------------------- round trips

struct Dataset {
  std::vector<ParquetFieldSpec> specs;
  std::vector<ParquetColumn> columns;
};

// Every writable type, plain and nested. `nullable` = false declares everything required
// and produces no nulls.
Dataset MakeDataset(size_t rows, bool nullable) {
  std::vector<Opt<int64_t>> b, i32, i64;
  std::vector<Opt<double>> f32, f64;
  std::vector<Opt<std::string>> low, high;
  ListRows<int64_t> li64;
  ListRows<double> lf32;
  ListRows<std::string> lstr;
  std::vector<Opt<ListRows<int64_t>>> llist;
  std::vector<Opt<ListRows<std::string>>> llstr;
  std::vector<Opt<std::vector<std::pair<std::string, Opt<double>>>>> mstr;
  std::vector<Opt<std::vector<std::pair<int64_t, Opt<std::string>>>>> mint;
  const double specials[] = {std::nan(""), std::numeric_limits<double>::infinity(), -0.0, 1e300,
                             5e-324};
  for (size_t r = 0; r < rows; ++r) {
    int64_t i = static_cast<int64_t>(r);
    bool null = nullable && i % 7 == 3;
    auto opt = [&](auto v) { return null ? std::nullopt : std::optional<decltype(v)>(v); };
    b.push_back(null ? std::nullopt : Opt<int64_t>(i % 3 == 0));
    i32.push_back(null ? std::nullopt
                       : Opt<int64_t>(i == 0   ? INT32_MIN
                                      : i == 1 ? INT32_MAX
                                               : i * 37 - 900));
    i64.push_back(null ? std::nullopt
                       : Opt<int64_t>(i == 0   ? INT64_MIN
                                      : i == 1 ? INT64_MAX
                                               : i * 1000003 - 77));
    f32.push_back(null ? std::nullopt : Opt<double>(static_cast<float>(i * 0.1 - 3)));
    f64.push_back(null ? std::nullopt : Opt<double>(i < 5 ? specials[i] : i / 3.0));
    low.push_back(opt(std::string("cat_") + std::to_string(i % 5)));
    high.push_back(opt(std::string(static_cast<size_t>(i % 13), 'x') + std::to_string(i * 7919)));
    bool item_nulls = nullable;
    std::vector<Opt<int64_t>> ints;
    std::vector<Opt<double>> floats;
    std::vector<Opt<std::string>> strings;
    for (int64_t k = 0; k < i % 4; ++k) {
      bool item_null = item_nulls && (i + k) % 5 == 0;
      ints.push_back(item_null ? std::nullopt : Opt<int64_t>(i * 10 + k));
      floats.push_back(item_null ? std::nullopt : Opt<double>(static_cast<float>(k * 0.25 + i)));
      strings.push_back(item_null ? std::nullopt
                                  : Opt<std::string>("s" + std::to_string((i + k) % 6)));
    }
    li64.push_back(null ? std::nullopt : Opt<std::vector<Opt<int64_t>>>(ints));
    lf32.push_back(null ? std::nullopt : Opt<std::vector<Opt<double>>>(floats));
    lstr.push_back(null ? std::nullopt : Opt<std::vector<Opt<std::string>>>(strings));
    ListRows<int64_t> nested;
    ListRows<std::string> nested_strings;
    for (int64_t k = 0; k < i % 3; ++k) {
      bool sub_null = item_nulls && (i + k) % 4 == 1;
      nested.push_back(sub_null ? std::nullopt : Opt<std::vector<Opt<int64_t>>>(ints));
      nested_strings.push_back(sub_null ? std::nullopt
                                        : Opt<std::vector<Opt<std::string>>>(strings));
    }
    llist.push_back(null ? std::nullopt : Opt<ListRows<int64_t>>(nested));
    llstr.push_back(null ? std::nullopt : Opt<ListRows<std::string>>(nested_strings));
    std::vector<std::pair<std::string, Opt<double>>> by_name;
    std::vector<std::pair<int64_t, Opt<std::string>>> by_id;
    for (int64_t k = 0; k < i % 3; ++k) {
      bool value_null = item_nulls && k == 1;
      by_name.emplace_back("k" + std::to_string(k),
                           value_null ? std::nullopt : Opt<double>(i + k * 0.5));
      by_id.emplace_back(i * 100 + k,
                         value_null ? std::nullopt : Opt<std::string>("v" + std::to_string(i)));
    }
    mstr.push_back(null ? std::nullopt
                        : Opt<std::vector<std::pair<std::string, Opt<double>>>>(by_name));
    mint.push_back(null ? std::nullopt
                        : Opt<std::vector<std::pair<int64_t, Opt<std::string>>>>(by_id));
  }
  Dataset data;
  auto plain = [&](const std::string& name, ParquetType type) {
    data.specs.push_back(ParquetFieldSpec::Plain(name, type, nullable));
  };
  auto nested = [&](ParquetFieldSpec spec) {
    spec.nullable = nullable;
    spec.items_nullable = nullable;
    data.specs.push_back(spec);
  };
  plain("b", ParquetType::kBoolean);
  data.columns.push_back(PlainColumn("b", b));
  plain("i32", ParquetType::kInt32);
  data.columns.push_back(PlainColumn("i32", i32));
  plain("i64", ParquetType::kInt64);
  data.columns.push_back(PlainColumn("i64", i64));
  plain("f32", ParquetType::kFloat);
  data.columns.push_back(PlainColumn("f32", f32));
  plain("f64", ParquetType::kDouble);
  data.columns.push_back(PlainColumn("f64", f64));
  plain("low", ParquetType::kString);
  data.columns.push_back(PlainColumn("low", low));
  plain("high", ParquetType::kString);
  data.columns.push_back(PlainColumn("high", high));
  nested(ParquetFieldSpec::List("li64", ParquetType::kInt64));
  data.columns.push_back(ListColumn("li64", li64));
  nested(ParquetFieldSpec::List("lf32", ParquetType::kFloat));
  data.columns.push_back(ListColumn("lf32", lf32));
  nested(ParquetFieldSpec::List("lstr", ParquetType::kString));
  data.columns.push_back(ListColumn("lstr", lstr));
  nested(ParquetFieldSpec::List("llist", ParquetType::kInt64, 2));
  data.columns.push_back(ListListColumn("llist", llist));
  nested(ParquetFieldSpec::List("llstr", ParquetType::kString, 2));
  data.columns.push_back(ListListColumn("llstr", llstr));
  nested(ParquetFieldSpec::Map("mstr", ParquetType::kString, ParquetType::kDouble));
  data.columns.push_back(MapColumn("mstr", mstr));
  nested(ParquetFieldSpec::Map("mint", ParquetType::kInt64, ParquetType::kString));
  data.columns.push_back(MapColumn("mint", mint));
  return data;
}

TEST(ParquetRoundTripTest, EveryTypeCodecNullabilityAndNesting) {
  TempDir dir;
  for (ParquetCodec codec : {ParquetCodec::kUncompressed, ParquetCodec::kSnappy,
                             ParquetCodec::kGzip, ParquetCodec::kZstd, ParquetCodec::kLz4Raw}) {
    for (bool nullable : {false, true}) {
      for (bool dictionary : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "codec " << static_cast<int>(codec) << " nullable "
                                          << nullable << " dictionary " << dictionary);
        Dataset data = MakeDataset(300, nullable);
        ParquetWriteOptions options;
        options.codec = codec;
        options.dictionary = dictionary;
        options.row_group_rows = 97;
        options.data_page_bytes = 256;
        std::string path = dir.File("roundtrip.parquet");
        {
          ParquetFileWriter writer(path, data.specs, options);
          // Uneven batches exercise row groups that straddle Write() calls.
          std::vector<ParquetColumn> all = data.columns;
          writer.Write(all);
          writer.Close();
          EXPECT_EQ(writer.rows_written(), 300);
        }
        ParquetFileReader reader(path);
        EXPECT_EQ(reader.num_rows(), 300);
        EXPECT_EQ(reader.row_group_row_counts(), (std::vector<int64_t>{97, 97, 97, 9}));
        std::vector<ParquetColumn> read = ReadAllGroups(path);
        ASSERT_EQ(read.size(), data.columns.size());
        for (size_t c = 0; c < read.size(); ++c) ExpectSameColumn(data.columns[c], read[c]);
        // The flat RecordBatch path gives the same plain columns.
        RecordBatch batch;
        reader.ReadRows(0, 300, &batch);
        for (size_t c = 0; c < 7; ++c)
          ExpectSameValues(data.columns[c].values, batch.columns[c], batch.columns[c].name);
      }
    }
  }
}

TEST(ParquetRoundTripTest, DictionaryOnlyWhileSmall) {
  TempDir dir;
  Dataset data = MakeDataset(200, true);
  ParquetWriteOptions options;
  options.dictionary_max_bytes = 100;  // "low" (5 short values) fits, "high" does not
  std::string path = dir.File("dict.parquet");
  ParquetFileWriter writer(path, data.specs, options);
  writer.Write(data.columns);
  writer.Close();
  std::string bytes = ReadBytes(path);
  uint32_t footer_length;
  std::memcpy(&footer_length, bytes.data() + bytes.size() - 8, 4);
  pq::FileMetaData metadata = pq::DecodeFileMetaData(
      reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size() - 8 - footer_length,
      footer_length);
  auto chunk = [&](const std::string& name) -> const pq::ColumnMetaData& {
    for (const auto& c : metadata.row_groups[0].columns) {
      if (c.meta_data.path_in_schema[0] == name) return c.meta_data;
    }
    throw Error("no chunk " + name);
  };
  EXPECT_TRUE(chunk("low").has_dictionary_page_offset);
  EXPECT_FALSE(chunk("high").has_dictionary_page_offset);
  EXPECT_FALSE(chunk("i64").has_dictionary_page_offset);
  std::vector<ParquetColumn> read = ReadAllGroups(path);
  ExpectSameColumn(data.columns[5], read[5]);
  ExpectSameColumn(data.columns[6], read[6]);
}

TEST(ParquetReaderTest, NestedTextUsesTheConfiguredSeparators) {
  TempDir dir;
  std::string path = dir.File("text.parquet");
  ParquetFileWriter writer(path,
                           {ParquetFieldSpec::List("l", ParquetType::kInt64),
                            ParquetFieldSpec::List("ll", ParquetType::kInt64, 2),
                            ParquetFieldSpec::Map("m", ParquetType::kString, ParquetType::kDouble),
                            ParquetFieldSpec::List("f", ParquetType::kFloat),
                            ParquetFieldSpec::List("bools", ParquetType::kBoolean),
                            ParquetFieldSpec::Plain("d", ParquetType::kDouble)});
  writer.Write(
      {ListColumn<int64_t>(
           "l", {std::vector<Opt<int64_t>>{1, 2, 3}, std::nullopt, std::vector<Opt<int64_t>>{},
                 std::vector<Opt<int64_t>>{std::nullopt, 5}}),
       ListListColumn<int64_t>(
           "ll", {ListRows<int64_t>{std::vector<Opt<int64_t>>{1}, std::vector<Opt<int64_t>>{2, 3}},
                  std::nullopt, ListRows<int64_t>{std::vector<Opt<int64_t>>{}},
                  ListRows<int64_t>{std::nullopt, std::vector<Opt<int64_t>>{-4}}}),
       MapColumn<std::string, double>(
           "m", {std::vector<std::pair<std::string, Opt<double>>>{{"a", 1.5}, {"b", std::nullopt}},
                 std::vector<std::pair<std::string, Opt<double>>>{}, std::nullopt,
                 std::vector<std::pair<std::string, Opt<double>>>{{"c", -2.0}}}),
       ListColumn<double>("f", {std::vector<Opt<double>>{static_cast<float>(0.1), 1e10},
                                std::nullopt, std::nullopt, std::vector<Opt<double>>{}}),
       ListColumn<int64_t>(
           "bools", {std::vector<Opt<int64_t>>{1, 0}, std::nullopt, std::nullopt, std::nullopt}),
       PlainColumn<double>("d", {0.1, 1e300, std::nullopt, -0.0})});
  writer.Close();

  ParquetReadOptions options;
  options.list_separator = ",";
  options.nested_list_separator = "|";
  options.map_kv_separator = "=";
  ParquetFileReader reader(path, options);
  RecordBatch batch;
  ASSERT_TRUE(reader.Next(100, &batch));
  ASSERT_EQ(batch.num_rows(), 4u);
  auto text = [&](const std::string& column) {
    std::vector<std::string> rows;
    const Column* c = batch.Find(column);
    for (size_t i = 0; i < c->size(); ++i)
      rows.push_back(c->IsNull(i) ? "<null>" : std::string(c->StringAt(i)));
    return rows;
  };
  EXPECT_EQ(text("l"), (std::vector<std::string>{"1,2,3", "<null>", "", ",5"}));
  EXPECT_EQ(text("ll"), (std::vector<std::string>{"1|2,3", "<null>", "", "|-4"}));
  EXPECT_EQ(text("m"), (std::vector<std::string>{"a=1.5,b=", "", "<null>", "c=-2"}));
  EXPECT_EQ(text("f"), (std::vector<std::string>{"0.1,1e+10", "<null>", "<null>", ""}));
  EXPECT_EQ(text("bools"), (std::vector<std::string>{"1,0", "<null>", "<null>", "<null>"}));
  EXPECT_EQ(batch.Find("d")->type, ColumnType::kDouble);
  EXPECT_EQ(batch.Find("d")->doubles[1], 1e300);
  EXPECT_EQ(batch.line_numbers, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(batch.RowLocation(2), path + ":3");

  ParquetFileReader defaults(path, {});
  defaults.ReadRows(0, 1, &batch);
  EXPECT_EQ(batch.Find("l")->StringAt(0),
            "1\x1d"
            "2\x1d"
            "3");
  EXPECT_EQ(batch.Find("ll")->StringAt(0),
            "1;2\x1d"
            "3");
  EXPECT_EQ(batch.Find("m")->StringAt(0),
            "a:1.5\x1d"
            "b:");
}

TEST(ParquetReaderTest, RowGroupsRowRangesStreamingAndProjection) {
  TempDir dir;
  std::string path = dir.File("ranges.parquet");
  std::vector<Opt<int64_t>> ids;
  std::vector<Opt<std::string>> names;
  std::vector<Opt<double>> scores;
  for (int i = 0; i < 1000; ++i) {
    ids.push_back(i);
    names.push_back(i % 11 == 0 ? std::nullopt : Opt<std::string>("n" + std::to_string(i)));
    scores.push_back(i * 0.5);
  }
  ParquetWriteOptions options;
  options.row_group_rows = 128;
  options.data_page_bytes = 100;
  {
    ParquetFileWriter writer(path,
                             {ParquetFieldSpec::Plain("id", ParquetType::kInt64, false),
                              ParquetFieldSpec::Plain("name", ParquetType::kString),
                              ParquetFieldSpec::Plain("score", ParquetType::kDouble)},
                             options);
    // Two RecordBatch writes of 600 + 400 rows.
    for (auto [begin, end] : {std::pair<int, int>{0, 600}, std::pair<int, int>{600, 1000}}) {
      RecordBatch batch;
      batch.columns.push_back(
          MakeColumn("id", std::vector<Opt<int64_t>>(ids.begin() + begin, ids.begin() + end)));
      batch.columns.push_back(MakeColumn(
          "score", std::vector<Opt<double>>(scores.begin() + begin, scores.begin() + end)));
      batch.columns.push_back(MakeColumn(
          "name", std::vector<Opt<std::string>>(names.begin() + begin, names.begin() + end)));
      batch.line_numbers.resize(end - begin);
      writer.Write(batch);
    }
    writer.Close();
  }
  ParquetReadOptions projection;
  projection.columns = {"score", "id"};
  ParquetFileReader reader(path, projection);
  EXPECT_EQ(reader.num_rows(), 1000);
  ASSERT_EQ(reader.num_row_groups(), 8);
  EXPECT_EQ(reader.row_group_num_rows(7), 1000 - 7 * 128);
  EXPECT_EQ(reader.column_names(), (std::vector<std::string>{"score", "id"}));
  ASSERT_EQ(reader.fields().size(), 3u);
  EXPECT_EQ(reader.fields()[0].parquet_type, "INT64");
  EXPECT_FALSE(reader.fields()[0].nullable);
  EXPECT_EQ(reader.fields()[1].output_type, ColumnType::kString);

  reader.SetRowRange(130, 700);
  RecordBatch batch;
  int64_t expected_row = 130;
  while (reader.Next(100, &batch)) {
    ASSERT_EQ(batch.columns.size(), 2u);
    ASSERT_GT(batch.num_rows(), 0u);
    // A batch never crosses a row group boundary.
    EXPECT_EQ((expected_row) / 128,
              (expected_row + static_cast<int64_t>(batch.num_rows()) - 1) / 128);
    for (size_t i = 0; i < batch.num_rows(); ++i) {
      EXPECT_EQ(batch.columns[1].ints[i], expected_row);
      EXPECT_EQ(batch.columns[0].doubles[i], expected_row * 0.5);
      EXPECT_EQ(batch.line_numbers[i], expected_row + 1);
      ++expected_row;
    }
  }
  EXPECT_EQ(expected_row, 700);

  ParquetReadOptions names_only;
  names_only.columns = {"name"};
  ParquetFileReader name_reader(path, names_only);
  name_reader.ReadRows(250, 520, &batch);
  ASSERT_EQ(batch.num_rows(), 270u);
  for (size_t i = 0; i < batch.num_rows(); ++i) {
    int row = 250 + static_cast<int>(i);
    EXPECT_EQ(batch.columns[0].IsNull(i), row % 11 == 0);
    if (row % 11) EXPECT_EQ(batch.columns[0].StringAt(i), "n" + std::to_string(row));
  }
  name_reader.ReadRows(990, 5000, &batch);
  EXPECT_EQ(batch.num_rows(), 10u);
  EXPECT_TZREC_ERROR(name_reader.SetRowRange(5, 2), "invalid row range");

  ParquetReadOptions missing;
  missing.columns = {"id", "nope"};
  EXPECT_TZREC_ERROR({ ParquetFileReader unused(path, missing); },
                     path + ": column 'nope' not found; columns are: id, name, score");

  // Projection never touches other columns' bytes: corrupt the "name" chunk and read the rest.
  std::string bytes = ReadBytes(path);
  uint32_t footer_length;
  std::memcpy(&footer_length, bytes.data() + bytes.size() - 8, 4);
  pq::FileMetaData metadata = pq::DecodeFileMetaData(
      reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size() - 8 - footer_length,
      footer_length);
  const pq::ColumnMetaData& name_chunk = metadata.row_groups[2].columns[1].meta_data;
  int64_t start = name_chunk.has_dictionary_page_offset ? name_chunk.dictionary_page_offset
                                                        : name_chunk.data_page_offset;
  for (int64_t i = start; i < start + name_chunk.total_compressed_size; ++i) bytes[i] = '\xff';
  std::string corrupt = dir.File("corrupt_name.parquet");
  WriteBytes(corrupt, bytes);
  ParquetFileReader rest(corrupt, projection);
  rest.ReadRows(0, 1000, &batch);
  EXPECT_EQ(batch.columns[1].ints[999], 999);
  ParquetFileReader broken(corrupt, names_only);
  EXPECT_TZREC_ERROR(broken.ReadRows(0, 1000, &batch),
                     corrupt + ": row group 2, column 'name': page 0:");
}

// ------------------------------------------------------- hand-built files for error paths

struct RawPage {
  pq::PageHeader header;
  std::string stored;  // page bytes as they sit in the file (compressed)
};

RawPage MakePage(pq::PageType type, int32_t num_values, pq::Encoding encoding,
                 const std::string& body, pq::Codec codec = pq::Codec::kUncompressed) {
  RawPage page;
  pq::Compress(codec, body.data(), body.size(), 0, &page.stored);
  page.header.type = type;
  page.header.uncompressed_page_size = static_cast<int32_t>(body.size());
  page.header.compressed_page_size = static_cast<int32_t>(page.stored.size());
  if (type == pq::PageType::kDictionaryPage) {
    page.header.has_dictionary_page_header = true;
    page.header.dictionary_page_header.num_values = num_values;
    page.header.dictionary_page_header.encoding = encoding;
  } else {
    page.header.has_data_page_header = true;
    page.header.data_page_header.num_values = num_values;
    page.header.data_page_header.encoding = encoding;
  }
  return page;
}

struct RawChunk {
  std::vector<std::string> path;
  pq::PhysicalType type = pq::PhysicalType::kInt64;
  pq::Codec codec = pq::Codec::kUncompressed;
  int64_t num_values = 0;
  std::vector<RawPage> pages;
};

pq::SchemaElement Element(const std::string& name, pq::Repetition repetition, int children = 0,
                          pq::PhysicalType type = pq::PhysicalType::kInt64,
                          int32_t converted = pq::kConvertedNone) {
  pq::SchemaElement e;
  e.name = name;
  e.has_repetition = true;
  e.repetition = repetition;
  e.has_type = children == 0;
  e.type = type;
  e.num_children = children;
  e.converted_type = converted;
  return e;
}

// One row group of `num_rows` rows holding `chunks`, under `fields` (the root is added).
std::string BuildFile(const std::vector<pq::SchemaElement>& fields, int top_level, int64_t num_rows,
                      const std::vector<RawChunk>& chunks,
                      const std::function<void(pq::FileMetaData*)>& edit_metadata = nullptr) {
  std::string file = "PAR1";
  pq::FileMetaData metadata;
  pq::SchemaElement root;
  root.name = "schema";
  root.num_children = top_level;
  metadata.schema.push_back(root);
  metadata.schema.insert(metadata.schema.end(), fields.begin(), fields.end());
  metadata.num_rows = num_rows;
  metadata.row_groups.emplace_back();
  metadata.row_groups[0].num_rows = num_rows;
  for (const RawChunk& raw : chunks) {
    pq::ColumnChunk chunk;
    chunk.has_meta_data = true;
    pq::ColumnMetaData& meta = chunk.meta_data;
    meta.type = raw.type;
    meta.path_in_schema = raw.path;
    meta.codec = raw.codec;
    meta.num_values = raw.num_values;
    int64_t start = static_cast<int64_t>(file.size());
    meta.data_page_offset = start;
    for (const RawPage& page : raw.pages) {
      if (page.header.type == pq::PageType::kDictionaryPage) {
        meta.has_dictionary_page_offset = true;
        meta.dictionary_page_offset = static_cast<int64_t>(file.size());
      } else if (meta.data_page_offset == start && meta.has_dictionary_page_offset) {
        meta.data_page_offset = static_cast<int64_t>(file.size());
      }
      file += pq::EncodePageHeader(page.header) + page.stored;
    }
    meta.total_compressed_size = static_cast<int64_t>(file.size()) - start;
    meta.total_uncompressed_size = meta.total_compressed_size;
    metadata.row_groups[0].columns.push_back(chunk);
  }
  if (edit_metadata) edit_metadata(&metadata);
  std::string footer = pq::EncodeFileMetaData(metadata);
  uint32_t length = static_cast<uint32_t>(footer.size());
  file += footer + std::string(reinterpret_cast<const char*>(&length), 4) + "PAR1";
  return file;
}

std::string PlainInt64s(const std::vector<int64_t>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * 8);
}

std::string RleLevels(const std::vector<uint32_t>& levels, int bit_width) {
  std::string runs;
  pq::EncodeRleBitPacked(levels.data(), levels.size(), bit_width, &runs);
  uint32_t length = static_cast<uint32_t>(runs.size());
  return std::string(reinterpret_cast<const char*>(&length), 4) + runs;
}

// A required INT64 column "x" with rows 1, 2, 3 in one PLAIN page.
std::string SimpleFile(const std::function<void(RawChunk*)>& corrupt = nullptr,
                       int64_t num_rows = 3) {
  RawChunk chunk;
  chunk.path = {"x"};
  chunk.num_values = 3;
  chunk.pages.push_back(
      MakePage(pq::PageType::kDataPage, 3, pq::Encoding::kPlain, PlainInt64s({1, 2, 3})));
  if (corrupt) corrupt(&chunk);
  return BuildFile({Element("x", pq::Repetition::kRequired)}, 1, num_rows, {chunk});
}

class ParquetCorruptFileTest : public ::testing::Test {
 protected:
  // Writes `bytes` and expects reading every row of column "x" to fail with `message`, the
  // message also naming the file.
  void ExpectReadError(const std::string& bytes, const std::string& message) {
    std::string path = dir_.File("bad.parquet");
    WriteBytes(path, bytes);
    try {
      ParquetFileReader reader(path);
      RecordBatch batch;
      reader.ReadRows(0, reader.num_rows(), &batch);
      ADD_FAILURE() << "expected an error containing '" << message << "'";
    } catch (const Error& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(message), std::string::npos) << what;
      EXPECT_EQ(what.rfind(path, 0), 0u) << "message should start with the file: " << what;
    }
  }
  TempDir dir_;
};

TEST_F(ParquetCorruptFileTest, BaselineReads) {
  std::string path = dir_.File("good.parquet");
  WriteBytes(path, SimpleFile());
  ParquetFileReader reader(path);
  RecordBatch batch;
  reader.ReadRows(0, 3, &batch);
  EXPECT_EQ(batch.columns[0].ints, (std::vector<int64_t>{1, 2, 3}));
}

TEST_F(ParquetCorruptFileTest, MagicFooterAndTruncation) {
  std::string good = SimpleFile();
  std::string bad = good;
  bad.replace(0, 4, "PAR2");
  ExpectReadError(bad, "bad magic bytes at the start");
  bad = good;
  bad.replace(bad.size() - 4, 4, "PARX");
  ExpectReadError(bad, "bad magic bytes at the end");
  bad = good;
  uint32_t huge = 0x7fffffff;
  bad.replace(bad.size() - 8, 4, std::string(reinterpret_cast<const char*>(&huge), 4));
  ExpectReadError(bad, "footer length 2147483647 is larger than the file");
  ExpectReadError(good.substr(0, good.size() / 2), "bad magic bytes at the end (file truncated");
  ExpectReadError(good.substr(0, 7), "truncated: only 7 bytes");
  bad = good;
  uint32_t footer_length;
  std::memcpy(&footer_length, good.data() + good.size() - 8, 4);
  bad.replace(good.size() - 8 - footer_length, 6, "\xff\xff\xff\xff\xff\xff");
  ExpectReadError(bad, "corrupt");
  bad = good;
  bad.replace(0, 4, "PARE");
  ExpectReadError(bad, "encrypted Parquet files are not supported yet");
  EXPECT_TZREC_ERROR({ ParquetFileReader unused(dir_.File("missing.parquet")); },
                     "cannot open Parquet file");
}

TEST_F(ParquetCorruptFileTest, PageHeadersSizesAndChecksums) {
  ExpectReadError(SimpleFile([](RawChunk* c) { c->pages[0].header.compressed_page_size += 100; }),
                  "row group 0, column 'x': page 0: page of 124 bytes overruns the column chunk");
  ExpectReadError(SimpleFile([](RawChunk* c) { c->pages[0].header.uncompressed_page_size = -1; }),
                  "negative sizes");
  ExpectReadError(SimpleFile([](RawChunk* c) { c->pages[0].header.uncompressed_page_size = 30; }),
                  "UNCOMPRESSED page has 24 bytes but its header states 30");
  ExpectReadError(SimpleFile([](RawChunk* c) {
                    c->pages[0].header.has_crc = true;
                    c->pages[0].header.crc = 12345;
                  }),
                  "column 'x': page 0: page CRC mismatch");
  {
    std::string path = dir_.File("unchecked.parquet");
    WriteBytes(path, SimpleFile([](RawChunk* c) {
                 c->pages[0].header.has_crc = true;
                 c->pages[0].header.crc = 12345;
               }));
    ParquetReadOptions unchecked;
    unchecked.verify_checksums = false;
    RecordBatch batch;
    ParquetFileReader(path, unchecked).ReadRows(0, 3, &batch);
    EXPECT_EQ(batch.columns[0].ints, (std::vector<int64_t>{1, 2, 3}));
  }
  // A correct CRC passes.
  std::string path = dir_.File("crc.parquet");
  WriteBytes(path, SimpleFile([](RawChunk* c) {
               c->pages[0].header.has_crc = true;
               c->pages[0].header.crc = static_cast<uint32_t>(
                   crc32(0L, reinterpret_cast<const Bytef*>(c->pages[0].stored.data()),
                         c->pages[0].stored.size()));
             }));
  RecordBatch batch;
  ParquetFileReader(path).ReadRows(0, 3, &batch);
  EXPECT_EQ(batch.columns[0].ints[2], 3);
  ExpectReadError(SimpleFile([](RawChunk* c) {
                    c->pages[0].stored.resize(10);
                    c->pages[0].header.compressed_page_size =
                        c->pages[0].header.uncompressed_page_size = 10;
                  }),
                  "PLAIN INT64 values truncated");
}

TEST_F(ParquetCorruptFileTest, CodecsAndDecompression) {
  auto snappy = [](RawChunk* c) {
    c->codec = pq::Codec::kSnappy;
    c->pages[0] = MakePage(pq::PageType::kDataPage, 3, pq::Encoding::kPlain, PlainInt64s({1, 2, 3}),
                           pq::Codec::kSnappy);
  };
  std::string path = dir_.File("snappy.parquet");
  WriteBytes(path, SimpleFile(snappy));
  RecordBatch batch;
  ParquetFileReader(path).ReadRows(0, 3, &batch);
  EXPECT_EQ(batch.columns[0].ints, (std::vector<int64_t>{1, 2, 3}));
  ExpectReadError(SimpleFile([&](RawChunk* c) {
                    snappy(c);
                    c->pages[0].stored[0] = '\x7f';
                  }),
                  "SNAPPY page");
  ExpectReadError(SimpleFile([&](RawChunk* c) {
                    snappy(c);
                    c->pages[0].header.uncompressed_page_size = 23;
                  }),
                  "SNAPPY page decompresses to 24 bytes, header states 23");
  ExpectReadError(SimpleFile([](RawChunk* c) { c->codec = pq::Codec::kBrotli; }),
                  "compression codec BROTLI is not supported yet");
  ExpectReadError(SimpleFile([](RawChunk* c) { c->codec = pq::Codec::kLzo; }),
                  "LZO is not supported yet");
}

TEST_F(ParquetCorruptFileTest, EncodingsDictionariesAndCounts) {
  ExpectReadError(SimpleFile([](RawChunk* c) {
                    c->pages[0].header.data_page_header.encoding = static_cast<pq::Encoding>(1);
                  }),
                  "value encoding encoding #1 is not supported yet");
  ExpectReadError(SimpleFile([](RawChunk* c) {
                    c->pages[0].header.data_page_header.encoding = pq::Encoding::kDeltaByteArray;
                  }),
                  "DELTA_BYTE_ARRAY of INT64 is not supported yet");
  // Dictionary of 2 values; the data page refers to index 5.
  auto dictionary = [](uint32_t bad_index) {
    return [bad_index](RawChunk* c) {
      std::string indices("\x03", 1);  // bit width 3
      std::vector<uint32_t> ids{0, 1, bad_index};
      pq::EncodeRleBitPacked(ids.data(), ids.size(), 3, &indices);
      c->pages = {
          MakePage(pq::PageType::kDictionaryPage, 2, pq::Encoding::kPlain, PlainInt64s({10, 20})),
          MakePage(pq::PageType::kDataPage, 3, pq::Encoding::kRleDictionary, indices)};
    };
  };
  std::string path = dir_.File("dict.parquet");
  WriteBytes(path, SimpleFile(dictionary(1)));
  RecordBatch batch;
  ParquetFileReader(path).ReadRows(0, 3, &batch);
  EXPECT_EQ(batch.columns[0].ints, (std::vector<int64_t>{10, 20, 20}));
  // Parquet 1.0 writers label both pages PLAIN_DICTIONARY; same layout.
  WriteBytes(path, SimpleFile([&](RawChunk* c) {
               dictionary(0)(c);
               c->pages[0].header.dictionary_page_header.encoding = pq::Encoding::kPlainDictionary;
               c->pages[1].header.data_page_header.encoding = pq::Encoding::kPlainDictionary;
             }));
  ParquetFileReader(path).ReadRows(0, 3, &batch);
  EXPECT_EQ(batch.columns[0].ints, (std::vector<int64_t>{10, 20, 10}));
  ExpectReadError(SimpleFile(dictionary(5)),
                  "page 1: dictionary index 5 out of range (dictionary has 2 entries)");
  ExpectReadError(SimpleFile([&](RawChunk* c) {
                    dictionary(1)(c);
                    c->pages.erase(c->pages.begin());
                  }),
                  "dictionary-encoded page without a dictionary page");
  // Level/value counts that disagree with each other or with the metadata.
  ExpectReadError(
      SimpleFile([](RawChunk* c) { c->pages[0].header.data_page_header.num_values = 4; }),
      "page holds 4 values but only 3 remain");
  ExpectReadError(SimpleFile(nullptr, 4),
                  "column chunk holds 3 values but the row group has 4 rows");
  ExpectReadError(SimpleFile([](RawChunk* c) { c->num_values = 6; }),
                  "column chunk holds 6 values but the row group has 3 rows");
}

TEST_F(ParquetCorruptFileTest, LevelsAndUnsupportedColumns) {
  // Optional column: definition levels claim 2 present values, the page has 3.
  RawChunk optional;
  optional.path = {"x"};
  optional.num_values = 3;
  optional.pages.push_back(MakePage(pq::PageType::kDataPage, 3, pq::Encoding::kPlain,
                                    RleLevels({1, 0, 1}, 1) + PlainInt64s({7, 9})));
  std::string path = dir_.File("optional.parquet");
  WriteBytes(path, BuildFile({Element("x", pq::Repetition::kOptional)}, 1, 3, {optional}));
  RecordBatch batch;
  ParquetFileReader(path).ReadRows(0, 3, &batch);
  EXPECT_EQ(batch.columns[0].valid, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(batch.columns[0].ints, (std::vector<int64_t>{7, 0, 9}));
  RawChunk short_levels = optional;
  short_levels.pages[0] =
      MakePage(pq::PageType::kDataPage, 3, pq::Encoding::kPlain,
               std::string("\x02\x00\x00\x00\x04\x01", 6) + PlainInt64s({7, 9}));
  ExpectReadError(BuildFile({Element("x", pq::Repetition::kOptional)}, 1, 3, {short_levels}),
                  "RLE/bit-packed data ends after 2 of 3 values");

  // A list whose first repetition level is 1 (continuing a list that never started).
  RawChunk list;
  list.path = {"x", "list", "element"};
  list.num_values = 2;
  list.pages.push_back(MakePage(pq::PageType::kDataPage, 2, pq::Encoding::kPlain,
                                RleLevels({1, 0}, 1) + RleLevels({3, 3}, 2) + PlainInt64s({1, 2})));
  std::vector<pq::SchemaElement> list_schema{
      Element("x", pq::Repetition::kOptional, 1, pq::PhysicalType::kInt64, pq::kConvertedList),
      Element("list", pq::Repetition::kRepeated, 1), Element("element", pq::Repetition::kOptional)};
  ExpectReadError(BuildFile(list_schema, 1, 1, {list}), "first repetition level is 1");

  // Unsupported columns fail only when requested.
  RawChunk int96;
  int96.path = {"t"};
  int96.type = pq::PhysicalType::kInt96;
  RawChunk x = optional;
  std::string mixed =
      BuildFile({Element("t", pq::Repetition::kOptional, 0, pq::PhysicalType::kInt96),
                 Element("s", pq::Repetition::kOptional, 1),
                 Element("a", pq::Repetition::kOptional), Element("x", pq::Repetition::kOptional)},
                3, 3, {int96, RawChunk{{"s", "a"}, pq::PhysicalType::kInt64}, x});
  path = dir_.File("mixed.parquet");
  WriteBytes(path, mixed);
  ParquetReadOptions only_x;
  only_x.columns = {"x"};
  ParquetFileReader(path, only_x).ReadRows(0, 3, &batch);
  EXPECT_EQ(batch.columns[0].ints, (std::vector<int64_t>{7, 0, 9}));
  ParquetReadOptions want_t;
  want_t.columns = {"t"};
  EXPECT_TZREC_ERROR(
      { ParquetFileReader unused(path, want_t); },
      path + ": column 't' (INT96): INT96 (legacy timestamp) columns are not supported yet");
  want_t.columns = {"s"};
  EXPECT_TZREC_ERROR({ ParquetFileReader unused(path, want_t); },
                     "struct columns are not supported yet");
  EXPECT_TZREC_ERROR({ ParquetFileReader unused(path); }, "are not supported yet");

  ExpectReadError(BuildFile({Element("x", pq::Repetition::kRequired)}, 1, 3,
                            {RawChunk{{"x"}, pq::PhysicalType::kInt64}},
                            [](pq::FileMetaData* m) {
                              m->row_groups[0].columns[0].meta_data.data_page_offset = 1 << 20;
                            }),
                  "column chunk bytes [1048576, 1048576) lie outside the file's data section");
  ExpectReadError(BuildFile({Element("x", pq::Repetition::kRequired)}, 1, 3,
                            {RawChunk{{"x"}, pq::PhysicalType::kInt64}},
                            [](pq::FileMetaData* m) {
                              m->row_groups[0].columns[0].meta_data.path_in_schema = {"y"};
                            }),
                  "column chunk path 'y' does not match the schema");
  ExpectReadError(BuildFile({Element("x", pq::Repetition::kRequired)}, 1, 3,
                            {RawChunk{{"x"}, pq::PhysicalType::kInt64}},
                            [](pq::FileMetaData* m) { m->num_rows = 5; }),
                  "the footer states 5 rows but the row groups hold 3");
  ExpectReadError(SimpleFile([](RawChunk* c) { c->pages.clear(); }),
                  "column chunk ends after 0 of its 3 values");
}

TEST_F(ParquetCorruptFileTest, LegacyListsBitPackedLevelsAndPageV2) {
  // optional group a (LIST) { repeated int32 element; }  (2-level) and a bare repeated int64.
  std::vector<pq::SchemaElement> schema{
      Element("a", pq::Repetition::kOptional, 1, pq::PhysicalType::kInt32, pq::kConvertedList),
      Element("element", pq::Repetition::kRepeated, 0, pq::PhysicalType::kInt32),
      Element("tags", pq::Repetition::kRepeated)};
  // Rows: [1, 2], null, [] for "a"; [5], [], [6, 7] for "tags".
  RawChunk a;
  a.path = {"a", "element"};
  a.type = pq::PhysicalType::kInt32;
  a.num_values = 4;
  int32_t a_values[] = {1, 2};
  a.pages.push_back(MakePage(pq::PageType::kDataPage, 4, pq::Encoding::kPlain,
                             RleLevels({0, 1, 0, 0}, 1) + RleLevels({2, 2, 0, 1}, 2) +
                                 std::string(reinterpret_cast<const char*>(a_values), 8)));
  // "tags" uses the deprecated BIT_PACKED levels (MSB first): rep 0 0 0 1, def 1 0 1 1.
  RawChunk tags;
  tags.path = {"tags"};
  tags.num_values = 4;
  RawPage page = MakePage(pq::PageType::kDataPage, 4, pq::Encoding::kPlain,
                          std::string("\x10\xb0", 2) + PlainInt64s({5, 6, 7}));
  page.header.data_page_header.repetition_level_encoding = pq::Encoding::kBitPacked;
  page.header.data_page_header.definition_level_encoding = pq::Encoding::kBitPacked;
  tags.pages.push_back(page);
  std::string path = dir_.File("legacy.parquet");
  WriteBytes(path, BuildFile(schema, 2, 3, {a, tags}));
  ParquetReadOptions options;
  options.list_separator = ",";
  ParquetFileReader reader(path, options);
  EXPECT_EQ(reader.fields()[0].parquet_type, "LIST<INT32>");
  EXPECT_FALSE(reader.fields()[1].nullable);
  RecordBatch batch;
  reader.ReadRows(0, 3, &batch);
  EXPECT_EQ(batch.columns[0].TextAt(0), "1,2");
  EXPECT_TRUE(batch.columns[0].IsNull(1));
  EXPECT_EQ(batch.columns[0].TextAt(2), "");
  EXPECT_FALSE(batch.columns[0].IsNull(2));
  EXPECT_EQ(batch.columns[1].TextAt(0), "5");
  EXPECT_EQ(batch.columns[1].TextAt(1), "");
  EXPECT_EQ(batch.columns[1].TextAt(2), "6,7");

  // Data page v2 (levels uncompressed, values ZSTD) with a null.
  RawChunk v2;
  v2.path = {"x"};
  v2.codec = pq::Codec::kZstd;
  v2.num_values = 3;
  std::string def;
  std::vector<uint32_t> levels{1, 0, 1};
  pq::EncodeRleBitPacked(levels.data(), 3, 1, &def);
  std::string values;
  pq::Compress(pq::Codec::kZstd, PlainInt64s({4, 8}).data(), 16, 0, &values);
  RawPage v2_page;
  v2_page.header.type = pq::PageType::kDataPageV2;
  v2_page.header.has_data_page_header_v2 = true;
  pq::DataPageHeaderV2& header = v2_page.header.data_page_header_v2;
  header.num_values = 3;
  header.num_nulls = 1;
  header.num_rows = 3;
  header.definition_levels_byte_length = static_cast<int32_t>(def.size());
  v2_page.stored = def + values;
  v2_page.header.compressed_page_size = static_cast<int32_t>(v2_page.stored.size());
  v2_page.header.uncompressed_page_size = static_cast<int32_t>(def.size() + 16);
  v2.pages.push_back(v2_page);
  path = dir_.File("v2.parquet");
  WriteBytes(path, BuildFile({Element("x", pq::Repetition::kOptional)}, 1, 3, {v2}));
  ParquetFileReader(path).ReadRows(0, 3, &batch);
  EXPECT_EQ(batch.columns[0].valid, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(batch.columns[0].ints, (std::vector<int64_t>{4, 0, 8}));
  v2.pages[0].header.data_page_header_v2.num_nulls = 0;
  ExpectReadError(BuildFile({Element("x", pq::Repetition::kOptional)}, 1, 3, {v2}),
                  "data page v2 states 0 nulls but its levels hold 1");
}

// ------------------------------------------------------------------------- writer errors

TEST(ParquetWriterTest, RejectsBadInputAndIsAtomic) {
  TempDir dir;
  std::string path = dir.File("out.parquet");
  {
    ParquetFileWriter writer(path, {ParquetFieldSpec::Plain("id", ParquetType::kInt32, false)});
    EXPECT_TZREC_ERROR(writer.Write({PlainColumn<int64_t>("id", {1, std::nullopt})}),
                       "column 'id': null value at index 1 but the schema forbids nulls");
    EXPECT_TZREC_ERROR(writer.Write({PlainColumn<int64_t>("id", {int64_t{1} << 40})}),
                       "does not fit in INT32");
    EXPECT_TZREC_ERROR(writer.Write({PlainColumn<double>("id", {1.0})}),
                       "has type double, the schema needs int64");
    EXPECT_TZREC_ERROR(writer.Write({PlainColumn<int64_t>("other", {1})}),
                       "the schema expects 'id'");
    writer.Write({PlainColumn<int64_t>("id", {1, 2})});
    EXPECT_FALSE(PathExists(path));  // nothing under the final name before Close()
  }
  // Destroyed without Close(): no file, no temp file left behind.
  EXPECT_FALSE(PathExists(path));
  EXPECT_TRUE(ListDirectory(dir.path()).empty());

  ParquetFileWriter lists(path, {ParquetFieldSpec::List("l", ParquetType::kInt64)});
  ParquetColumn bad = ListColumn<int64_t>("l", {std::vector<Opt<int64_t>>{1, 2}});
  bad.lists[0].offsets = {0, 3};
  EXPECT_TZREC_ERROR(lists.Write({bad}), "list level 0 offsets do not match");
  bad = ListColumn<int64_t>("l", {std::vector<Opt<int64_t>>{1, 2}});
  bad.lists[0].valid[0] = 0;
  EXPECT_TZREC_ERROR(lists.Write({bad}), "is null but has items");
  lists.Write({ListColumn<int64_t>("l", {std::vector<Opt<int64_t>>{1, 2}, std::nullopt})});
  lists.Close();
  EXPECT_TZREC_ERROR(lists.Write({ListColumn<int64_t>("l", {std::nullopt})}), "Write after Close");
  EXPECT_EQ(ListDirectory(dir.path()), (std::vector<std::string>{"out.parquet"}));
  ParquetFileReader reader(path);
  EXPECT_EQ(reader.num_rows(), 2);

  // An empty file is valid Parquet.
  std::string empty = dir.File("empty.parquet");
  ParquetFileWriter nothing(empty, {ParquetFieldSpec::Plain("x", ParquetType::kString)});
  nothing.Close();
  ParquetFileReader empty_reader(empty);
  EXPECT_EQ(empty_reader.num_rows(), 0);
  RecordBatch batch;
  EXPECT_FALSE(empty_reader.Next(10, &batch));
}

}  // namespace
}  // namespace tzrec
