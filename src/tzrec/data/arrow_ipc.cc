#include "tzrec/data/arrow_ipc.h"

#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"

namespace tzrec {
namespace {

// Arrow's format constants (Message.fbs / Schema.fbs of the Arrow columnar format spec).
enum MessageHeaderType : uint8_t { kSchemaMessage = 1, kDictionaryBatchMessage = 2, kRecordBatchMessage = 3 };
enum TypeId : uint8_t {
  kTypeNull = 1, kTypeInt = 2, kTypeFloatingPoint = 3, kTypeBinary = 4, kTypeUtf8 = 5,
  kTypeBool = 6, kTypeDecimal = 7, kTypeDate = 8, kTypeTime = 9, kTypeTimestamp = 10,
  kTypeInterval = 11, kTypeList = 12, kTypeStruct = 13, kTypeUnion = 14, kTypeFixedSizeBinary = 15,
  kTypeFixedSizeList = 16, kTypeMap = 17, kTypeDuration = 18, kTypeLargeBinary = 19,
  kTypeLargeUtf8 = 20, kTypeLargeList = 21,
};
constexpr int16_t kMetadataV4 = 3;
constexpr int kMaxNesting = 16;

constexpr flatbuffers::voffset_t Slot(int index) {
  return static_cast<flatbuffers::voffset_t>(4 + 2 * index);
}

// A verified view of one FlatBuffers table: every accessor bounds-checks what it reads.
class Meta {
 public:
  Meta(const flatbuffers::Table* table, flatbuffers::Verifier* verifier)
      : table_(table), verifier_(verifier) {
    if (table_ && (!table_->VerifyTableStart(*verifier_) || !verifier_->EndTable())) Corrupt();
  }
  static Meta Root(const uint8_t* data, flatbuffers::Verifier* verifier) {
    const flatbuffers::uoffset_t offset = verifier->VerifyOffset(0);
    if (offset == 0) Corrupt();
    return Meta(reinterpret_cast<const flatbuffers::Table*>(data + offset), verifier);
  }
  bool present() const { return table_ != nullptr; }
  template <typename T>
  T Scalar(int slot, T default_value) const {
    if (!table_->VerifyField<T>(*verifier_, Slot(slot), sizeof(T))) Corrupt();
    return table_->GetField<T>(Slot(slot), default_value);
  }
  Meta Table(int slot) const {
    if (!table_->VerifyOffset(*verifier_, Slot(slot))) Corrupt();
    return Meta(table_->GetPointer<const flatbuffers::Table*>(Slot(slot)), verifier_);
  }
  std::string String(int slot) const {
    if (!table_->VerifyOffset(*verifier_, Slot(slot))) Corrupt();
    const auto* text = table_->GetPointer<const flatbuffers::String*>(Slot(slot));
    if (!verifier_->VerifyString(text)) Corrupt();
    return text ? text->str() : std::string();
  }
  std::vector<Meta> Tables(int slot) const {
    if (!table_->VerifyOffset(*verifier_, Slot(slot))) Corrupt();
    const auto* vector =
        table_->GetPointer<const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::Table>>*>(Slot(slot));
    std::vector<Meta> out;
    if (!vector) return out;
    if (!verifier_->VerifyVector(vector)) Corrupt();
    // Each element's target is checked by Meta's constructor (VerifyTableStart), as
    // FlatBuffers' generated VerifyVectorOfTables does.
    for (flatbuffers::uoffset_t i = 0; i < vector->size(); ++i) out.emplace_back(vector->Get(i), verifier_);
    return out;
  }
  // A vector of 16-byte structs of two int64 (FieldNode, Buffer).
  std::vector<std::pair<int64_t, int64_t>> Pairs(int slot) const {
    if (!table_->VerifyOffset(*verifier_, Slot(slot))) Corrupt();
    const uint8_t* vector = table_->GetPointer<const uint8_t*>(Slot(slot));
    std::vector<std::pair<int64_t, int64_t>> out;
    if (!vector) return out;
    if (!verifier_->VerifyVectorOrString(vector, 16)) Corrupt();
    const uint32_t n = flatbuffers::ReadScalar<flatbuffers::uoffset_t>(vector);
    out.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
      std::memcpy(&out[i].first, vector + 4 + 16 * i, 8);
      std::memcpy(&out[i].second, vector + 4 + 16 * i + 8, 8);
    }
    return out;
  }
  [[noreturn]] static void Corrupt() { Fail("corrupt Arrow IPC message metadata"); }

