#include "tzrec/data/parquet/parquet_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/parquet/column_assembly.h"
#include "tzrec/data/parquet/column_chunk_decoder.h"
#include "tzrec/data/parquet/parquet_format.h"
#include "tzrec/data/parquet/parquet_schema.h"

namespace tzrec {
namespace {

constexpr char kMagic[] = "PAR1";
constexpr char kEncryptedMagic[] = "PARE";

std::string DescribeType(const parquet::ParquetSchema& schema, const parquet::TopLevelField& f) {
  auto leaf_type = [&](size_t i) {
    return i < f.leaves.size() ? parquet::PhysicalTypeName(schema.leaves()[f.leaves[i]].type)
                               : std::string("?");
  };
  if (f.is_map) return StrCat("MAP<", leaf_type(0), ", ", leaf_type(1), ">");
  std::string type = f.unsupported.empty() || f.leaves.size() == 1 ? leaf_type(0) : "GROUP";
  for (int i = 0; i < f.list_depth; ++i) type = StrCat("LIST<", type, ">");
  return type;
}

void AppendColumn(const Column& from, Column* to) {
  to->valid.insert(to->valid.end(), from.valid.begin(), from.valid.end());
  to->ints.insert(to->ints.end(), from.ints.begin(), from.ints.end());
  to->doubles.insert(to->doubles.end(), from.doubles.begin(), from.doubles.end());
  if (from.type == ColumnType::kString) {
    if (to->chars.size() + from.chars.size() > std::numeric_limits<uint32_t>::max()) {
      Fail("column '", to->name, "': string data exceeds 4 GiB in one batch; read fewer rows");
    }
    uint32_t base = static_cast<uint32_t>(to->chars.size());
    for (size_t i = 1; i < from.offsets.size(); ++i) to->offsets.push_back(base + from.offsets[i]);
    to->chars += from.chars;
  }
}

}  // namespace

ParquetFileReader::ParquetFileReader(std::string path, ParquetReadOptions options)
    : path_(std::move(path)), options_(std::move(options)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) Fail("cannot open Parquet file '", path_, "': ", std::strerror(errno));
  try {
    struct stat info;
    if (::fstat(fd_, &info) != 0) Fail("cannot stat the file: ", std::strerror(errno));
    file_size_ = info.st_size;
    ReadFooter();
    SelectColumns();
  } catch (const Error& e) {
    ::close(fd_);
    fd_ = -1;
    Fail(path_, ": ", e.what());
  }
  range_end_ = num_rows_;
}

ParquetFileReader::~ParquetFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

void ParquetFileReader::ReadExact(int64_t offset, size_t size, char* out) const {
  size_t done = 0;
  while (done < size) {
    ssize_t got = ::pread(fd_, out + done, size - done, offset + static_cast<int64_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) Fail("read error at byte ", offset + done, ": ", std::strerror(errno));
    if (got == 0) Fail("file truncated: read stopped at byte ", offset + done);
    done += static_cast<size_t>(got);
  }
}

void ParquetFileReader::ReadFooter() {
  if (file_size_ < 12) {
    Fail("not a Parquet file or truncated: only ", file_size_, " bytes (the magic and footer ",
         "alone need 12)");
  }
  char head[4];
  ReadExact(0, 4, head);
  char tail[8];
  ReadExact(file_size_ - 8, 8, tail);
  if (std::memcmp(head, kEncryptedMagic, 4) == 0 ||
      std::memcmp(tail + 4, kEncryptedMagic, 4) == 0) {
    Fail("encrypted Parquet files are not supported yet");
  }
  if (std::memcmp(head, kMagic, 4) != 0) Fail("not a Parquet file: bad magic bytes at the start");
  if (std::memcmp(tail + 4, kMagic, 4) != 0) {
    Fail("bad magic bytes at the end (file truncated or not Parquet)");
  }
  uint32_t footer_length;
  std::memcpy(&footer_length, tail, 4);
  if (footer_length > static_cast<uint64_t>(file_size_ - 12)) {
    Fail("footer length ", footer_length, " is larger than the file (", file_size_, " bytes)");
  }
  data_end_ = file_size_ - 8 - footer_length;
  std::string footer(footer_length, '\0');
  ReadExact(data_end_, footer_length, footer.data());
  metadata_ = std::make_unique<parquet::FileMetaData>(
      parquet::DecodeFileMetaData(reinterpret_cast<const uint8_t*>(footer.data()), footer.size()));
  if (metadata_->encrypted) Fail("encrypted Parquet files are not supported yet");
  schema_ = std::make_unique<parquet::ParquetSchema>(metadata_->schema);

  int64_t total = 0;
  for (size_t g = 0; g < metadata_->row_groups.size(); ++g) {
    const parquet::RowGroup& group = metadata_->row_groups[g];
    if (group.num_rows < 0 || group.num_rows > std::numeric_limits<int64_t>::max() - total) {
      Fail("corrupt metadata: row group ", g, " has ", group.num_rows, " rows");
    }
    if (group.columns.size() != schema_->leaves().size()) {
      Fail("corrupt metadata: row group ", g, " has ", group.columns.size(),
           " column chunks but the schema has ", schema_->leaves().size(), " leaf columns");
    }
    row_group_first_row_.push_back(total);
    row_group_rows_.push_back(group.num_rows);
    total += group.num_rows;
  }
  if (metadata_->num_rows != total) {
    Fail("corrupt metadata: the footer states ", metadata_->num_rows,
         " rows but the row groups hold ", total);
  }
  num_rows_ = total;

  for (const parquet::TopLevelField& f : schema_->fields()) {
    ParquetFieldInfo info;
    info.name = f.name;
    info.parquet_type = DescribeType(*schema_, f);
    info.output_type = f.output_type;
    info.list_depth = f.list_depth;
    info.is_map = f.is_map;
    info.nullable = f.nullable;
    info.unsupported = f.unsupported;
    if (f.unsupported.empty()) {
      info.float_items = schema_->leaves()[f.leaves.back()].type == parquet::PhysicalType::kFloat;
      info.float_keys =
          f.is_map && schema_->leaves()[f.leaves[0]].type == parquet::PhysicalType::kFloat;
    }
    fields_.push_back(std::move(info));
  }
}

