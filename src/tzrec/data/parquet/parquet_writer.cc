#include "tzrec/data/parquet/parquet_writer.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <string_view>
#include <unordered_map>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/data/parquet/parquet_codec.h"
#include "tzrec/data/parquet/parquet_encoding.h"
#include "tzrec/data/parquet/parquet_format.h"

namespace tzrec {

namespace parquet {

// Levels and dense values of one leaf column for the row group being built.
struct LeafBuffer {
  std::vector<std::string> path;
  ParquetType type = ParquetType::kInt64;
  int max_def = 0;
  int max_rep = 0;
  size_t num_levels = 0;
  std::vector<uint8_t> rep;  // only when max_rep > 0
  std::vector<uint8_t> def;  // only when max_def > 0
  ValueBuffer values;

  void Levels(int r, int d) {
    if (max_rep > 0) rep.push_back(static_cast<uint8_t>(r));
    if (max_def > 0) def.push_back(static_cast<uint8_t>(d));
    ++num_levels;
  }
  void Value(const Column& column, size_t index) {
    switch (column.type) {
      case ColumnType::kInt64: values.ints.push_back(column.ints[index]); break;
      case ColumnType::kDouble: values.doubles.push_back(column.doubles[index]); break;
      case ColumnType::kString: values.AppendString(column.StringAt(index)); break;
    }
  }
  void Clear() {
    num_levels = 0;
    rep.clear();
    def.clear();
    values.Clear();
  }
};

}  // namespace parquet

namespace {

using parquet::Codec;
using parquet::Encoding;
using parquet::PhysicalType;
using parquet::Repetition;
using parquet::SchemaElement;

PhysicalType PhysicalTypeFor(ParquetType type) {
  switch (type) {
    case ParquetType::kBoolean: return PhysicalType::kBoolean;
    case ParquetType::kInt32: return PhysicalType::kInt32;
    case ParquetType::kInt64: return PhysicalType::kInt64;
    case ParquetType::kFloat: return PhysicalType::kFloat;
    case ParquetType::kDouble: return PhysicalType::kDouble;
    case ParquetType::kString: return PhysicalType::kByteArray;
  }
  return PhysicalType::kInt64;
}

Codec CodecFor(ParquetCodec codec) {
  switch (codec) {
    case ParquetCodec::kUncompressed: return Codec::kUncompressed;
    case ParquetCodec::kSnappy: return Codec::kSnappy;
    case ParquetCodec::kGzip: return Codec::kGzip;
    case ParquetCodec::kZstd: return Codec::kZstd;
    case ParquetCodec::kLz4Raw: return Codec::kLz4Raw;
  }
  return Codec::kUncompressed;
}

SchemaElement Group(const std::string& name, Repetition repetition, int children, int32_t converted,
                    int32_t logical) {
  SchemaElement e;
  e.name = name;
  e.has_repetition = true;
  e.repetition = repetition;
  e.num_children = children;
  e.converted_type = converted;
  e.logical_type = logical;
  return e;
}

SchemaElement Leaf(const std::string& name, ParquetType type, Repetition repetition) {
  SchemaElement e;
  e.name = name;
  e.has_type = true;
  e.type = PhysicalTypeFor(type);
  e.has_repetition = true;
  e.repetition = repetition;
  if (type == ParquetType::kString) {
    e.converted_type = parquet::kConvertedUtf8;
    e.logical_type = parquet::kLogicalString;
  }
  return e;
}

Repetition RepetitionFor(bool nullable) {
  return nullable ? Repetition::kOptional : Repetition::kRequired;
}

void AppendU32(uint32_t value, std::string* out) {
  char bytes[4];
  std::memcpy(bytes, &value, 4);
  out->append(bytes, 4);
}

template <typename T>
void AppendRaw(T value, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out->append(bytes, sizeof(T));
}

const char* ColumnTypeName(ColumnType type) {
  switch (type) {
    case ColumnType::kString: return "string";
    case ColumnType::kInt64: return "int64";
    case ColumnType::kDouble: return "double";
  }
  return "?";
}

// Fails unless `column` is internally consistent and of `expected` type, so shredding never
// indexes past its vectors.
void CheckColumn(const Column& column, ColumnType expected, const std::string& what) {
  if (column.type != expected) {
    Fail(what, " has type ", ColumnTypeName(column.type), ", the schema needs ",
         ColumnTypeName(expected));
  }
  size_t n = column.valid.size();
  bool ok = true;
  switch (column.type) {
    case ColumnType::kInt64: ok = column.ints.size() == n; break;
    case ColumnType::kDouble: ok = column.doubles.size() == n; break;
    case ColumnType::kString:
      ok = column.offsets.size() == n + 1 && column.offsets[0] == 0 &&
           column.offsets[n] == column.chars.size() &&
           std::is_sorted(column.offsets.begin(), column.offsets.end());
      break;
  }
  if (!ok) Fail(what, " is malformed (value and validity arrays disagree)");
}

// Dictionary-encodes `values` (strings) unless the distinct values exceed `max_bytes` in
// PLAIN form; returns whether it did.
bool BuildDictionary(const parquet::ValueBuffer& values, size_t max_bytes,
                     parquet::ValueBuffer* dictionary, std::vector<uint32_t>* indices) {
  if (values.size() == 0) return false;
  dictionary->type = ColumnType::kString;
  std::unordered_map<std::string_view, uint32_t> index_of;
  size_t dictionary_bytes = 0;
  indices->reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    std::string_view value = values.StringAt(i);
    auto [it, inserted] = index_of.try_emplace(value, static_cast<uint32_t>(index_of.size()));
    if (inserted) {
      dictionary_bytes += 4 + value.size();
      if (dictionary_bytes > max_bytes) return false;
      dictionary->AppendString(value);
    }
    indices->push_back(it->second);
  }
  return true;
}

// Bytes value `index` takes in PLAIN encoding (booleans rounded up to one).
size_t PlainSize(ParquetType type, const parquet::ValueBuffer& values, size_t index) {
  switch (type) {
    case ParquetType::kBoolean: return 1;
    case ParquetType::kInt32:
    case ParquetType::kFloat: return 4;
    case ParquetType::kString: return 4 + values.offsets[index + 1] - values.offsets[index];
    default: return 8;
  }
}

void AppendPlainValues(ParquetType type, const parquet::ValueBuffer& values, size_t first,
                       size_t last, std::string* out) {
  switch (type) {
    case ParquetType::kBoolean:
      parquet::EncodePlainBooleans(
          std::vector<int64_t>(values.ints.begin() + first, values.ints.begin() + last), out);
      break;
    case ParquetType::kInt32:
      for (size_t i = first; i < last; ++i) AppendRaw(static_cast<int32_t>(values.ints[i]), out);
      break;
    case ParquetType::kInt64:
      for (size_t i = first; i < last; ++i) AppendRaw(values.ints[i], out);
      break;
    case ParquetType::kFloat:
      for (size_t i = first; i < last; ++i) AppendRaw(static_cast<float>(values.doubles[i]), out);
      break;
    case ParquetType::kDouble:
      for (size_t i = first; i < last; ++i) AppendRaw(values.doubles[i], out);
      break;
    case ParquetType::kString:
      for (size_t i = first; i < last; ++i) {
        std::string_view text = values.StringAt(i);
        AppendU32(static_cast<uint32_t>(text.size()), out);
        out->append(text.data(), text.size());
      }
      break;
  }
}

// Levels [first, first + count) as a data page v1 section: 4-byte length, then RLE runs.
void AppendLevels(const std::vector<uint8_t>& levels, int max_level, size_t first, size_t count,
                  std::string* out) {
  if (max_level == 0) return;
  size_t length_at = out->size();
  AppendU32(0, out);
  parquet::EncodeRleBitPacked(levels.data() + first, count, parquet::BitWidthFor(max_level), out);
  uint32_t length = static_cast<uint32_t>(out->size() - length_at - 4);
  std::memcpy(out->data() + length_at, &length, 4);
}

}  // namespace