 private:
  const flatbuffers::Table* table_;
  flatbuffers::Verifier* verifier_;
};

const char* OtherTypeName(int type_id) {
  switch (type_id) {
    case kTypeDecimal: return "decimal";
    case kTypeDate: return "date";
    case kTypeTime: return "time";
    case kTypeTimestamp: return "timestamp";
    case kTypeInterval: return "interval";
    case kTypeUnion: return "union";
    case kTypeFixedSizeBinary: return "fixed_size_binary";
    case kTypeFixedSizeList: return "fixed_size_list";
    case kTypeDuration: return "duration";
    case 22: return "run_end_encoded";
    case 23: return "binary_view";
    case 24: return "string_view";
    case 25: return "list_view";
    case 26: return "large_list_view";
    default: return "unknown";
  }
}

ArrowField ParseField(const Meta& field, int depth) {
  if (depth > kMaxNesting) Fail("Arrow schema nests deeper than ", kMaxNesting, " levels");
  ArrowField out;
  out.name = field.String(0);
  out.type_id = field.Scalar<uint8_t>(2, 0);
  const Meta type = field.Table(3);
  const bool dictionary = field.Table(4).present();
  for (const Meta& child : field.Tables(5)) out.children.push_back(ParseField(child, depth + 1));
  using Kind = ArrowField::Kind;
  switch (out.type_id) {
    case kTypeNull: out.kind = Kind::kNull; out.buffers = 0; break;
    case kTypeInt:
      if (!type.present()) Meta::Corrupt();
      out.kind = Kind::kInt;
      out.bit_width = type.Scalar<int32_t>(0, 0);
      out.is_signed = type.Scalar<uint8_t>(1, 0) != 0;
      if (out.bit_width != 8 && out.bit_width != 16 && out.bit_width != 32 && out.bit_width != 64) {
        Fail("Arrow field '", out.name, "': integer bit width ", out.bit_width);
      }
      out.buffers = 2;
      break;
    case kTypeFloatingPoint: {
      const int16_t precision = type.present() ? type.Scalar<int16_t>(0, 0) : 0;
      if (precision < 0 || precision > 2) Fail("Arrow field '", out.name, "': float precision ", precision);
      out.kind = Kind::kFloat;
      out.bit_width = 16 << precision;
      out.buffers = 2;
      break;
    }
    case kTypeBool: out.kind = Kind::kBool; out.buffers = 2; break;
    case kTypeUtf8: case kTypeLargeUtf8:
      out.kind = Kind::kUtf8; out.large = out.type_id == kTypeLargeUtf8; out.buffers = 3; break;
    case kTypeBinary: case kTypeLargeBinary:
      out.kind = Kind::kBinary; out.large = out.type_id == kTypeLargeBinary; out.buffers = 3; break;
    case kTypeList: case kTypeLargeList:
      out.kind = Kind::kList; out.large = out.type_id == kTypeLargeList; out.buffers = 2; break;
    case kTypeMap: out.kind = Kind::kMap; out.buffers = 2; break;
    case kTypeStruct: out.kind = Kind::kStruct; out.buffers = 1; break;
    case kTypeDecimal: case kTypeDate: case kTypeTime: case kTypeTimestamp: case kTypeInterval:
    case kTypeDuration: case kTypeFixedSizeBinary:
      out.kind = Kind::kOther; out.buffers = 2; break;
    case kTypeFixedSizeList: out.kind = Kind::kOther; out.buffers = 1; break;
    default: out.kind = Kind::kOther; out.buffers = -1; break;  // layout not skippable here
  }
  const size_t want_children = out.kind == Kind::kList || out.kind == Kind::kMap ? 1 : out.children.size();
  if (out.children.size() != want_children) {
    Fail("Arrow field '", out.name, "' (", out.TypeName(), ") has ", out.children.size(), " children");
  }
  if (out.kind == Kind::kMap && (out.children[0].kind != Kind::kStruct || out.children[0].children.size() != 2)) {
    Fail("Arrow field '", out.name, "': a map's entries must be a struct of key and value");
  }
  if (dictionary) {
    // The record batch holds the (integer) indices; the values live in dictionary batches.
    out.kind = Kind::kOther;
    out.type_id = -1;
    out.buffers = 2;
    out.children.clear();
  }
  return out;
}

ArrowSchema ParseSchema(const Meta& schema) {
  if (schema.Scalar<int16_t>(0, 0) != 0) Fail("big-endian Arrow data is not supported");
  ArrowSchema out;
  for (const Meta& field : schema.Tables(1)) out.push_back(ParseField(field, 0));
  return out;
}

// Walks a record batch's field nodes and body buffers in schema order.
class BodyReader {
 public:
  BodyReader(const uint8_t* body, int64_t body_size, std::vector<std::pair<int64_t, int64_t>> nodes,
             std::vector<std::pair<int64_t, int64_t>> buffers)
      : body_(body), body_size_(body_size), nodes_(std::move(nodes)), buffers_(std::move(buffers)) {}

