#include "tzrec/common/registry.h"

namespace tzrec {

HonouredFields& HonouredFields::Global() {
  static HonouredFields table;
  return table;
}

void HonouredFields::Add(const ConfigSlot& slot, const std::string& member,
                         std::vector<std::string> fields) {
  if (!slot.enum_field.empty()) {
    enum_slots_[slot.message_type][slot.enum_field][member] = std::move(fields);
  } else {
    oneof_slots_[slot.message_type + "/" + slot.oneof][member] = std::move(fields);
  }
}

const HonouredFields::Members* HonouredFields::OneofMembers(const std::string& message_type,
                                                            const std::string& oneof) const {
  auto it = oneof_slots_.find(message_type + "/" + oneof);
  return it == oneof_slots_.end() ? nullptr : &it->second;
}

std::map<std::string, const HonouredFields::Members*> HonouredFields::EnumSlots(
    const std::string& message_type) const {
  std::map<std::string, const Members*> out;
  auto it = enum_slots_.find(message_type);
  if (it == enum_slots_.end()) return out;
  for (const auto& kv : it->second) out[kv.first] = &kv.second;
  return out;
}

std::vector<std::string> HonouredFields::OneofSlotKeys() const {
  std::vector<std::string> keys;
  for (const auto& kv : oneof_slots_) keys.push_back(kv.first);
  return keys;
}

}  // namespace tzrec