ColumnType ColumnTypeFor(ParquetType type) {
  switch (type) {
    case ParquetType::kFloat:
    case ParquetType::kDouble: return ColumnType::kDouble;
    case ParquetType::kString: return ColumnType::kString;
    default: return ColumnType::kInt64;
  }
}

ParquetFieldSpec ParquetFieldSpec::Plain(std::string name, ParquetType type, bool nullable) {
  ParquetFieldSpec spec;
  spec.name = std::move(name);
  spec.type = type;
  spec.nullable = nullable;
  return spec;
}

ParquetFieldSpec ParquetFieldSpec::List(std::string name, ParquetType item_type, int depth) {
  ParquetFieldSpec spec = Plain(std::move(name), item_type);
  spec.list_depth = depth;
  return spec;
}

ParquetFieldSpec ParquetFieldSpec::Map(std::string name, ParquetType key_type,
                                       ParquetType value_type) {
  ParquetFieldSpec spec = Plain(std::move(name), value_type);
  spec.is_map = true;
  spec.key_type = key_type;
  return spec;
}

ParquetFileWriter::ParquetFileWriter(std::string path, std::vector<ParquetFieldSpec> fields,
                                     ParquetWriteOptions options)
    : path_(std::move(path)),
      fields_(std::move(fields)),
      options_(std::move(options)),
      metadata_(std::make_unique<parquet::FileMetaData>()) {
  if (options_.row_group_rows <= 0) Fail(path_, ": row_group_rows must be positive");
  metadata_->version = 2;
  metadata_->created_by = options_.created_by;
  for (const auto& [key, value] : options_.key_value_metadata) {
    metadata_->key_value_metadata.push_back({key, value});
  }
  std::vector<SchemaElement>& schema = metadata_->schema;
  SchemaElement root;
  root.name = "schema";
  root.num_children = static_cast<int32_t>(fields_.size());
  schema.push_back(root);
  for (const ParquetFieldSpec& spec : fields_) {
    if (spec.name.empty()) Fail(path_, ": a Parquet field needs a name");
    for (const auto& other : fields_) {
      if (&other != &spec && other.name == spec.name)
        Fail(path_, ": field '", spec.name, "' declared twice");
    }
    if (spec.list_depth < 0 || spec.list_depth > 2 || (spec.is_map && spec.list_depth != 0)) {
      Fail(path_, ": field '", spec.name, "': only plain, LIST, LIST<LIST> and MAP fields ",
           "can be written");
    }
    auto add_leaf = [&](std::vector<std::string> leaf_path, ParquetType type, int def, int rep) {
      auto leaf = std::make_unique<parquet::LeafBuffer>();
      leaf->path = std::move(leaf_path);
      leaf->type = type;
      leaf->max_def = def;
      leaf->max_rep = rep;
      leaf->values.type = ColumnTypeFor(type);
      field_leaves_.back().push_back(leaves_.size());
      leaves_.push_back(std::move(leaf));
    };
    field_leaves_.emplace_back();
    int def = spec.nullable ? 1 : 0;
    Repetition top = RepetitionFor(spec.nullable);
    if (spec.is_map) {
      schema.push_back(Group(spec.name, top, 1, parquet::kConvertedMap, parquet::kLogicalMap));
      schema.push_back(Group("key_value", Repetition::kRepeated, 2, parquet::kConvertedNone,
                             parquet::kLogicalNone));
      schema.push_back(Leaf("key", spec.key_type, Repetition::kRequired));
      schema.push_back(Leaf("value", spec.type, RepetitionFor(spec.items_nullable)));
      add_leaf({spec.name, "key_value", "key"}, spec.key_type, def + 1, 1);
      add_leaf({spec.name, "key_value", "value"}, spec.type, def + 1 + spec.items_nullable, 1);
    } else if (spec.list_depth == 0) {
      schema.push_back(Leaf(spec.name, spec.type, top));
      add_leaf({spec.name}, spec.type, def, 0);
    } else {
      schema.push_back(Group(spec.name, top, 1, parquet::kConvertedList, parquet::kLogicalList));
      std::vector<std::string> leaf_path{spec.name};
      for (int level = 1; level <= spec.list_depth; ++level) {
        schema.push_back(Group("list", Repetition::kRepeated, 1, parquet::kConvertedNone,
                               parquet::kLogicalNone));
        leaf_path.push_back("list");
        leaf_path.push_back("element");
        def += 1 + spec.items_nullable;
        Repetition element = RepetitionFor(spec.items_nullable);
        if (level < spec.list_depth) {
          schema.push_back(
              Group("element", element, 1, parquet::kConvertedList, parquet::kLogicalList));
        } else {
          schema.push_back(Leaf("element", spec.type, element));
        }
      }
      add_leaf(leaf_path, spec.type, def, spec.list_depth);
    }
  }
  if (!parquet::CodecSupported(CodecFor(options_.codec))) Fail(path_, ": unsupported codec");
  std::filesystem::path target(path_);
  if (target.has_parent_path()) MakeDirs(target.parent_path().string());
  temp_path_ = TempSiblingPath(path_);
  file_ = std::fopen(temp_path_.c_str(), "wb");
  if (!file_) Fail("cannot create Parquet file '", temp_path_, "': ", std::strerror(errno));
  try {
    WriteBytes("PAR1", 4);
  } catch (...) {
    std::fclose(file_);
    file_ = nullptr;
    std::error_code ignored;
    std::filesystem::remove(temp_path_, ignored);
    throw;
  }
}