  struct Node {
    int64_t length;
    int64_t null_count;
  };
  Node NextNode() {
    if (node_ >= nodes_.size()) Fail("record batch has fewer field nodes than its schema needs");
    const auto [length, null_count] = nodes_[node_++];
    // Any array of n values has a buffer of at least n / 8 bytes (its own or a child's), so a
    // longer node is corrupt; checked before anything of its length is allocated.
    if (length < 0 || null_count < 0 || null_count > length || length > std::numeric_limits<uint32_t>::max() ||
        length > 8 * body_size_ + 8) {
      Fail("record batch field node has length ", length, " and null count ", null_count, " in a ", body_size_,
           "-byte body");
    }
    return {length, null_count};
  }
  // The next buffer's bytes; empty for an absent buffer.
  std::string_view NextBuffer() {
    if (buffer_ >= buffers_.size()) Fail("record batch has fewer buffers than its schema needs");
    const auto [offset, length] = buffers_[buffer_++];
    if (offset < 0 || length < 0 || offset > body_size_ || length > body_size_ - offset) {
      Fail("record batch buffer [", offset, ", +", length, ") lies outside the ", body_size_, "-byte body");
    }
    return std::string_view(reinterpret_cast<const char*>(body_ + offset), static_cast<size_t>(length));
  }
  void SkipField(const ArrowField& field) {
    if (field.buffers < 0) {
      Fail("cannot skip column '", field.name, "' of type ", field.TypeName(),
           " (its layout is not supported); select fewer columns or change the producer");
    }
    NextNode();
    if (buffer_ + static_cast<size_t>(field.buffers) > buffers_.size()) {
      Fail("record batch has fewer buffers than its schema needs");
    }
    buffer_ += static_cast<size_t>(field.buffers);
    for (const ArrowField& child : field.children) SkipField(child);
  }

