#include "tzrec/data/parquet/thrift_compact.h"

#include <cstring>

#include "tzrec/common/error.h"

namespace tzrec {
namespace parquet {
namespace {

// Parquet metadata nests a handful of levels; anything deeper is corrupt or hostile.
constexpr int kMaxDepth = 32;

const char* WireTypeName(uint8_t type) {
  switch (type) {
    case kThriftTrue:
    case kThriftFalse: return "bool";
    case kThriftByte: return "byte";
    case kThriftI16: return "i16";
    case kThriftI32: return "i32";
    case kThriftI64: return "i64";
    case kThriftDouble: return "double";
    case kThriftBinary: return "binary";
    case kThriftList: return "list";
    case kThriftSet: return "set";
    case kThriftMap: return "map";
    case kThriftStruct: return "struct";
    default: return "invalid";
  }
}

}  // namespace

uint8_t ThriftCompactReader::ReadByte() {
  if (pos_ >= size_) Fail("corrupt Thrift metadata: unexpected end after ", pos_, " bytes");
  return data_[pos_++];
}

uint64_t ThriftCompactReader::ReadVarint() {
  uint64_t result = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    uint8_t byte = ReadByte();
    result |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if (!(byte & 0x80)) return result;
  }
  Fail("corrupt Thrift metadata: varint longer than 10 bytes at byte ", pos_);
}

void ThriftCompactReader::Expect(uint8_t wire_type, uint8_t expected, const char* what) {
  bool ok = wire_type == expected ||
            (expected == kThriftTrue && (wire_type == kThriftTrue || wire_type == kThriftFalse));
  if (!ok) {
    Fail("corrupt Thrift metadata: expected ", what, " but found wire type ",
         WireTypeName(wire_type), " at byte ", pos_);
  }
}

void ThriftCompactReader::BeginStruct() {
  if (last_field_ids_.size() >= static_cast<size_t>(kMaxDepth)) {
    Fail("corrupt Thrift metadata: structs nested deeper than ", kMaxDepth);
  }
  last_field_ids_.push_back(0);
}

bool ThriftCompactReader::NextField(int16_t* field_id, uint8_t* wire_type) {
  TZREC_CHECK(!last_field_ids_.empty());
  uint8_t header = ReadByte();
  if (header == kThriftStop) {
    last_field_ids_.pop_back();
    return false;
  }
  *wire_type = header & 0x0f;
  if (*wire_type > kThriftStruct) {
    Fail("corrupt Thrift metadata: invalid wire type ", int(*wire_type), " at byte ", pos_);
  }
  int delta = header >> 4;
  int64_t id;
  if (delta != 0) {
    id = last_field_ids_.back() + delta;
  } else {
    id = ReadZigZag();
  }
  if (id < INT16_MIN || id > INT16_MAX) Fail("corrupt Thrift metadata: field id ", id);
  last_field_ids_.back() = static_cast<int16_t>(id);
  *field_id = static_cast<int16_t>(id);
  return true;
}

bool ThriftCompactReader::ReadBool(uint8_t wire_type) {
  Expect(wire_type, kThriftTrue, "bool");
  return wire_type == kThriftTrue;
}

int32_t ThriftCompactReader::ReadI32(uint8_t wire_type) {
  // Writers may widen or narrow enum-like integers; accept any integer width in range.
  if (wire_type == kThriftByte) return static_cast<int8_t>(ReadByte());
  if (wire_type != kThriftI16 && wire_type != kThriftI64) Expect(wire_type, kThriftI32, "i32");
  int64_t value = ReadZigZag();
  if (value < INT32_MIN || value > INT32_MAX) {
    Fail("corrupt Thrift metadata: i32 value ", value, " out of range at byte ", pos_);
  }
  return static_cast<int32_t>(value);
}

int64_t ThriftCompactReader::ReadI64(uint8_t wire_type) {
  if (wire_type == kThriftByte) return static_cast<int8_t>(ReadByte());
  if (wire_type != kThriftI16 && wire_type != kThriftI32) Expect(wire_type, kThriftI64, "i64");
  return ReadZigZag();
}

std::string ThriftCompactReader::ReadString(uint8_t wire_type) {
  Expect(wire_type, kThriftBinary, "binary");
  uint64_t length = ReadVarint();
  if (length > size_ - pos_) {
    Fail("corrupt Thrift metadata: string of ", length, " bytes at byte ", pos_, " but only ",
         size_ - pos_, " bytes left");
  }
  std::string value(reinterpret_cast<const char*>(data_ + pos_), length);
  pos_ += length;
  return value;
}

uint32_t ThriftCompactReader::ReadListHeader(uint8_t wire_type, uint8_t* element_type) {
  if (wire_type != kThriftSet) Expect(wire_type, kThriftList, "list");
  uint8_t header = ReadByte();
  *element_type = header & 0x0f;
  uint64_t size = header >> 4;
  if (size == 15) size = ReadVarint();
  if (size > size_ - pos_) {
    Fail("corrupt Thrift metadata: list of ", size, " elements at byte ", pos_, " but only ",
         size_ - pos_, " bytes left");
  }
  return static_cast<uint32_t>(size);
}

int32_t ThriftCompactReader::ReadListI32(uint8_t element_type) { return ReadI32(element_type); }

std::string ThriftCompactReader::ReadListString(uint8_t element_type) {
  return ReadString(element_type);
}

void ThriftCompactReader::Skip(uint8_t wire_type) { SkipDepth(wire_type, 0); }

void ThriftCompactReader::SkipDepth(uint8_t wire_type, int depth) {
  if (depth + last_field_ids_.size() > static_cast<size_t>(kMaxDepth)) {
    Fail("corrupt Thrift metadata: values nested deeper than ", kMaxDepth);
  }
  switch (wire_type) {
    case kThriftTrue:
    case kThriftFalse: return;  // value lives in the type nibble
    case kThriftByte: ReadByte(); return;
    case kThriftI16:
    case kThriftI32:
    case kThriftI64: ReadVarint(); return;
    case kThriftDouble:
      if (size_ - pos_ < 8) Fail("corrupt Thrift metadata: truncated double at byte ", pos_);
      pos_ += 8;
      return;
    case kThriftBinary: {
      uint64_t length = ReadVarint();
      if (length > size_ - pos_) Fail("corrupt Thrift metadata: binary overruns the buffer");
      pos_ += length;
      return;
    }
    case kThriftList:
    case kThriftSet: {
      uint8_t element_type;
      uint32_t count = ReadListHeader(wire_type, &element_type);
      for (uint32_t i = 0; i < count; ++i) {
        // Bools inside containers take a whole byte, unlike bool fields.
        if (element_type == kThriftTrue || element_type == kThriftFalse) {
          ReadByte();
        } else {
          SkipDepth(element_type, depth + 1);
        }
      }
      return;
    }
    case kThriftMap: {
      uint64_t count = ReadVarint();
      if (count == 0) return;
      if (count > size_ - pos_) Fail("corrupt Thrift metadata: map overruns the buffer");
      uint8_t types = ReadByte();
      for (uint64_t i = 0; i < count; ++i) {
        for (uint8_t type : {static_cast<uint8_t>(types >> 4), static_cast<uint8_t>(types & 15)}) {
          if (type == kThriftTrue || type == kThriftFalse) {
            ReadByte();
          } else {
            SkipDepth(type, depth + 1);
          }
        }
      }
      return;
    }
    case kThriftStruct: {
      BeginStruct();
      size_t open = last_field_ids_.size();
      int16_t id;
      uint8_t type;
      while (NextField(&id, &type)) SkipDepth(type, depth + 1);
      TZREC_CHECK(last_field_ids_.size() == open - 1);
      return;
    }
    default: Fail("corrupt Thrift metadata: invalid wire type ", int(wire_type), " at byte ", pos_);
  }
}

// ------------------------------------------------------------------------------- writer

void ThriftCompactWriter::WriteVarint(uint64_t value) {
  while (value >= 0x80) {
    out_.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out_.push_back(static_cast<char>(value));
}

void ThriftCompactWriter::FieldHeader(int16_t id, uint8_t wire_type) {
  int16_t& last = last_field_ids_.back();
  int delta = id - last;
  if (delta > 0 && delta <= 15) {
    out_.push_back(static_cast<char>((delta << 4) | wire_type));
  } else {
    out_.push_back(static_cast<char>(wire_type));
    WriteZigZag(id);
  }
  last = id;
}

void ThriftCompactWriter::BeginStruct() { last_field_ids_.push_back(0); }

void ThriftCompactWriter::EndStruct() {
  out_.push_back(static_cast<char>(kThriftStop));
  last_field_ids_.pop_back();
}

void ThriftCompactWriter::FieldBool(int16_t id, bool value) {
  FieldHeader(id, value ? kThriftTrue : kThriftFalse);
}

void ThriftCompactWriter::FieldI32(int16_t id, int32_t value) {
  FieldHeader(id, kThriftI32);
  WriteZigZag(value);
}

void ThriftCompactWriter::FieldI64(int16_t id, int64_t value) {
  FieldHeader(id, kThriftI64);
  WriteZigZag(value);
}

void ThriftCompactWriter::FieldString(int16_t id, std::string_view value) {
  FieldHeader(id, kThriftBinary);
  ListString(value);
}

void ThriftCompactWriter::ListString(std::string_view value) {
  WriteVarint(value.size());
  out_.append(value.data(), value.size());
}

void ThriftCompactWriter::FieldStructBegin(int16_t id) {
  FieldHeader(id, kThriftStruct);
  BeginStruct();
}

void ThriftCompactWriter::FieldListBegin(int16_t id, uint8_t element_type, size_t size) {
  FieldHeader(id, kThriftList);
  if (size < 15) {
    out_.push_back(static_cast<char>((size << 4) | element_type));
  } else {
    out_.push_back(static_cast<char>(0xf0 | element_type));
    WriteVarint(size);
  }
}

}  // namespace parquet
}  // namespace tzrec