void ParquetFileReader::SelectColumns() {
  std::vector<std::string> names = options_.columns;
  if (names.empty()) {
    for (const auto& field : fields_) names.push_back(field.name);
  }
  for (const std::string& name : names) {
    int index = schema_->FindField(name);
    if (index < 0) {
      std::vector<std::string> available;
      for (const auto& field : fields_) available.push_back(field.name);
      Fail("column '", name, "' not found; columns are: ", Join(available, ", "));
    }
    const ParquetFieldInfo& field = fields_[index];
    if (!field.unsupported.empty()) {
      Fail("column '", name, "' (", field.parquet_type, "): ", field.unsupported,
           " are not supported yet");
    }
    selected_fields_.push_back(index);
    column_names_.push_back(name);
  }
}

int64_t ParquetFileReader::row_group_num_rows(int index) const {
  if (index < 0 || index >= num_row_groups()) {
    Fail(path_, ": row group ", index, " out of range (", num_row_groups(), " row groups)");
  }
  return row_group_rows_[index];
}

std::vector<std::pair<std::string, std::string>> ParquetFileReader::key_value_metadata() const {
  std::vector<std::pair<std::string, std::string>> entries;
  for (const auto& entry : metadata_->key_value_metadata)
    entries.emplace_back(entry.key, entry.value);
  return entries;
}

void ParquetFileReader::ReadLeaf(int row_group, int leaf_index, parquet::LeafData* out) {
  const parquet::RowGroup& group = metadata_->row_groups[row_group];
  const parquet::ColumnChunk& chunk = group.columns[leaf_index];
  const parquet::LeafColumn& leaf = schema_->leaves()[leaf_index];
  if (chunk.encrypted) Fail("encrypted column chunks are not supported yet");
  if (!chunk.file_path.empty()) {
    Fail("column chunks stored in another file ('", chunk.file_path, "') are not supported yet");
  }
  if (!chunk.has_meta_data) Fail("corrupt metadata: column chunk lacks its ColumnMetaData");
  const parquet::ColumnMetaData& meta = chunk.meta_data;
  if (meta.path_in_schema != leaf.path) {
    Fail("corrupt metadata: column chunk path '", Join(meta.path_in_schema, "."),
         "' does not match the schema");
  }
  int64_t start = meta.data_page_offset;
  if (meta.has_dictionary_page_offset && meta.dictionary_page_offset > 0 &&
      meta.dictionary_page_offset < start) {
    start = meta.dictionary_page_offset;
  }
  int64_t length = meta.total_compressed_size;
  if (start < 4 || length < 0 || start > data_end_ || length > data_end_ - start) {
    Fail("column chunk bytes [", start, ", ", start + length,
         ") lie outside the file's data section [4, ", data_end_, ")");
  }
  chunk_buffer_.resize(static_cast<size_t>(length));
  ReadExact(start, chunk_buffer_.size(), chunk_buffer_.data());
  parquet::DecodeColumnChunk(reinterpret_cast<const uint8_t*>(chunk_buffer_.data()),
                             chunk_buffer_.size(), meta, leaf, group.num_rows,
                             options_.verify_checksums, out);
}