 private:
  const uint8_t* body_;
  int64_t body_size_;
  std::vector<std::pair<int64_t, int64_t>> nodes_;
  std::vector<std::pair<int64_t, int64_t>> buffers_;
  size_t node_ = 0;
  size_t buffer_ = 0;
};

void ReadValidity(std::string_view bitmap, const BodyReader::Node& node, std::vector<uint8_t>* valid) {
  const size_t n = static_cast<size_t>(node.length);
  valid->assign(n, 1);
  if (bitmap.empty()) {
    if (node.null_count != 0) Fail("field node has ", node.null_count, " nulls but no validity bitmap");
    return;
  }
  if (bitmap.size() < (n + 7) / 8) Fail("validity bitmap of ", bitmap.size(), " bytes for ", n, " values");
  for (size_t i = 0; i < n; ++i) (*valid)[i] = (static_cast<uint8_t>(bitmap[i / 8]) >> (i % 8)) & 1;
}

template <typename T>
T Load(std::string_view bytes, size_t index) {
  T value;
  std::memcpy(&value, bytes.data() + index * sizeof(T), sizeof(T));
  return value;
}

// Offsets of `n` lists or strings (n + 1 entries, non-decreasing, within [0, limit]).
std::vector<int64_t> ReadOffsets(std::string_view bytes, size_t n, bool large, int64_t limit,
                                 const std::string& name) {
  const size_t width = large ? 8 : 4;
  if (bytes.size() < (n + 1) * width) {
    if (n == 0 && bytes.empty()) return {0};
    Fail("column '", name, "': offsets buffer of ", bytes.size(), " bytes for ", n, " values");
  }
  std::vector<int64_t> offsets(n + 1);
  for (size_t i = 0; i <= n; ++i) offsets[i] = large ? Load<int64_t>(bytes, i) : Load<int32_t>(bytes, i);
  for (size_t i = 0; i <= n; ++i) {
    if (offsets[i] < 0 || offsets[i] > limit || (i > 0 && offsets[i] < offsets[i - 1])) {
      Fail("column '", name, "': offset ", offsets[i], " at ", i, " is out of order or past ", limit);
    }
  }
  return offsets;
}

// Decodes a primitive (non-nested) array into `out` (its values, nulls in out->valid).
void DecodePrimitive(const ArrowField& field, BodyReader* body, Column* out) {
  using Kind = ArrowField::Kind;
  const BodyReader::Node node = body->NextNode();
  const size_t n = static_cast<size_t>(node.length);
  out->name = field.name;
  ReadValidity(body->NextBuffer(), node, &out->valid);
  if (field.kind == Kind::kUtf8 || field.kind == Kind::kBinary) {
    const std::string_view offsets_bytes = body->NextBuffer();
    const std::string_view data = body->NextBuffer();
    const std::vector<int64_t> offsets =
        ReadOffsets(offsets_bytes, n, field.large, static_cast<int64_t>(data.size()), field.name);
    if (offsets[n] - offsets[0] > std::numeric_limits<uint32_t>::max()) {
      Fail("column '", field.name, "': more than 4 GiB of text in one message");
    }
    out->type = ColumnType::kString;
    out->chars.assign(data.substr(static_cast<size_t>(offsets[0]), static_cast<size_t>(offsets[n] - offsets[0])));
    out->offsets.resize(n + 1);
    for (size_t i = 0; i <= n; ++i) out->offsets[i] = static_cast<uint32_t>(offsets[i] - offsets[0]);
    return;
  }
  const std::string_view values = body->NextBuffer();
  if (field.kind == Kind::kBool) {
    if (values.size() < (n + 7) / 8) Fail("column '", field.name, "': bool buffer too short");
    out->type = ColumnType::kInt64;
    out->ints.resize(n);
    for (size_t i = 0; i < n; ++i) out->ints[i] = (static_cast<uint8_t>(values[i / 8]) >> (i % 8)) & 1;
    return;
  }
  const size_t width = static_cast<size_t>(field.bit_width / 8);
  if (values.size() < n * width) {
    Fail("column '", field.name, "': values buffer of ", values.size(), " bytes for ", n, " ", field.TypeName());
  }
  if (field.kind == Kind::kFloat) {
    if (field.bit_width == 16) Fail("column '", field.name, "': halffloat is not supported");
    out->type = ColumnType::kDouble;
    out->doubles.resize(n);
    for (size_t i = 0; i < n; ++i) {
      out->doubles[i] = field.bit_width == 32 ? Load<float>(values, i) : Load<double>(values, i);
    }
    return;
  }
  out->type = ColumnType::kInt64;
  out->ints.resize(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t v = 0;
    // (Separate branches: `signed ? int32 : uint32` would convert both to uint32.)
    switch (field.bit_width) {
      case 8: v = field.is_signed ? int64_t{Load<int8_t>(values, i)} : int64_t{Load<uint8_t>(values, i)}; break;
      case 16: v = field.is_signed ? int64_t{Load<int16_t>(values, i)} : int64_t{Load<uint16_t>(values, i)}; break;
      case 32: v = field.is_signed ? int64_t{Load<int32_t>(values, i)} : int64_t{Load<uint32_t>(values, i)}; break;
      default: {
        const uint64_t raw = Load<uint64_t>(values, i);
        if (!field.is_signed && raw > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
            out->valid[i]) {
          Fail("column '", field.name, "': uint64 value ", raw, " does not fit int64");
        }
        v = static_cast<int64_t>(raw);
      }
    }
    out->ints[i] = v;
  }
}

bool IsPrimitive(const ArrowField& field) {
  using Kind = ArrowField::Kind;
  return field.kind == Kind::kInt || field.kind == Kind::kFloat || field.kind == Kind::kBool ||
         field.kind == Kind::kUtf8 || field.kind == Kind::kBinary;
}

// One list level (and, recursively, its children) of `top`.
void DecodeList(const ArrowField& field, const std::string& top, BodyReader* body, ParquetColumn* out) {
  using Kind = ArrowField::Kind;
  const BodyReader::Node node = body->NextNode();
  const size_t n = static_cast<size_t>(node.length);
  ParquetListLevel& level = out->lists.emplace_back();
  ReadValidity(body->NextBuffer(), node, &level.valid);
  const std::string_view offsets_bytes = body->NextBuffer();
  const size_t level_index = out->lists.size() - 1;
  const ArrowField& child = field.children[0];
  size_t child_length = 0;
  if (field.kind == Kind::kMap) {
    const ArrowField& key = child.children[0];
    const ArrowField& value = child.children[1];
    if (!IsPrimitive(key) || !IsPrimitive(value)) {
      Fail("column '", top, "' of type ", field.TypeName(), ": map keys and values must be primitive");
    }
    const BodyReader::Node entries = body->NextNode();
    std::vector<uint8_t> entry_valid;
    ReadValidity(body->NextBuffer(), entries, &entry_valid);
    DecodePrimitive(key, body, &out->keys);
    DecodePrimitive(value, body, &out->values);
    if (out->keys.size() != static_cast<size_t>(entries.length) ||
        out->values.size() != static_cast<size_t>(entries.length)) {
      Fail("column '", top, "': map keys, values and entries differ in length");
    }
    child_length = static_cast<size_t>(entries.length);
    out->is_map = true;
  } else if (child.kind == Kind::kList) {
    DecodeList(child, top, body, out);
    child_length = out->lists[level_index + 1].size();
  } else if (IsPrimitive(child)) {
    DecodePrimitive(child, body, &out->values);
    child_length = out->values.size();
  } else {
    Fail("column '", top, "' of type ", field.TypeName(), " is not supported (lists of ",
         child.TypeName(), ")");
  }
  const std::vector<int64_t> offsets =
      ReadOffsets(offsets_bytes, n, field.large, static_cast<int64_t>(child_length), top);
  ParquetListLevel& filled = out->lists[level_index];
  filled.offsets.resize(n + 1);
  for (size_t i = 0; i <= n; ++i) filled.offsets[i] = static_cast<uint32_t>(offsets[i]);
}

ParquetColumn DecodeColumn(const ArrowField& field, BodyReader* body) {
  using Kind = ArrowField::Kind;
  ParquetColumn column;
  column.name = field.name;
  if (IsPrimitive(field)) {
    DecodePrimitive(field, body, &column.values);
  } else if (field.kind == Kind::kList || field.kind == Kind::kMap) {
    DecodeList(field, field.name, body, &column);
  } else {
    Fail("column '", field.name, "' of type ", field.TypeName(),
         " is not supported (int, float, double, string, bool, lists of them, list<list<>> and "
         "maps of them are)");
  }
  column.values.name = field.name;
  return column;
}

ArrowRecordBatch DecodeRecordBatch(const Meta& batch, const uint8_t* body, int64_t body_size,
                                   const ArrowSchema& schema, const std::vector<std::string>& wanted) {
  if (batch.Table(3).present()) {
    Fail("compressed Arrow IPC bodies (LZ4_FRAME / ZSTD) are not supported yet; produce uncompressed messages");
  }
  ArrowRecordBatch out;
  out.num_rows = batch.Scalar<int64_t>(0, 0);
  if (out.num_rows < 0 || out.num_rows > std::numeric_limits<uint32_t>::max()) {
    Fail("record batch claims ", out.num_rows, " rows");
  }
  BodyReader reader(body, body_size, batch.Pairs(1), batch.Pairs(2));
  std::map<std::string, ParquetColumn> decoded;
  for (const ArrowField& field : schema) {
    if (std::find(wanted.begin(), wanted.end(), field.name) == wanted.end() || decoded.count(field.name)) {
      reader.SkipField(field);
      continue;
    }
    ParquetColumn column = DecodeColumn(field, &reader);
    if (column.num_rows() != static_cast<size_t>(out.num_rows)) {
      Fail("column '", field.name, "' has ", column.num_rows(), " rows in a batch of ", out.num_rows);
    }
    decoded.emplace(field.name, std::move(column));
  }
  for (const std::string& name : wanted) {
    auto it = decoded.find(name);
    if (it == decoded.end()) {
      std::vector<std::string> names;
      for (const ArrowField& field : schema) names.push_back(field.name);
      Fail("column '", name, "' is missing (the message has columns ", Join(names, ", "), ")");
    }
    out.columns.push_back(std::move(it->second));
  }
  return out;
}

}  // namespace