ParquetFileWriter::~ParquetFileWriter() {
  if (file_) {
    std::fclose(file_);
    std::error_code ignored;
    std::filesystem::remove(temp_path_, ignored);
  }
}

void ParquetFileWriter::WriteBytes(const char* data, size_t size) {
  if (size > 0 && std::fwrite(data, 1, size, file_) != size) {
    Fail("failed writing Parquet file '", path_, "': ", std::strerror(errno));
  }
  offset_ += static_cast<int64_t>(size);
}

void ParquetFileWriter::Validate(size_t field, const FieldInput& input, size_t num_rows) const {
  const ParquetFieldSpec& spec = fields_[field];
  std::string where = StrCat(path_, ": column '", spec.name, "'");
  size_t depth = spec.is_map ? 1 : static_cast<size_t>(spec.list_depth);
  if (input.lists->size() != depth) {
    Fail(where, ": has ", input.lists->size(), " list levels, the schema declares ", depth);
  }
  CheckColumn(*input.values, ColumnTypeFor(spec.type), where + " values");
  bool leaf_nullable = depth == 0 ? spec.nullable : spec.items_nullable;
  size_t leaf_count = input.values->size();
  for (size_t k = 0; k < depth; ++k) {
    const ParquetListLevel& level = (*input.lists)[k];
    size_t expected_lists = k == 0 ? num_rows : (*input.lists)[k - 1].offsets.back();
    size_t children = k + 1 < depth ? (*input.lists)[k + 1].size() : leaf_count;
    if (level.size() != expected_lists || level.offsets.size() != level.size() + 1 ||
        level.offsets[0] != 0 || level.offsets.back() != children ||
        !std::is_sorted(level.offsets.begin(), level.offsets.end())) {
      Fail(where, ": list level ", k, " offsets do not match its ", expected_lists, " lists and ",
           children, " children");
    }
    bool nullable = k == 0 ? spec.nullable : spec.items_nullable;
    for (size_t i = 0; i < level.size(); ++i) {
      if (!level.valid[i] && (!nullable || level.offsets[i + 1] != level.offsets[i])) {
        Fail(where, ": list ", i, " at level ", k,
             nullable ? " is null but has items" : " is null but the schema forbids nulls");
      }
    }
  }
  if (depth == 0 && leaf_count != num_rows) {
    Fail(where, ": has ", leaf_count, " rows, other columns have ", num_rows);
  }
  const Column& values = *input.values;
  for (size_t i = 0; i < leaf_count; ++i) {
    if (!values.valid[i]) {
      if (!leaf_nullable) Fail(where, ": null value at index ", i, " but the schema forbids nulls");
      continue;
    }
    if (spec.type == ParquetType::kInt32 &&
        (values.ints[i] < std::numeric_limits<int32_t>::min() ||
         values.ints[i] > std::numeric_limits<int32_t>::max())) {
      Fail(where, ": value ", values.ints[i], " at index ", i, " does not fit in INT32");
    }
  }
  if (spec.is_map) {
    if (!input.keys) Fail(where, ": a MAP column needs keys");
    CheckColumn(*input.keys, ColumnTypeFor(spec.key_type), where + " keys");
    if (input.keys->size() != leaf_count) {
      Fail(where, ": has ", input.keys->size(), " keys but ", leaf_count, " values");
    }
    for (size_t i = 0; i < leaf_count; ++i) {
      if (!input.keys->valid[i]) Fail(where, ": null map key at index ", i);
      if (spec.key_type == ParquetType::kInt32 &&
          (input.keys->ints[i] < std::numeric_limits<int32_t>::min() ||
           input.keys->ints[i] > std::numeric_limits<int32_t>::max())) {
        Fail(where, ": key ", input.keys->ints[i], " at index ", i, " does not fit in INT32");
      }
    }
  }
}