std::vector<ParquetColumn> ParquetFileReader::ReadRowGroupColumns(int index) {
  if (index < 0 || index >= num_row_groups()) {
    Fail(path_, ": row group ", index, " out of range (", num_row_groups(), " row groups)");
  }
  std::vector<ParquetColumn> columns;
  parquet::LeafData data;
  for (int field_index : selected_fields_) {
    const parquet::TopLevelField& field = schema_->fields()[field_index];
    ParquetColumn column;
    column.name = field.name;
    column.is_map = field.is_map;
    for (size_t k = 0; k < field.leaves.size(); ++k) {
      int leaf_index = field.leaves[k];
      const parquet::LeafColumn& leaf = schema_->leaves()[leaf_index];
      try {
        ReadLeaf(index, leaf_index, &data);
        if (field.is_map && k == 0) {
          parquet::AssembleLeaf(leaf, &data, &column.lists, &column.keys);
        } else if (field.is_map) {
          std::vector<ParquetListLevel> value_lists;
          parquet::AssembleLeaf(leaf, &data, &value_lists, &column.values);
          if (value_lists[0].valid != column.lists[0].valid ||
              value_lists[0].offsets != column.lists[0].offsets) {
            Fail("map keys and values disagree on the map layout");
          }
        } else {
          parquet::AssembleLeaf(leaf, &data, &column.lists, &column.values);
        }
      } catch (const Error& e) {
        Fail(path_, ": row group ", index, ", column '", leaf.DottedPath(), "': ", e.what());
      }
    }
    columns.push_back(std::move(column));
  }
  return columns;
}

void ParquetFileReader::BuildBatch(const std::vector<ParquetColumn>& columns, int row_group,
                                   size_t begin, size_t end, RecordBatch* out) const {
  out->source = path_;
  out->line_numbers.resize(end - begin);
  int64_t first = row_group_first_row_[row_group] + static_cast<int64_t>(begin) + 1;
  for (size_t i = 0; i < end - begin; ++i) out->line_numbers[i] = first + static_cast<int64_t>(i);
  out->columns.clear();
  for (size_t c = 0; c < columns.size(); ++c) {
    const ParquetColumn& column = columns[c];
    const ParquetFieldInfo& info = fields_[selected_fields_[c]];
    out->columns.push_back(
        ParquetColumnRows(column, begin, end, options_, info.float_items, info.float_keys));
  }
}

void ParquetFileReader::SetRowRange(int64_t begin, int64_t end) {
  end = std::min(end, num_rows_);
  if (begin < 0 || begin > end) {
    Fail(path_, ": invalid row range [", begin, ", ", end, ") for a file of ", num_rows_, " rows");
  }
  range_begin_ = begin;
  range_end_ = end;
  cursor_ = begin;
}

bool ParquetFileReader::Next(size_t max_rows, RecordBatch* out) {
  TZREC_CHECK(max_rows > 0);
  if (cursor_ >= range_end_) {
    out->line_numbers.clear();
    out->columns.clear();
    out->source = path_;
    return false;
  }
  // The last row group starting at or before the cursor (skips empty row groups).
  int group = static_cast<int>(std::upper_bound(row_group_first_row_.begin(),
                                                row_group_first_row_.end(), cursor_) -
                               row_group_first_row_.begin()) -
              1;
  if (loaded_group_ != group) {
    loaded_group_ = -1;
    loaded_columns_ = ReadRowGroupColumns(group);
    loaded_group_ = group;
  }
  int64_t group_first = row_group_first_row_[group];
  int64_t stop = std::min(
      {cursor_ + static_cast<int64_t>(max_rows), group_first + row_group_rows_[group], range_end_});
  BuildBatch(loaded_columns_, group, static_cast<size_t>(cursor_ - group_first),
             static_cast<size_t>(stop - group_first), out);
  cursor_ = stop;
  return true;
}

void ParquetFileReader::ReadRows(int64_t begin, int64_t end, RecordBatch* out) {
  end = std::min(end, num_rows_);
  if (begin < 0 || begin > end) {
    Fail(path_, ": invalid row range [", begin, ", ", end, ") for a file of ", num_rows_, " rows");
  }
  out->source = path_;
  out->line_numbers.clear();
  out->columns.clear();
  for (const std::string& name : column_names_) {
    Column column;
    column.name = name;
    column.type = fields_[schema_->FindField(name)].output_type;
    out->columns.push_back(std::move(column));
  }
  RecordBatch part;
  for (int g = 0; g < num_row_groups(); ++g) {
    int64_t first = row_group_first_row_[g];
    int64_t last = first + row_group_rows_[g];
    if (last <= begin || first >= end || row_group_rows_[g] == 0) continue;
    std::vector<ParquetColumn> fresh;
    const std::vector<ParquetColumn>* columns = &loaded_columns_;
    if (g != loaded_group_) {
      fresh = ReadRowGroupColumns(g);
      columns = &fresh;
    }
    BuildBatch(*columns, g, static_cast<size_t>(std::max(begin, first) - first),
               static_cast<size_t>(std::min(end, last) - first), &part);
    out->line_numbers.insert(out->line_numbers.end(), part.line_numbers.begin(),
                             part.line_numbers.end());
    for (size_t c = 0; c < part.columns.size(); ++c)
      AppendColumn(part.columns[c], &out->columns[c]);
  }
}

void ParquetFileReader::ReadRowGroup(int index, RecordBatch* out) {
  int64_t rows = row_group_num_rows(index);
  BuildBatch(ReadRowGroupColumns(index), index, 0, static_cast<size_t>(rows), out);
}

}  // namespace tzrec