std::string ArrowField::TypeName() const {
  switch (kind) {
    case Kind::kNull: return "null";
    case Kind::kInt: return StrCat(is_signed ? "int" : "uint", bit_width);
    case Kind::kFloat: return bit_width == 16 ? "halffloat" : bit_width == 32 ? "float" : "double";
    case Kind::kBool: return "bool";
    case Kind::kUtf8: return large ? "large_string" : "string";
    case Kind::kBinary: return large ? "large_binary" : "binary";
    // (Malformed nesting is named too: errors about it print the type.)
    case Kind::kList:
      return StrCat(large ? "large_list<" : "list<", children.empty() ? "?" : children[0].TypeName(), ">");
    case Kind::kMap:
      if (children.empty() || children[0].children.size() != 2) return "map<?>";
      return StrCat("map<", children[0].children[0].TypeName(), ", ", children[0].children[1].TypeName(), ">");
    case Kind::kStruct: {
      std::string text = "struct<";
      for (size_t i = 0; i < children.size(); ++i) {
        text += StrCat(i ? ", " : "", children[i].name, ": ", children[i].TypeName());
      }
      return text + ">";
    }
    case Kind::kOther: return type_id < 0 ? "dictionary" : OtherTypeName(type_id);
  }
  return "unknown";
}