void ParquetFileWriter::Shred(size_t field, const FieldInput& input, size_t begin, size_t end) {
  const ParquetFieldSpec& spec = fields_[field];
  parquet::LeafBuffer* leaf = leaves_[field_leaves_[field].back()].get();
  parquet::LeafBuffer* key = spec.is_map ? leaves_[field_leaves_[field][0]].get() : nullptr;
  const Column& values = *input.values;
  if (input.lists->empty()) {
    for (size_t row = begin; row < end; ++row) {
      bool present = values.valid[row] != 0;
      leaf->Levels(0, present ? leaf->max_def : 0);
      if (present) leaf->Value(values, row);
    }
    return;
  }
  const std::vector<ParquetListLevel>& lists = *input.lists;
  const int depth = static_cast<int>(lists.size());
  // Dremel shredding: `r` is the repetition level of the first value emitted, `d` the
  // definition level reached above list `index` at `level`.
  auto emit_empty = [&](int r, int d) {
    leaf->Levels(r, d);
    if (key) key->Levels(r, d);
  };
  std::function<void(int, size_t, int, int)> emit_list = [&](int level, size_t index, int r,
                                                             int d) {
    const ParquetListLevel& lists_here = lists[level];
    bool optional = level == 0 ? spec.nullable : spec.items_nullable;
    if (optional) {
      if (!lists_here.valid[index]) return emit_empty(r, d);
      ++d;
    }
    uint32_t first = lists_here.offsets[index];
    uint32_t last = lists_here.offsets[index + 1];
    if (first == last) return emit_empty(r, d);
    for (uint32_t child = first; child < last; ++child) {
      int child_r = child == first ? r : level + 1;
      int child_d = d + 1;  // the repeated node is present
      if (level + 1 < depth) {
        emit_list(level + 1, child, child_r, child_d);
        continue;
      }
      if (key) {
        key->Levels(child_r, child_d);
        key->Value(*input.keys, child);
      }
      bool present = values.valid[child] != 0;
      leaf->Levels(child_r, present ? leaf->max_def : child_d);
      if (present) leaf->Value(values, child);
    }
  };
  for (size_t row = begin; row < end; ++row) emit_list(0, row, 0, 0);
}

