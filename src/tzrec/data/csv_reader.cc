#include "tzrec/data/csv_reader.h"

#include <cstdlib>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"

namespace tzrec {

char ParseCsvDelimiter(const std::string& delimiter) {
  if (delimiter.size() != 1) {
    Fail("data_config.delimiter must be exactly one character, got '", Printable(delimiter), "'");
  }
  return delimiter[0];
}

int64_t CsvMaxRecordBytes() {
  const char* text = std::getenv(kCsvMaxRecordBytesEnv);
  if (!text || !*text) return kDefaultCsvMaxRecordBytes;
  int64_t bytes;
  if (!ParseInt64(text, &bytes) || bytes <= 0) {
    Fail(kCsvMaxRecordBytesEnv, "='", Printable(text), "' must be a positive number of bytes");
  }
  return bytes;
}

CsvFileReader::CsvFileReader(std::string path, CsvOptions options)
    : path_(std::move(path)), options_(std::move(options)), buffer_(1 << 20) {
  file_ = std::fopen(path_.c_str(), "rb");
  if (!file_) Fail("cannot open CSV file '", path_, "'");
  for (unsigned char c : {static_cast<unsigned char>(options_.delimiter), static_cast<unsigned char>('"'),
                          static_cast<unsigned char>('\r'), static_cast<unsigned char>('\n')}) {
    stop_[c] |= kStopUnquoted;
  }
  stop_[static_cast<unsigned char>('"')] |= kStopQuoted;
  stop_[static_cast<unsigned char>('\n')] |= kStopQuoted;
  if (options_.with_header) {
    if (!ReadRecord()) Fail(path_, ": empty file, expected a header line");
    for (size_t i = 0; i < field_ends_.size(); ++i) names_.emplace_back(Trim(Field(i)));
  } else {
    if (options_.column_names.empty()) {
      Fail(path_, ": CSV without header needs data_config.input_fields (or input_fields_str) ",
           "to name its columns");
    }
    names_ = options_.column_names;
  }
  std::vector<std::string> wanted = options_.wanted_columns;
  if (wanted.empty()) wanted = names_;
  for (const auto& name : wanted) {
    int index = -1;
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] == name) {
        index = static_cast<int>(i);
        break;
      }
    }
    if (index < 0) {
      // A Parquet file read as CSV shows its magic number as the first "column".
      const bool parquet = !names_.empty() && names_[0].rfind("PAR1", 0) == 0;
      Fail(path_, ": column '", name, "' is missing; columns are: ",
           parquet ? std::string("(none: this is a Parquet file; set data_config.dataset_type, or "
                                 "predict's --dataset_type, to ParquetDataset)")
                   : Join(names_, ", "));
    }
    wanted_index_.push_back(index);
    auto type = options_.column_types.find(name);
    wanted_type_.push_back(type == options_.column_types.end() ? ColumnType::kString
                                                               : type->second);
  }
}

CsvFileReader::~CsvFileReader() {
  if (file_) std::fclose(file_);
}

void CsvFileReader::CheckRecordSize() const {
  if (record_offset_ < 0) return;
  const int64_t size = buffer_offset_ + static_cast<int64_t>(buffer_pos_) - record_offset_;
  if (size > options_.max_record_bytes) {
    Fail(path_, ":", record_line_, ": record is longer than ", options_.max_record_bytes,
         " bytes (no line end?); raise ", kCsvMaxRecordBytesEnv, " if such records are intended");
  }
}

bool CsvFileReader::Refill() {
  CheckRecordSize();  // once per buffer keeps the per-character loop free of it
  buffer_offset_ += static_cast<int64_t>(buffer_len_);
  buffer_len_ = std::fread(buffer_.data(), 1, buffer_.size(), file_);
  buffer_pos_ = 0;
  if (buffer_len_ == 0 && std::ferror(file_)) Fail("read error in '", path_, "'");
  return buffer_len_ > 0;
}