ArrowField ArrowFieldOfType(const std::string& name, const std::string& type_name, const std::string& where) {
  std::string t = type_name;
  std::transform(t.begin(), t.end(), t.begin(), ::toupper);
  auto primitive = [&](std::string p) -> ArrowField {
    ArrowField f;
    f.name = "item";
    if (p == "INT") p = "INT32";
    if (p == "BIGINT") p = "INT64";
    if (p == "INT32" || p == "INT64") {
      f.kind = ArrowField::Kind::kInt;
      f.bit_width = p == "INT32" ? 32 : 64;
      f.buffers = 2;
    } else if (p == "FLOAT" || p == "DOUBLE") {
      f.kind = ArrowField::Kind::kFloat;
      f.bit_width = p == "FLOAT" ? 32 : 64;
      f.buffers = 2;
    } else if (p == "STRING") {
      f.kind = ArrowField::Kind::kUtf8;
      f.buffers = 3;
    } else {
      Fail(where, ": input field '", name, "' has type ", type_name,
           ", which KafkaDataset does not read (INT32, INT64, FLOAT, DOUBLE, STRING, ARRAY_<type>, "
           "ARRAY_ARRAY_<type>, MAP_<key>_<value>)");
    }
    return f;
  };
  auto list_of = [](ArrowField item) {
    ArrowField f;
    f.kind = ArrowField::Kind::kList;
    f.buffers = 2;
    f.children.push_back(std::move(item));
    return f;
  };
  ArrowField out;
  if (t.rfind("ARRAY_ARRAY_", 0) == 0) {
    out = list_of(list_of(primitive(t.substr(12))));
  } else if (t.rfind("ARRAY_", 0) == 0) {
    out = list_of(primitive(t.substr(6)));
  } else if (t.rfind("MAP_", 0) == 0) {
    const std::string rest = t.substr(4);
    const size_t split = rest.find('_');
    if (split == std::string::npos) primitive("?");
    ArrowField key = primitive(rest.substr(0, split));
    ArrowField value = primitive(rest.substr(split + 1));
    if (key.kind == ArrowField::Kind::kFloat) primitive("?");
    key.name = "key";
    value.name = "value";
    ArrowField entries;
    entries.name = "entries";
    entries.kind = ArrowField::Kind::kStruct;
    entries.buffers = 1;
    entries.children = {std::move(key), std::move(value)};
    out.kind = ArrowField::Kind::kMap;
    out.buffers = 2;
    out.children.push_back(std::move(entries));
  } else {
    out = primitive(t);
  }
  out.name = name;
  return out;
}