void ParquetFileWriter::WriteInputs(const std::vector<FieldInput>& inputs, size_t num_rows) {
  if (closed_) Fail(path_, ": Write after Close");
  if (!file_) Fail(path_, ": writer failed earlier");
  for (size_t f = 0; f < inputs.size(); ++f) Validate(f, inputs[f], num_rows);
  size_t pos = 0;
  while (pos < num_rows) {
    size_t take = static_cast<size_t>(
        std::min<int64_t>(num_rows - pos, options_.row_group_rows - buffered_rows_));
    for (size_t f = 0; f < inputs.size(); ++f) Shred(f, inputs[f], pos, pos + take);
    buffered_rows_ += static_cast<int64_t>(take);
    pos += take;
    if (buffered_rows_ >= options_.row_group_rows) FlushRowGroup();
  }
}

void ParquetFileWriter::Write(const std::vector<ParquetColumn>& columns) {
  if (columns.size() != fields_.size()) {
    Fail(path_, ": got ", columns.size(), " columns, the schema has ", fields_.size());
  }
  std::vector<FieldInput> inputs;
  for (size_t f = 0; f < columns.size(); ++f) {
    if (columns[f].name != fields_[f].name) {
      Fail(path_, ": column ", f, " is named '", columns[f].name, "', the schema expects '",
           fields_[f].name, "'");
    }
    inputs.push_back({&columns[f].lists, &columns[f].keys, &columns[f].values});
  }
  WriteInputs(inputs, columns.empty() ? 0 : columns[0].num_rows());
}

