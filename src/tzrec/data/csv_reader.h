// Streaming CSV reader producing RecordBatches (no LibTorch).
//
// RFC 4180 quoting ("a,b" and "" escapes, quoted newlines), \n or \r\n line ends, empty lines
// skipped, empty fields read as null. Columns come from the header (with_header) or from the
// declared input fields; declared INT32/INT64/FLOAT/DOUBLE columns are converted while
// reading and a bad number fails naming file, line and column. Only the wanted columns are
// materialised. A record longer than max_record_bytes (a file without line ends, such as
// /dev/zero) fails naming file and line instead of growing memory without bound. Not
// thread-safe; use one reader per thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tzrec/data/record_batch.h"

namespace tzrec {

// The environment variable that sets the CSV record cap, and its default (64 MiB).
constexpr char kCsvMaxRecordBytesEnv[] = "TZREC_CSV_MAX_RECORD_BYTES";
constexpr int64_t kDefaultCsvMaxRecordBytes = int64_t{64} << 20;
// TZREC_CSV_MAX_RECORD_BYTES when set (a positive integer, else an error), else the default.
int64_t CsvMaxRecordBytes();

struct CsvOptions {
  char delimiter = ',';
  bool with_header = false;
  // Column names in file order; required when !with_header. With a header, the header wins
  // and these only supply types.
  std::vector<std::string> column_names;
  std::map<std::string, ColumnType> column_types;  // absent = kString
  // Columns to materialise; empty = all.
  std::vector<std::string> wanted_columns;
  // The longest record (bytes, line ends and quotes included) accepted.
  int64_t max_record_bytes = CsvMaxRecordBytes();
};

class CsvFileReader {
 public:
  CsvFileReader(std::string path, CsvOptions options);
  ~CsvFileReader();
  CsvFileReader(const CsvFileReader&) = delete;
  CsvFileReader& operator=(const CsvFileReader&) = delete;

  // Reads up to `max_rows` rows into `out` (replacing its contents). Returns false when the
  // file is exhausted and no row was read.
  bool Next(size_t max_rows, RecordBatch* out);
  // Reads past the next `count` records without materialising them (resume); returns how
  // many there were.
  int64_t SkipRecords(int64_t count);
  const std::vector<std::string>& column_names() const { return names_; }

 private:
  bool ReadRecord();  // fills record_text_, field_ends_, record_line_; false at EOF
  // The common record - within the buffer, no quote, no CR - split where it lies (fields are
  // views into the buffer, valid until the next read); false leaves it to ReadRecord's loop.
  bool SplitPlainRecord();
  std::string_view Field(size_t i) const {
    const uint32_t begin = i == 0 ? 0 : field_ends_[i - 1] + separator_width_;
    return record_text_.substr(begin, field_ends_[i] - begin);
  }
  // Per-character access is the hot loop: inline, with the refill out of line.
  int Peek() {
    if (buffer_pos_ == buffer_len_ && !Refill()) return EOF;
    return static_cast<unsigned char>(buffer_[buffer_pos_]);
  }
  int Get() {
    if (buffer_pos_ == buffer_len_ && !Refill()) return EOF;
    return static_cast<unsigned char>(buffer_[buffer_pos_++]);
  }
  // Bytes from buffer_pos_ up to the buffer's end or the first one the state must look at
  // (kStopUnquoted: delimiter, quote, CR, LF; kStopQuoted: quote, LF): the field's ordinary
  // text, appended in one piece instead of a byte at a time.
  size_t PlainRun(uint8_t stop_mask) const {
    const char* begin = buffer_.data() + buffer_pos_;
    const char* end = buffer_.data() + buffer_len_;
    const char* p = begin;
    while (p < end && !(stop_[static_cast<unsigned char>(*p)] & stop_mask)) ++p;
    return static_cast<size_t>(p - begin);
  }
  static constexpr uint8_t kStopUnquoted = 1, kStopQuoted = 2;
  bool Refill();
  void CheckRecordSize() const;

  // Bytes read per refill, and the slack after them: a cell of up to kCopySlack bytes is
  // copied as one fixed-size move, which may read past the cell (into the slack at worst).
  static constexpr size_t kBufferBytes = size_t{1} << 20, kCopySlack = 16;

  std::string path_;
  CsvOptions options_;
  FILE* file_ = nullptr;
  std::vector<char> buffer_;
  size_t buffer_pos_ = 0;
  size_t buffer_len_ = 0;
  int64_t buffer_offset_ = 0;   // file offset of buffer_[0]
  int64_t record_offset_ = -1;  // file offset where the record being read starts; -1: none
  int64_t line_ = 1;
  uint8_t stop_[256] = {};  // kStop* bits per byte value
  // The record being read: its fields' text back to back, and where each ends (one string for
  // the record instead of one per field: fields are a few bytes and many).
  std::string record_;
  std::string_view record_text_;  // record_, or the record's bytes in the buffer
  uint32_t separator_width_ = 0;  // bytes between fields in record_text_: 0 in record_, 1 in place
  std::vector<uint32_t> field_ends_;
  int64_t record_line_ = 0;
  std::vector<std::string> names_;
  std::vector<int> wanted_index_;           // file column index of each output column
  std::vector<ColumnType> wanted_type_;
};

// Parses a delimiter setting: exactly one character (escape sequences already decoded by
// the config parser).
char ParseCsvDelimiter(const std::string& delimiter);

// `text` as one CSV cell of comma-separated output: quoted (quotes doubled) when it holds a
// comma, a quote or a line break, as CsvFileReader reads it back.
std::string CsvField(std::string_view text);

}  // namespace tzrec
