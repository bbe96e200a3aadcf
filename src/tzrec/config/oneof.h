// Resolving a config oneof against the registry of its members: which member is set, with the
// errors every registry-backed slot gives alike. Stateless; thread-safe.
#pragma once

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <string>

#include "tzrec/common/error.h"
#include "tzrec/common/registry.h"

namespace tzrec {

// The member set in oneof `oneof` of `msg`, or nullptr.
inline const google::protobuf::FieldDescriptor* SetOneofMember(const google::protobuf::Message& msg,
                                                               const std::string& oneof) {
  const auto* decl = msg.GetDescriptor()->FindOneofByName(oneof);
  return decl ? msg.GetReflection()->GetOneofFieldDescriptor(msg, decl) : nullptr;
}

// The set member of `oneof`, which `registry` must know. Fails "<where>: no <oneof> set
// (supported: ...)" (unless !required: then nullptr) or "<where>.<member>: not supported yet
// (supported: ...)".
template <typename Factory>
const google::protobuf::FieldDescriptor* RegisteredOneofMember(const google::protobuf::Message& msg,
                                                               const std::string& oneof,
                                                               const Registry<Factory>& registry,
                                                               const std::string& where,
                                                               bool required = true) {
  const auto* member = SetOneofMember(msg, oneof);
  if (!member) {
    if (!required) return nullptr;
    Fail(where, ": no ", oneof, " set (supported: ", registry.JoinNames(), ")");
  }
  if (!registry.Has(member->name())) {
    Fail(where, ".", member->name(), ": not supported yet (supported: ", registry.JoinNames(), ")");
  }
  return member;
}

}  // namespace tzrec