void ParquetFileWriter::Write(const RecordBatch& batch) {
  static const std::vector<ParquetListLevel> kNoLists;
  std::vector<FieldInput> inputs;
  for (const ParquetFieldSpec& spec : fields_) {
    if (spec.list_depth > 0 || spec.is_map) {
      Fail(path_, ": field '", spec.name, "' is nested; write it as a ParquetColumn");
    }
    const Column* column = batch.Find(spec.name);
    if (!column) Fail(path_, ": the batch has no column '", spec.name, "'");
    inputs.push_back({&kNoLists, nullptr, column});
  }
  WriteInputs(inputs, batch.num_rows());
}

void ParquetFileWriter::FlushRowGroup() {
  if (buffered_rows_ == 0) return;
  parquet::RowGroup group;
  group.num_rows = buffered_rows_;
  group.file_offset = offset_;
  int64_t group_start = offset_;
  metadata_->row_groups.push_back(group);
  for (size_t leaf = 0; leaf < leaves_.size(); ++leaf) WriteColumnChunk(leaf);
  parquet::RowGroup& written = metadata_->row_groups.back();
  for (const auto& chunk : written.columns)
    written.total_byte_size += chunk.meta_data.total_uncompressed_size;
  written.total_compressed_size = offset_ - group_start;
  rows_written_ += buffered_rows_;
  buffered_rows_ = 0;
  for (auto& leaf : leaves_) leaf->Clear();
}

void ParquetFileWriter::WritePage(parquet::PageHeader header, const std::string& body,
                                  const std::string& column, parquet::ColumnMetaData* meta) {
  page_buffer_.clear();
  parquet::Compress(meta->codec, body.data(), body.size(), options_.compression_level,
                    &page_buffer_);
  constexpr size_t kMaxPage = static_cast<size_t>(std::numeric_limits<int32_t>::max());
  if (body.size() > kMaxPage || page_buffer_.size() > kMaxPage) {
    Fail(path_, ": a page of column '", column, "' exceeds 2 GiB");
  }
  header.uncompressed_page_size = static_cast<int32_t>(body.size());
  header.compressed_page_size = static_cast<int32_t>(page_buffer_.size());
  if (options_.page_checksums) {
    header.has_crc = true;
    header.crc =
        static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(page_buffer_.data()),
                                    static_cast<uInt>(page_buffer_.size())));
  }
  std::string header_bytes = parquet::EncodePageHeader(header);
  WriteBytes(header_bytes.data(), header_bytes.size());
  WriteBytes(page_buffer_.data(), page_buffer_.size());
  meta->total_uncompressed_size += static_cast<int64_t>(header_bytes.size() + body.size());
  meta->total_compressed_size += static_cast<int64_t>(header_bytes.size() + page_buffer_.size());
}

