// Reading a feature message's fields by name (protobuf reflection), shared by everything that
// handles the thirteen feature message types alike: bucketizers, feature descriptions, ops,
// create_fg_json. A field the message type lacks reads as unset / empty / false / 0.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <cstdint>
#include <string>

namespace tzrec::fg {

inline const google::protobuf::FieldDescriptor* FieldOf(const google::protobuf::Message& msg,
                                                        const char* name) {
  return msg.GetDescriptor()->FindFieldByName(name);
}

// Set (scalar) or non-empty (repeated).
inline bool HasField(const google::protobuf::Message& msg, const char* name) {
  const auto* f = FieldOf(msg, name);
  if (!f) return false;
  return f->is_repeated() ? msg.GetReflection()->FieldSize(msg, f) > 0
                          : msg.GetReflection()->HasField(msg, f);
}

// The value, or the proto default when unset.
inline std::string StringField(const google::protobuf::Message& msg, const char* name) {
  const auto* f = FieldOf(msg, name);
  return f && !f->is_repeated() ? msg.GetReflection()->GetString(msg, f) : std::string();
}

inline bool BoolField(const google::protobuf::Message& msg, const char* name) {
  const auto* f = FieldOf(msg, name);
  return f && !f->is_repeated() && msg.GetReflection()->GetBool(msg, f);
}

inline uint32_t UInt32Field(const google::protobuf::Message& msg, const char* name) {
  const auto* f = FieldOf(msg, name);
  return f && !f->is_repeated() ? msg.GetReflection()->GetUInt32(msg, f) : 0;
}

inline uint64_t UInt64Field(const google::protobuf::Message& msg, const char* name) {
  const auto* f = FieldOf(msg, name);
  return f && !f->is_repeated() ? msg.GetReflection()->GetUInt64(msg, f) : 0;
}

}  // namespace tzrec::fg
