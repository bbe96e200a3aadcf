// Parquet file metadata (parquet.thrift) as plain structs, with compact-protocol codecs.
//
// Holds only the fields this reader and writer use; everything else in the footer and page
// headers (statistics, indexes, bloom filters, ...) is skipped while decoding. Enum values are
// kept as written so an unknown codec or encoding reaches the reader's "not supported yet"
// message instead of being rejected as corrupt metadata. Decoders check that required fields
// are present and throw tzrec::Error without a file name; callers add it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tzrec {
namespace parquet {

enum class PhysicalType : int32_t {
  kBoolean = 0,
  kInt32 = 1,
  kInt64 = 2,
  kInt96 = 3,
  kFloat = 4,
  kDouble = 5,
  kByteArray = 6,
  kFixedLenByteArray = 7,
};

enum class Repetition : int32_t { kRequired = 0, kOptional = 1, kRepeated = 2 };

enum class Encoding : int32_t {
  kPlain = 0,
  kPlainDictionary = 2,
  kRle = 3,
  kBitPacked = 4,
  kDeltaBinaryPacked = 5,
  kDeltaLengthByteArray = 6,
  kDeltaByteArray = 7,
  kRleDictionary = 8,
  kByteStreamSplit = 9,
};

enum class Codec : int32_t {
  kUncompressed = 0,
  kSnappy = 1,
  kGzip = 2,
  kLzo = 3,
  kBrotli = 4,
  kLz4Hadoop = 5,  // "LZ4" with Hadoop framing, deprecated by the format
  kZstd = 6,
  kLz4Raw = 7,
};

enum class PageType : int32_t {
  kDataPage = 0,
  kIndexPage = 1,
  kDictionaryPage = 2,
  kDataPageV2 = 3
};

// SchemaElement.converted_type values this code looks at.
enum ConvertedType : int32_t {
  kConvertedNone = -1,
  kConvertedUtf8 = 0,
  kConvertedMap = 1,
  kConvertedMapKeyValue = 2,
  kConvertedList = 3,
  kConvertedEnum = 4,
  kConvertedDecimal = 5,
  kConvertedUint8 = 11,
  kConvertedUint16 = 12,
  kConvertedUint32 = 13,
  kConvertedUint64 = 14,
  kConvertedJson = 19,
  kConvertedInterval = 21,
};

// Field ids of the LogicalType union members this code looks at (0 = no logical type).
enum LogicalTypeId : int32_t {
  kLogicalNone = 0,
  kLogicalString = 1,
  kLogicalMap = 2,
  kLogicalList = 3,
  kLogicalDecimal = 5,
  kLogicalInteger = 10,
  kLogicalFloat16 = 15,
};

struct SchemaElement {
  std::string name;
  bool has_type = false;  // leaves have a type, groups have num_children
  PhysicalType type = PhysicalType::kInt32;
  int32_t type_length = 0;
  bool has_repetition = false;  // absent only on the root
  Repetition repetition = Repetition::kRequired;
  int32_t num_children = 0;
  int32_t converted_type = kConvertedNone;
  int32_t logical_type = kLogicalNone;
  bool logical_int_signed = true;  // LogicalType INTEGER only
};

struct ColumnMetaData {
  PhysicalType type = PhysicalType::kInt32;
  std::vector<int32_t> encodings;
  std::vector<std::string> path_in_schema;
  Codec codec = Codec::kUncompressed;
  int64_t num_values = 0;  // level count, nulls included
  int64_t total_uncompressed_size = 0;
  int64_t total_compressed_size = 0;  // page headers included
  int64_t data_page_offset = 0;
  bool has_dictionary_page_offset = false;
  int64_t dictionary_page_offset = 0;
};

struct ColumnChunk {
  std::string file_path;  // non-empty = data lives in another file
  int64_t file_offset = 0;
  bool has_meta_data = false;
  ColumnMetaData meta_data;
  bool encrypted = false;
};

struct RowGroup {
  std::vector<ColumnChunk> columns;
  int64_t total_byte_size = 0;
  int64_t num_rows = 0;
  int64_t file_offset = 0;
  int64_t total_compressed_size = 0;
};

struct KeyValue {
  std::string key;
  std::string value;
};

struct FileMetaData {
  int32_t version = 1;
  std::vector<SchemaElement> schema;  // depth-first, root first
  int64_t num_rows = 0;
  std::vector<RowGroup> row_groups;
  std::vector<KeyValue> key_value_metadata;
  std::string created_by;
  bool encrypted = false;
};

struct DataPageHeader {
  int32_t num_values = 0;  // levels, nulls included
  Encoding encoding = Encoding::kPlain;
  Encoding definition_level_encoding = Encoding::kRle;
  Encoding repetition_level_encoding = Encoding::kRle;
};

struct DataPageHeaderV2 {
  int32_t num_values = 0;
  int32_t num_nulls = 0;
  int32_t num_rows = 0;
  Encoding encoding = Encoding::kPlain;
  int32_t definition_levels_byte_length = 0;
  int32_t repetition_levels_byte_length = 0;
  bool is_compressed = true;
};

struct DictionaryPageHeader {
  int32_t num_values = 0;
  Encoding encoding = Encoding::kPlain;
};

struct PageHeader {
  PageType type = PageType::kDataPage;
  int32_t uncompressed_page_size = 0;
  int32_t compressed_page_size = 0;
  bool has_crc = false;
  uint32_t crc = 0;
  bool has_data_page_header = false;
  DataPageHeader data_page_header;
  bool has_data_page_header_v2 = false;
  DataPageHeaderV2 data_page_header_v2;
  bool has_dictionary_page_header = false;
  DictionaryPageHeader dictionary_page_header;
};

FileMetaData DecodeFileMetaData(const uint8_t* data, size_t size);
// Decodes the page header at the start of `data`; `*header_size` receives its length.
PageHeader DecodePageHeader(const uint8_t* data, size_t size, size_t* header_size);

std::string EncodeFileMetaData(const FileMetaData& metadata);
std::string EncodePageHeader(const PageHeader& header);

// Names for messages ("SNAPPY", "DELTA_BYTE_ARRAY", "INT64"); unknown values print the number.
std::string CodecName(Codec codec);
std::string EncodingName(Encoding encoding);
std::string PhysicalTypeName(PhysicalType type);

}  // namespace parquet
}  // namespace tzrec
