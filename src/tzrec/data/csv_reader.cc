#include "tzrec/data/csv_reader.h"

#include <emmintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

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
    : path_(std::move(path)), options_(std::move(options)), buffer_(kBufferBytes + kCopySlack) {
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
  buffer_len_ = std::fread(buffer_.data(), 1, kBufferBytes, file_);
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
  // One stop byte (delimiter, quote, CR or LF) at p: true to go on scanning; false once the
  // record is complete (*done) or must take the full loop (quote, CR, over the size cap).
  bool done = false;
  auto stop_at = [&](const char* p) {
    if (*p == delim) {
      field_ends_.push_back(static_cast<uint32_t>(p - begin));
      return true;
    }
    if (*p != '\n' || p - begin + 1 > options_.max_record_bytes) return false;
    field_ends_.push_back(static_cast<uint32_t>(p - begin));
    record_text_ = std::string_view(begin, static_cast<size_t>(p - begin));
    separator_width_ = 1;
    buffer_pos_ += static_cast<size_t>(p - begin) + 1;
    ++line_;
    done = true;
    return false;
  };
  // 16 bytes at a time (SSE2, in every x86-64): the stop bytes' positions as a bit mask, so
  // the bytes between them (most of a record) are not looked at one by one.
  const char* p = begin;
  const __m128i delims = _mm_set1_epi8(delim), quotes = _mm_set1_epi8('"');
  const __m128i crs = _mm_set1_epi8('\r'), lfs = _mm_set1_epi8('\n');
  for (; end - p >= 16; p += 16) {
    const __m128i chunk = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i stops = _mm_or_si128(
        _mm_or_si128(_mm_cmpeq_epi8(chunk, delims), _mm_cmpeq_epi8(chunk, quotes)),
        _mm_or_si128(_mm_cmpeq_epi8(chunk, crs), _mm_cmpeq_epi8(chunk, lfs)));
    for (unsigned mask = static_cast<unsigned>(_mm_movemask_epi8(stops)); mask != 0; mask &= mask - 1) {
      if (!stop_at(p + __builtin_ctz(mask))) {
        if (!done) field_ends_.clear();
        return done;
      }
    }
  }
  for (; p < end; ++p) {
    if (!(stop_[static_cast<unsigned char>(*p)] & kStopUnquoted)) continue;
    if (!stop_at(p)) {
      if (!done) field_ends_.clear();
      return done;
    }
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
  // String columns are written through a cursor into text grown ahead of it (trimmed at the
  // end): a cell of a record in the read buffer is copied as one fixed 16-byte move, which
  // the slack after both ends allows, instead of a string append per cell.
  std::vector<size_t> text_used(wanted_index_.size(), 0);
  for (size_t j = 0; j < wanted_index_.size(); ++j) {
    out->columns[j].name = names_[wanted_index_[j]];
    out->columns[j].type = wanted_type_[j];
    if (wanted_type_[j] == ColumnType::kString) {
      out->columns[j].chars.resize(std::min<size_t>(max_rows, 1 << 16) * 8 + kCopySlack);
      out->columns[j].offsets.reserve(std::min<size_t>(max_rows, 1 << 16) + 1);
      out->columns[j].valid.reserve(std::min<size_t>(max_rows, 1 << 16));
    }
  }
  while (out->line_numbers.size() < max_rows && ReadRecord()) {
    if (field_ends_.size() != names_.size()) {
      Fail(path_, ":", record_line_, ": expected ", names_.size(), " columns, got ", field_ends_.size());
    }
    out->line_numbers.push_back(record_line_);
    const bool in_buffer = separator_width_ == 1;
    for (size_t j = 0; j < wanted_index_.size(); ++j) {
      const std::string_view text = Field(static_cast<size_t>(wanted_index_[j]));
      Column& column = out->columns[j];
      bool present = !text.empty();
      switch (column.type) {
        case ColumnType::kString: {
          size_t& used = text_used[j];
          if (used + text.size() > std::numeric_limits<uint32_t>::max()) {
            Fail(path_, ":", record_line_, ": column '", column.name, "' holds over 4 GiB of text "
                 "in one batch; use a smaller batch_size");
          }
          if (used + text.size() + kCopySlack > column.chars.size()) {
            column.chars.resize(std::max(used + text.size() + kCopySlack, 2 * column.chars.size()));
          }
          char* to = &column.chars[used];
          if (in_buffer && text.size() <= kCopySlack) {
            std::memcpy(to, text.data(), kCopySlack);
          } else {
            std::memcpy(to, text.data(), text.size());
          }
          used += text.size();
          column.offsets.push_back(static_cast<uint32_t>(used));
          column.valid.push_back(present ? 1 : 0);
          break;
        }
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
  for (size_t j = 0; j < wanted_index_.size(); ++j) {
    if (wanted_type_[j] == ColumnType::kString) out->columns[j].chars.resize(text_used[j]);
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
