// Thrift compact protocol: the encoding of Parquet's file footer and page headers.
//
// Only what Parquet metadata uses. The reader trusts nothing: every read is bounds-checked,
// container sizes are checked against the bytes left (so a corrupt length cannot trigger a
// huge allocation), nesting depth is limited (so hostile input cannot exhaust the stack), and
// fields a decoder does not know are skipped, which keeps us compatible with newer writers.
// Failures throw tzrec::Error with a bare description; callers add the file name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tzrec {
namespace parquet {

// Wire types of the compact protocol.
enum ThriftType : uint8_t {
  kThriftStop = 0,
  kThriftTrue = 1,  // a bool field's value is carried in its type nibble
  kThriftFalse = 2,
  kThriftByte = 3,
  kThriftI16 = 4,
  kThriftI32 = 5,
  kThriftI64 = 6,
  kThriftDouble = 7,
  kThriftBinary = 8,
  kThriftList = 9,
  kThriftSet = 10,
  kThriftMap = 11,
  kThriftStruct = 12,
};

class ThriftCompactReader {
 public:
  ThriftCompactReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  // Struct traversal: BeginStruct(), then NextField() until it returns false (stop byte).
  void BeginStruct();
  bool NextField(int16_t* field_id, uint8_t* wire_type);

  // Field values; `wire_type` is what NextField reported, checked against the expected type
  // so a corrupt header cannot make us misread the bytes that follow.
  bool ReadBool(uint8_t wire_type);
  int32_t ReadI32(uint8_t wire_type);
  int64_t ReadI64(uint8_t wire_type);
  std::string ReadString(uint8_t wire_type);
  // Returns the element count; every element takes at least one byte, so the count is
  // bounded by the bytes left.
  uint32_t ReadListHeader(uint8_t wire_type, uint8_t* element_type);
  // List elements (no field header).
  int32_t ReadListI32(uint8_t element_type);
  std::string ReadListString(uint8_t element_type);

  // Fails unless `wire_type` is `expected` (`what` names it in the message).
  void Expect(uint8_t wire_type, uint8_t expected, const char* what);
  void Skip(uint8_t wire_type);
  size_t position() const { return pos_; }

 private:
  uint8_t ReadByte();
  uint64_t ReadVarint();
  int64_t ReadZigZag() {
    uint64_t raw = ReadVarint();
    return static_cast<int64_t>(raw >> 1) ^ -static_cast<int64_t>(raw & 1);
  }
  void SkipDepth(uint8_t wire_type, int depth);

  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  // Last field id of every open struct: field ids are delta-encoded within a struct.
  std::vector<int16_t> last_field_ids_;
};

class ThriftCompactWriter {
 public:
  void BeginStruct();
  void EndStruct();  // writes the stop byte
  void FieldBool(int16_t id, bool value);
  void FieldI32(int16_t id, int32_t value);
  void FieldI64(int16_t id, int64_t value);
  void FieldString(int16_t id, std::string_view value);
  void FieldStructBegin(int16_t id);  // then fields, then EndStruct()
  void FieldListBegin(int16_t id, uint8_t element_type, size_t size);
  void ListI32(int32_t value) { WriteZigZag(value); }
  void ListString(std::string_view value);
  // A list element that is a struct: BeginStruct() ... EndStruct().

  const std::string& bytes() const { return out_; }
  std::string Release() { return std::move(out_); }

 private:
  void FieldHeader(int16_t id, uint8_t wire_type);
  void WriteVarint(uint64_t value);
  void WriteZigZag(int64_t value) {
    WriteVarint((static_cast<uint64_t>(value) << 1) ^ static_cast<uint64_t>(value >> 63));
  }

  std::string out_;
  std::vector<int16_t> last_field_ids_;
};

}  // namespace parquet
}  // namespace tzrec