bool CsvFileReader::ReadRecord() {
  const char delim = options_.delimiter;
  while (true) {
    int c = Peek();
    if (c == EOF) return false;
    if (c == '\n') {  // skip empty lines
      Get();
      ++line_;
      continue;
    }
    if (c == '\r') {
      Get();
      continue;
    }
    break;
  }
  record_line_ = line_;
  field_ends_.clear();
  if (SplitPlainRecord()) return true;
  record_offset_ = buffer_offset_ + static_cast<int64_t>(buffer_pos_);
  record_.clear();
  // Field ends are 32-bit: a record over 4 GiB is refused by the size cap long before.
  auto end_field = [&]() { field_ends_.push_back(static_cast<uint32_t>(record_.size())); };
  bool quoted = false;
  bool field_start = true;
  while (true) {
    // Ordinary bytes in one piece; what the state must decide on goes through the loop below.
    const size_t run = PlainRun(quoted ? kStopQuoted : kStopUnquoted);
    if (run > 0) {
      record_.append(buffer_.data() + buffer_pos_, run);
      buffer_pos_ += run;
      if (!quoted) field_start = false;
      continue;  // at the buffer's end: Get() refills
    }
    int c = Get();
    if (c == EOF) {
      if (quoted) Fail(path_, ":", record_line_, ": unterminated quoted field");
      end_field();
      CheckRecordSize();
      record_offset_ = -1;
      record_text_ = record_;
      separator_width_ = 0;
      return true;
    }
    if (quoted) {
      if (c == '"') {
        if (Peek() == '"') {
          Get();
          record_.push_back('"');
        } else {
          quoted = false;
        }
      } else {
        if (c == '\n') ++line_;
        record_.push_back(static_cast<char>(c));
      }
      continue;
    }
    if (c == '"' && field_start) {
      quoted = true;
      field_start = false;
      continue;
    }
    if (c == delim) {
      end_field();
      field_start = true;
      continue;
    }
    if (c == '\n') {
      ++line_;
      end_field();
      CheckRecordSize();
      record_offset_ = -1;
      record_text_ = record_;
      separator_width_ = 0;
      return true;
    }
    if (c == '\r' && Peek() == '\n') continue;
    record_.push_back(static_cast<char>(c));
    field_start = false;
  }
}

bool CsvFileReader::SplitPlainRecord() {
  const char* begin = buffer_.data() + buffer_pos_;
  const char* end = buffer_.data() + buffer_len_;
  const char delim = options_.delimiter;
  for (const char* p = begin; p < end; ++p) {
    const unsigned char c = static_cast<unsigned char>(*p);
    if (!(stop_[c] & kStopUnquoted)) continue;
    if (c == static_cast<unsigned char>(delim)) {
      field_ends_.push_back(static_cast<uint32_t>(p - begin));
      continue;
    }
    // A quote or CR, or a record over the size cap: the full loop decides (and reports).
    if (c != '\n' || p - begin + 1 > options_.max_record_bytes) break;
    field_ends_.push_back(static_cast<uint32_t>(p - begin));
    record_text_ = std::string_view(begin, static_cast<size_t>(p - begin));
    separator_width_ = 1;
    buffer_pos_ += static_cast<size_t>(p - begin) + 1;
    ++line_;
    return true;
  }
  field_ends_.clear();
  return false;
}

int64_t CsvFileReader::SkipRecords(int64_t count) {
  int64_t skipped = 0;
  while (skipped < count && ReadRecord()) ++skipped;
  return skipped;
}

bool CsvFileReader::Next(size_t max_rows, RecordBatch* out) {
  out->source = path_;
  out->line_numbers.clear();
  out->columns.assign(wanted_index_.size(), Column());
  for (size_t j = 0; j < wanted_index_.size(); ++j) {
    out->columns[j].name = names_[wanted_index_[j]];
    out->columns[j].type = wanted_type_[j];
  }
  while (out->line_numbers.size() < max_rows && ReadRecord()) {
    if (field_ends_.size() != names_.size()) {
      Fail(path_, ":", record_line_, ": expected ", names_.size(), " columns, got ", field_ends_.size());
    }
    out->line_numbers.push_back(record_line_);
    for (size_t j = 0; j < wanted_index_.size(); ++j) {
      const std::string_view text = Field(static_cast<size_t>(wanted_index_[j]));
      Column& column = out->columns[j];
      bool present = !text.empty();
      switch (column.type) {
        case ColumnType::kString:
          column.AppendString(text, present);
          break;
        case ColumnType::kInt64: {
          int64_t value = 0;
          if (present && !ParseInt64(text, &value)) {
            Fail(path_, ":", record_line_, ": column '", column.name, "': '", Printable(text),
                 "' is not an integer");
          }
          column.ints.push_back(value);
          column.valid.push_back(present);
          break;
        }
        case ColumnType::kDouble: {
          double value = 0;
          if (present && !ParseDouble(text, &value)) {
            Fail(path_, ":", record_line_, ": column '", column.name, "': '", Printable(text),
                 "' is not a number");
          }
          column.doubles.push_back(value);
          column.valid.push_back(present);
          break;
        }
      }
    }
  }
  return !out->line_numbers.empty();
}

std::string CsvField(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace tzrec
