#include "tzrec/data/parquet/parquet_format.h"

#include "tzrec/common/error.h"
#include "tzrec/data/parquet/thrift_compact.h"

namespace tzrec {
namespace parquet {
namespace {

// Tracks which required fields of one struct were seen, so a truncated or corrupt header
// fails by name instead of leaving a zero that looks like real data.
class Required {
 public:
  explicit Required(const char* struct_name) : struct_name_(struct_name) {}
  void Saw(int16_t id) {
    if (id > 0 && id < 64) seen_ |= uint64_t{1} << id;
  }
  void Check(std::initializer_list<std::pair<int16_t, const char*>> fields) const {
    for (const auto& [id, name] : fields) {
      if (!(seen_ & (uint64_t{1} << id))) {
        Fail("corrupt Parquet metadata: ", struct_name_, " lacks required field ", name);
      }
    }
  }

 private:
  const char* struct_name_;
  uint64_t seen_ = 0;
};

template <typename Fn>
void ForEachField(ThriftCompactReader* in, Required* required, Fn&& on_field) {
  in->BeginStruct();
  int16_t id;
  uint8_t type;
  while (in->NextField(&id, &type)) {
    required->Saw(id);
    on_field(id, type);
  }
}

void DecodeLogicalType(ThriftCompactReader* in, SchemaElement* element) {
  Required required("LogicalType");
  ForEachField(in, &required, [&](int16_t id, uint8_t type) {
    if (type != kThriftStruct) {
      in->Skip(type);
      return;
    }
    element->logical_type = id;
    if (id != kLogicalInteger) {
      in->Skip(type);
      return;
    }
    Required int_required("IntType");
    ForEachField(in, &int_required, [&](int16_t int_id, uint8_t int_type) {
      if (int_id == 2) {
        element->logical_int_signed = in->ReadBool(int_type);
      } else {
        in->Skip(int_type);
      }
    });
  });
}

SchemaElement DecodeSchemaElement(ThriftCompactReader* in) {
  SchemaElement element;
  Required required("SchemaElement");
  ForEachField(in, &required, [&](int16_t id, uint8_t type) {
    switch (id) {
      case 1:
        element.has_type = true;
        element.type = static_cast<PhysicalType>(in->ReadI32(type));
        break;
      case 2: element.type_length = in->ReadI32(type); break;
      case 3:
        element.has_repetition = true;
        element.repetition = static_cast<Repetition>(in->ReadI32(type));
        break;
      case 4: element.name = in->ReadString(type); break;
      case 5: element.num_children = in->ReadI32(type); break;
      case 6: element.converted_type = in->ReadI32(type); break;
      case 10:
        if (type == kThriftStruct) {
          DecodeLogicalType(in, &element);
        } else {
          in->Skip(type);
        }
        break;
      default: in->Skip(type);
    }
  });
  required.Check({{4, "name"}});
  return element;
}

ColumnMetaData DecodeColumnMetaData(ThriftCompactReader* in) {
  ColumnMetaData meta;
  Required required("ColumnMetaData");
  ForEachField(in, &required, [&](int16_t id, uint8_t type) {
    switch (id) {
      case 1: meta.type = static_cast<PhysicalType>(in->ReadI32(type)); break;
      case 2: {
        uint8_t element_type;
        uint32_t count = in->ReadListHeader(type, &element_type);
        for (uint32_t i = 0; i < count; ++i)
          meta.encodings.push_back(in->ReadListI32(element_type));
        break;
      }
      case 3: {
        uint8_t element_type;
        uint32_t count = in->ReadListHeader(type, &element_type);
        for (uint32_t i = 0; i < count; ++i) {
          meta.path_in_schema.push_back(in->ReadListString(element_type));
        }
        break;
      }
      case 4: meta.codec = static_cast<Codec>(in->ReadI32(type)); break;
      case 5: meta.num_values = in->ReadI64(type); break;
      case 6: meta.total_uncompressed_size = in->ReadI64(type); break;
      case 7: meta.total_compressed_size = in->ReadI64(type); break;
      case 9: meta.data_page_offset = in->ReadI64(type); break;
      case 11:
        meta.has_dictionary_page_offset = true;
        meta.dictionary_page_offset = in->ReadI64(type);
        break;
      default: in->Skip(type);
    }
  });
  required.Check({{1, "type"},
                  {3, "path_in_schema"},
                  {4, "codec"},
                  {5, "num_values"},
                  {7, "total_compressed_size"},
                  {9, "data_page_offset"}});
  return meta;
}

ColumnChunk DecodeColumnChunk(ThriftCompactReader* in) {
  ColumnChunk chunk;
  Required required("ColumnChunk");
  ForEachField(in, &required, [&](int16_t id, uint8_t type) {
    switch (id) {
      case 1: chunk.file_path = in->ReadString(type); break;
      case 2: chunk.file_offset = in->ReadI64(type); break;
      case 3:
        in->Expect(type, kThriftStruct, "struct");
        chunk.has_meta_data = true;
        chunk.meta_data = DecodeColumnMetaData(in);
        break;
      case 8:
      case 9:
        chunk.encrypted = true;
        in->Skip(type);
        break;
      default: in->Skip(type);
    }
  });
  return chunk;
}

RowGroup DecodeRowGroup(ThriftCompactReader* in) {
  RowGroup group;
  Required required("RowGroup");
  ForEachField(in, &required, [&](int16_t id, uint8_t type) {
    switch (id) {
      case 1: {
        uint8_t element_type;
        uint32_t count = in->ReadListHeader(type, &element_type);
        in->Expect(element_type, kThriftStruct, "list<ColumnChunk>");
        for (uint32_t i = 0; i < count; ++i) group.columns.push_back(DecodeColumnChunk(in));
        break;
      }
      case 2: group.total_byte_size = in->ReadI64(type); break;
      case 3: group.num_rows = in->ReadI64(type); break;
      case 5: group.file_offset = in->ReadI64(type); break;
      case 6: group.total_compressed_size = in->ReadI64(type); break;
      default: in->Skip(type);
    }
  });
  required.Check({{1, "columns"}, {3, "num_rows"}});
  return group;
}

KeyValue DecodeKeyValue(ThriftCompactReader* in) {
  KeyValue entry;
  Required required("KeyValue");
  ForEachField(in, &required, [&](int16_t id, uint8_t type) {
    if (id == 1) {
      entry.key = in->ReadString(type);
    } else if (id == 2) {
      entry.value = in->ReadString(type);
    } else {
      in->Skip(type);
    }
  });
  required.Check({{1, "key"}});
  return entry;
}

template <typename T, typename DecodeFn>
void DecodeStructList(ThriftCompactReader* in, uint8_t type, const char* what, DecodeFn decode,
                      std::vector<T>* out) {
  uint8_t element_type;
  uint32_t count = in->ReadListHeader(type, &element_type);
  in->Expect(element_type, kThriftStruct, what);
  out->reserve(count);
  for (uint32_t i = 0; i < count; ++i) out->push_back(decode(in));
}

void EncodeColumnMetaData(const ColumnMetaData& meta, ThriftCompactWriter* out) {
  out->FieldI32(1, static_cast<int32_t>(meta.type));
  out->FieldListBegin(2, kThriftI32, meta.encodings.size());
  for (int32_t encoding : meta.encodings) out->ListI32(encoding);
  out->FieldListBegin(3, kThriftBinary, meta.path_in_schema.size());
  for (const auto& part : meta.path_in_schema) out->ListString(part);
  out->FieldI32(4, static_cast<int32_t>(meta.codec));
  out->FieldI64(5, meta.num_values);
  out->FieldI64(6, meta.total_uncompressed_size);
  out->FieldI64(7, meta.total_compressed_size);
  out->FieldI64(9, meta.data_page_offset);
  if (meta.has_dictionary_page_offset) out->FieldI64(11, meta.dictionary_page_offset);
}

void EncodeSchemaElement(const SchemaElement& element, ThriftCompactWriter* out) {
  out->BeginStruct();
  if (element.has_type) out->FieldI32(1, static_cast<int32_t>(element.type));
  if (element.has_repetition) out->FieldI32(3, static_cast<int32_t>(element.repetition));
  out->FieldString(4, element.name);
  if (!element.has_type) out->FieldI32(5, element.num_children);
  if (element.converted_type != kConvertedNone) out->FieldI32(6, element.converted_type);
  if (element.logical_type != kLogicalNone) {
    out->FieldStructBegin(10);
    out->FieldStructBegin(static_cast<int16_t>(element.logical_type));  // empty member struct
    out->EndStruct();
    out->EndStruct();
  }
  out->EndStruct();
}

}  // namespace

FileMetaData DecodeFileMetaData(const uint8_t* data, size_t size) {
  ThriftCompactReader in(data, size);
  FileMetaData metadata;
  Required required("FileMetaData");
  ForEachField(&in, &required, [&](int16_t id, uint8_t type) {
    switch (id) {
      case 1: metadata.version = in.ReadI32(type); break;
      case 2:
        DecodeStructList(&in, type, "list<SchemaElement>", DecodeSchemaElement, &metadata.schema);
        break;
      case 3: metadata.num_rows = in.ReadI64(type); break;
      case 4:
        DecodeStructList(&in, type, "list<RowGroup>", DecodeRowGroup, &metadata.row_groups);
        break;
      case 5:
        DecodeStructList(&in, type, "list<KeyValue>", DecodeKeyValue, &metadata.key_value_metadata);
        break;
      case 6: metadata.created_by = in.ReadString(type); break;
      case 8:
        metadata.encrypted = true;
        in.Skip(type);
        break;
      default: in.Skip(type);
    }
  });
  required.Check({{2, "schema"}, {3, "num_rows"}, {4, "row_groups"}});
  return metadata;
}

PageHeader DecodePageHeader(const uint8_t* data, size_t size, size_t* header_size) {
  ThriftCompactReader in(data, size);
  PageHeader header;
  Required required("PageHeader");
  ForEachField(&in, &required, [&](int16_t id, uint8_t type) {
    switch (id) {
      case 1: header.type = static_cast<PageType>(in.ReadI32(type)); break;
      case 2: header.uncompressed_page_size = in.ReadI32(type); break;
      case 3: header.compressed_page_size = in.ReadI32(type); break;
      case 4:
        header.has_crc = true;
        header.crc = static_cast<uint32_t>(in.ReadI32(type));
        break;
      case 5: {
        header.has_data_page_header = true;
        in.Expect(type, kThriftStruct, "DataPageHeader");
        DataPageHeader& page = header.data_page_header;
        Required page_required("DataPageHeader");
        ForEachField(&in, &page_required, [&](int16_t field, uint8_t field_type) {
          switch (field) {
            case 1: page.num_values = in.ReadI32(field_type); break;
            case 2: page.encoding = static_cast<Encoding>(in.ReadI32(field_type)); break;
            case 3:
              page.definition_level_encoding = static_cast<Encoding>(in.ReadI32(field_type));
              break;
            case 4:
              page.repetition_level_encoding = static_cast<Encoding>(in.ReadI32(field_type));
              break;
            default: in.Skip(field_type);
          }
        });
        page_required.Check({{1, "num_values"}, {2, "encoding"}});
        break;
      }
      case 7: {
        header.has_dictionary_page_header = true;
        in.Expect(type, kThriftStruct, "DictionaryPageHeader");
        DictionaryPageHeader& page = header.dictionary_page_header;
        Required page_required("DictionaryPageHeader");
        ForEachField(&in, &page_required, [&](int16_t field, uint8_t field_type) {
          switch (field) {
            case 1: page.num_values = in.ReadI32(field_type); break;
            case 2: page.encoding = static_cast<Encoding>(in.ReadI32(field_type)); break;
            default: in.Skip(field_type);
          }
        });
        page_required.Check({{1, "num_values"}, {2, "encoding"}});
        break;
      }
      case 8: {
        header.has_data_page_header_v2 = true;
        in.Expect(type, kThriftStruct, "DataPageHeaderV2");
        DataPageHeaderV2& page = header.data_page_header_v2;
        Required page_required("DataPageHeaderV2");
        ForEachField(&in, &page_required, [&](int16_t field, uint8_t field_type) {
          switch (field) {
            case 1: page.num_values = in.ReadI32(field_type); break;
            case 2: page.num_nulls = in.ReadI32(field_type); break;
            case 3: page.num_rows = in.ReadI32(field_type); break;
            case 4: page.encoding = static_cast<Encoding>(in.ReadI32(field_type)); break;
            case 5: page.definition_levels_byte_length = in.ReadI32(field_type); break;
            case 6: page.repetition_levels_byte_length = in.ReadI32(field_type); break;
            case 7: page.is_compressed = in.ReadBool(field_type); break;
            default: in.Skip(field_type);
          }
        });
        page_required.Check({{1, "num_values"},
                             {2, "num_nulls"},
                             {3, "num_rows"},
                             {4, "encoding"},
                             {5, "definition_levels_byte_length"},
                             {6, "repetition_levels_byte_length"}});
        break;
      }
      default: in.Skip(type);
    }
  });
  required.Check({{1, "type"}, {2, "uncompressed_page_size"}, {3, "compressed_page_size"}});
  *header_size = in.position();
  return header;
}

std::string EncodeFileMetaData(const FileMetaData& metadata) {
  ThriftCompactWriter out;
  out.BeginStruct();
  out.FieldI32(1, metadata.version);
  out.FieldListBegin(2, kThriftStruct, metadata.schema.size());
  for (const auto& element : metadata.schema) EncodeSchemaElement(element, &out);
  out.FieldI64(3, metadata.num_rows);
  out.FieldListBegin(4, kThriftStruct, metadata.row_groups.size());
  for (const auto& group : metadata.row_groups) {
    out.BeginStruct();
    out.FieldListBegin(1, kThriftStruct, group.columns.size());
    for (const auto& chunk : group.columns) {
      out.BeginStruct();
      out.FieldI64(2, chunk.file_offset);
      out.FieldStructBegin(3);
      EncodeColumnMetaData(chunk.meta_data, &out);
      out.EndStruct();
      out.EndStruct();
    }
    out.FieldI64(2, group.total_byte_size);
    out.FieldI64(3, group.num_rows);
    out.FieldI64(5, group.file_offset);
    out.FieldI64(6, group.total_compressed_size);
    out.EndStruct();
  }
  if (!metadata.key_value_metadata.empty()) {
    out.FieldListBegin(5, kThriftStruct, metadata.key_value_metadata.size());
    for (const auto& entry : metadata.key_value_metadata) {
      out.BeginStruct();
      out.FieldString(1, entry.key);
      out.FieldString(2, entry.value);
      out.EndStruct();
    }
  }
  if (!metadata.created_by.empty()) out.FieldString(6, metadata.created_by);
  out.EndStruct();
  return out.Release();
}

std::string EncodePageHeader(const PageHeader& header) {
  ThriftCompactWriter out;
  out.BeginStruct();
  out.FieldI32(1, static_cast<int32_t>(header.type));
  out.FieldI32(2, header.uncompressed_page_size);
  out.FieldI32(3, header.compressed_page_size);
  if (header.has_crc) out.FieldI32(4, static_cast<int32_t>(header.crc));
  if (header.has_data_page_header) {
    const DataPageHeader& page = header.data_page_header;
    out.FieldStructBegin(5);
    out.FieldI32(1, page.num_values);
    out.FieldI32(2, static_cast<int32_t>(page.encoding));
    out.FieldI32(3, static_cast<int32_t>(page.definition_level_encoding));
    out.FieldI32(4, static_cast<int32_t>(page.repetition_level_encoding));
    out.EndStruct();
  }
  if (header.has_dictionary_page_header) {
    out.FieldStructBegin(7);
    out.FieldI32(1, header.dictionary_page_header.num_values);
    out.FieldI32(2, static_cast<int32_t>(header.dictionary_page_header.encoding));
    out.EndStruct();
  }
  if (header.has_data_page_header_v2) {
    const DataPageHeaderV2& page = header.data_page_header_v2;
    out.FieldStructBegin(8);
    out.FieldI32(1, page.num_values);
    out.FieldI32(2, page.num_nulls);
    out.FieldI32(3, page.num_rows);
    out.FieldI32(4, static_cast<int32_t>(page.encoding));
    out.FieldI32(5, page.definition_levels_byte_length);
    out.FieldI32(6, page.repetition_levels_byte_length);
    out.FieldBool(7, page.is_compressed);
    out.EndStruct();
  }
  out.EndStruct();
  return out.Release();
}

std::string CodecName(Codec codec) {
  switch (codec) {
    case Codec::kUncompressed: return "UNCOMPRESSED";
    case Codec::kSnappy: return "SNAPPY";
    case Codec::kGzip: return "GZIP";
    case Codec::kLzo: return "LZO";
    case Codec::kBrotli: return "BROTLI";
    case Codec::kLz4Hadoop: return "LZ4 (Hadoop framing)";
    case Codec::kZstd: return "ZSTD";
    case Codec::kLz4Raw: return "LZ4_RAW";
  }
  return StrCat("codec #", static_cast<int32_t>(codec));
}

std::string EncodingName(Encoding encoding) {
  switch (encoding) {
    case Encoding::kPlain: return "PLAIN";
    case Encoding::kPlainDictionary: return "PLAIN_DICTIONARY";
    case Encoding::kRle: return "RLE";
    case Encoding::kBitPacked: return "BIT_PACKED";
    case Encoding::kDeltaBinaryPacked: return "DELTA_BINARY_PACKED";
    case Encoding::kDeltaLengthByteArray: return "DELTA_LENGTH_BYTE_ARRAY";
    case Encoding::kDeltaByteArray: return "DELTA_BYTE_ARRAY";
    case Encoding::kRleDictionary: return "RLE_DICTIONARY";
    case Encoding::kByteStreamSplit: return "BYTE_STREAM_SPLIT";
  }
  return StrCat("encoding #", static_cast<int32_t>(encoding));
}

std::string PhysicalTypeName(PhysicalType type) {
  switch (type) {
    case PhysicalType::kBoolean: return "BOOLEAN";
    case PhysicalType::kInt32: return "INT32";
    case PhysicalType::kInt64: return "INT64";
    case PhysicalType::kInt96: return "INT96";
    case PhysicalType::kFloat: return "FLOAT";
    case PhysicalType::kDouble: return "DOUBLE";
    case PhysicalType::kByteArray: return "BYTE_ARRAY";
    case PhysicalType::kFixedLenByteArray: return "FIXED_LEN_BYTE_ARRAY";
  }
  return StrCat("type #", static_cast<int32_t>(type));
}

}  // namespace parquet
}  // namespace tzrec