void ParquetFileWriter::WriteColumnChunk(size_t leaf_index) {
  const parquet::LeafBuffer& leaf = *leaves_[leaf_index];
  const std::string& column = leaf.path[0];
  parquet::ColumnChunk chunk;
  chunk.has_meta_data = true;
  chunk.file_offset = offset_;
  parquet::ColumnMetaData& meta = chunk.meta_data;
  meta.type = PhysicalTypeFor(leaf.type);
  meta.path_in_schema = leaf.path;
  meta.codec = CodecFor(options_.codec);
  meta.num_values = static_cast<int64_t>(leaf.num_levels);
  meta.encodings = {static_cast<int32_t>(Encoding::kPlain), static_cast<int32_t>(Encoding::kRle)};

  parquet::ValueBuffer dictionary;
  std::vector<uint32_t> indices;
  bool use_dictionary =
      leaf.type == ParquetType::kString && options_.dictionary &&
      BuildDictionary(leaf.values, options_.dictionary_max_bytes, &dictionary, &indices);
  std::string body;
  if (use_dictionary) {
    AppendPlainValues(ParquetType::kString, dictionary, 0, dictionary.size(), &body);
    parquet::PageHeader header;
    header.type = parquet::PageType::kDictionaryPage;
    header.has_dictionary_page_header = true;
    header.dictionary_page_header.num_values = static_cast<int32_t>(dictionary.size());
    header.dictionary_page_header.encoding = Encoding::kPlain;
    meta.has_dictionary_page_offset = true;
    meta.dictionary_page_offset = offset_;
    WritePage(header, body, column, &meta);
    meta.encodings.push_back(static_cast<int32_t>(Encoding::kRleDictionary));
  }
  meta.data_page_offset = offset_;
  const int index_width =
      use_dictionary ? std::max(1, parquet::BitWidthFor(dictionary.size() - 1)) : 0;

  size_t level = 0;
  size_t value = 0;
  while (level < leaf.num_levels) {
    // A page takes whole rows until its values reach the target size.
    size_t first_level = level;
    size_t first_value = value;
    size_t page_bytes = 0;
    while (level < leaf.num_levels) {
      bool row_start = leaf.max_rep == 0 || leaf.rep[level] == 0;
      if (level > first_level && row_start && page_bytes >= options_.data_page_bytes) break;
      if (leaf.max_def == 0 || leaf.def[level] == leaf.max_def) {
        page_bytes += use_dictionary ? 4 : PlainSize(leaf.type, leaf.values, value);
        ++value;
      }
      ++level;
    }
    size_t count = level - first_level;
    body.clear();
    AppendLevels(leaf.rep, leaf.max_rep, first_level, count, &body);
    AppendLevels(leaf.def, leaf.max_def, first_level, count, &body);
    if (use_dictionary) {
      body.push_back(static_cast<char>(index_width));
      parquet::EncodeRleBitPacked(indices.data() + first_value, value - first_value, index_width,
                                  &body);
    } else {
      AppendPlainValues(leaf.type, leaf.values, first_value, value, &body);
    }
    parquet::PageHeader header;
    header.type = parquet::PageType::kDataPage;
    header.has_data_page_header = true;
    header.data_page_header.num_values = static_cast<int32_t>(count);
    header.data_page_header.encoding = use_dictionary ? Encoding::kRleDictionary : Encoding::kPlain;
    header.data_page_header.definition_level_encoding = Encoding::kRle;
    header.data_page_header.repetition_level_encoding = Encoding::kRle;
    WritePage(header, body, column, &meta);
  }
  metadata_->row_groups.back().columns.push_back(std::move(chunk));
}

void ParquetFileWriter::Close() {
  if (closed_) return;
  if (!file_) Fail(path_, ": writer failed earlier");
  FlushRowGroup();
  metadata_->num_rows = rows_written_;
  std::string footer = parquet::EncodeFileMetaData(*metadata_);
  WriteBytes(footer.data(), footer.size());
  std::string tail;
  AppendU32(static_cast<uint32_t>(footer.size()), &tail);
  tail += "PAR1";
  WriteBytes(tail.data(), tail.size());
  bool ok = std::fflush(file_) == 0 && ::fsync(fileno(file_)) == 0;
  ok = std::fclose(file_) == 0 && ok;
  file_ = nullptr;
  std::error_code error;
  if (ok) std::filesystem::rename(temp_path_, path_, error);
  if (!ok || error) {
    std::filesystem::remove(temp_path_, error);
    Fail("cannot finish Parquet file '", path_, "'");
  }
  closed_ = true;
}

}  // namespace tzrec