ArrowPayload DecodeArrowIpc(const uint8_t* data, size_t size, const ArrowSchema* fallback,
                            const std::vector<std::string>& wanted) {
  ArrowPayload payload;
  if (fallback) payload.schema = *fallback;
  bool have_schema = fallback != nullptr;
  size_t pos = 0;
  std::vector<uint64_t> metadata;  // 8-aligned copy of each message's FlatBuffer
  while (pos < size) {
    if (size - pos < 4) Fail("truncated Arrow IPC message at byte ", pos);
    int32_t length;
    std::memcpy(&length, data + pos, 4);
    pos += 4;
    if (length == -1) {  // continuation marker, then the length
      if (size - pos < 4) Fail("truncated Arrow IPC message at byte ", pos);
      std::memcpy(&length, data + pos, 4);
      pos += 4;
    }
    if (length == 0) break;  // end of stream
    if (length < 0 || static_cast<size_t>(length) > size - pos) {
      Fail("Arrow IPC message at byte ", pos, " claims ", length, " bytes of metadata; ", size - pos, " remain");
    }
    metadata.assign((static_cast<size_t>(length) + 7) / 8, 0);
    std::memcpy(metadata.data(), data + pos, static_cast<size_t>(length));
    pos += static_cast<size_t>(length);
    const auto* meta_bytes = reinterpret_cast<const uint8_t*>(metadata.data());
    flatbuffers::Verifier verifier(meta_bytes, static_cast<size_t>(length));
    const Meta message = Meta::Root(meta_bytes, &verifier);
    const int16_t version = message.Scalar<int16_t>(0, 0);
    if (version < kMetadataV4) Fail("Arrow IPC metadata version ", version, " is older than V4");
    const uint8_t header_type = message.Scalar<uint8_t>(1, 0);
    const Meta header = message.Table(2);
    const int64_t body_length = message.Scalar<int64_t>(3, 0);
    if (!header.present()) Meta::Corrupt();
    if (body_length < 0 || static_cast<uint64_t>(body_length) > size - pos) {
      Fail("Arrow IPC message body of ", body_length, " bytes runs past the payload (", size - pos, " remain)");
    }
    const uint8_t* body = data + pos;
    pos += static_cast<size_t>(body_length);
    switch (header_type) {
      case kSchemaMessage:
        if (payload.has_schema) Fail("Arrow IPC stream has two schema messages");
        payload.schema = ParseSchema(header);
        payload.has_schema = true;
        have_schema = true;
        break;
      case kRecordBatchMessage:
        if (!have_schema) {
          Fail("the message is a record batch without a schema: set data_config.input_fields "
               "(or input_fields_str), or produce Arrow IPC streams");
        }
        payload.batches.push_back(DecodeRecordBatch(header, body, body_length, payload.schema, wanted));
        break;
      case kDictionaryBatchMessage:
        Fail("dictionary-encoded Arrow columns are not supported; produce plain columns");
      default: Fail("unexpected Arrow IPC message type ", static_cast<int>(header_type));
    }
  }
  return payload;
}

}  // namespace tzrec
