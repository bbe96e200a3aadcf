// Name -> factory registries for every pluggable kind (models, feature types, losses, metrics,
// train metrics, dense and sparse optimizers, learning-rate schedules, dataset readers).
//
// A component registers itself under its config name (the oneof member name, or the enum value
// name for dataset readers) with one macro, declaring the config fields it honours:
//
//   TZREC_REGISTER(LossRegistry(), "binary_focal_loss", MakeFocalLoss, "gamma", "alpha");
//
// The fields are paths relative to the component's own config message ("deep.*" honours a
// whole sub-message). Registries that appear in the config name their slot (message type and
// oneof); the config checker (config/supported_fields.h) reads every slot's honoured fields
// from HonouredFields, so a config field is accepted exactly when the component that reads it
// says so, and a new component touches only its own file. Looking up an unknown name fails
// listing the known ones.
//
// Thread safety: registration happens during static initialisation (single-threaded);
// everything afterwards only reads and is thread-safe.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tzrec/common/error.h"

namespace tzrec {

// Where a registry's names appear in a config: member names of oneof `oneof` of the protobuf
// message `message_type` (full name, e.g. "tzrec.protos.LossConfig"), or, with `enum_field`
// set, values of that enum field of `message_type` (e.g. data_config.dataset_type).
struct ConfigSlot {
  std::string message_type;
  std::string oneof;
  std::string enum_field;
};

// Honoured fields of every registered component, by slot. Filled by Registry::Register.
class HonouredFields {
 public:
  static HonouredFields& Global();

  using Members = std::map<std::string, std::vector<std::string>>;
  void Add(const ConfigSlot& slot, const std::string& member, std::vector<std::string> fields);
  // Members of a oneof slot, or nullptr when no registry fills it.
  const Members* OneofMembers(const std::string& message_type, const std::string& oneof) const;
  // Members of an enum slot of `message_type` (field name -> members); empty when none.
  std::map<std::string, const Members*> EnumSlots(const std::string& message_type) const;
  // Every oneof slot, as "message_type/oneof".
  std::vector<std::string> OneofSlotKeys() const;

 private:
  std::map<std::string, Members> oneof_slots_;  // "message_type/oneof" -> members
  std::map<std::string, std::map<std::string, Members>> enum_slots_;  // type -> field -> members
};

template <typename Factory>
class Registry {
 public:
  // `kind` names the registry in errors ("unknown loss 'x'; known: ...").
  explicit Registry(std::string kind, std::vector<ConfigSlot> slots = {})
      : kind_(std::move(kind)), slots_(std::move(slots)) {}

  void Register(const std::string& name, Factory factory, std::vector<std::string> fields) {
    TZREC_CHECK(entries_.count(name) == 0, kind_, " '", name, "' registered twice");
    for (const ConfigSlot& slot : slots_) HonouredFields::Global().Add(slot, name, fields);
    entries_.emplace(name, Entry{std::move(factory), std::move(fields)});
  }
  bool Has(const std::string& name) const { return entries_.count(name) > 0; }
  const Factory& Get(const std::string& name) const {
    auto it = entries_.find(name);
    if (it == entries_.end()) Fail("unknown ", kind_, " '", name, "'; known: ", JoinNames());
    return it->second.factory;
  }
  const std::vector<std::string>& Fields(const std::string& name) const {
    auto it = entries_.find(name);
    if (it == entries_.end()) Fail("unknown ", kind_, " '", name, "'; known: ", JoinNames());
    return it->second.fields;
  }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& kv : entries_) names.push_back(kv.first);
    return names;
  }
  std::string JoinNames() const {
    std::string joined;
    for (const auto& kv : entries_) joined += (joined.empty() ? "" : ", ") + kv.first;
    return joined;
  }
  const std::string& kind() const { return kind_; }

 private:
  struct Entry {
    Factory factory;
    std::vector<std::string> fields;
  };
  std::string kind_;
  std::vector<ConfigSlot> slots_;
  std::map<std::string, Entry> entries_;
};

template <typename Factory, typename F>
bool RegisterIn(Registry<Factory>& registry, const std::string& name, F&& factory,
                std::vector<std::string> fields) {
  registry.Register(name, Factory(std::forward<F>(factory)), std::move(fields));
  return true;
}

}  // namespace tzrec

#define TZREC_REGISTRY_CONCAT_INNER(a, b) a##b
#define TZREC_REGISTRY_CONCAT(a, b) TZREC_REGISTRY_CONCAT_INNER(a, b)

// Registers FACTORY (a function or a lambda) under NAME in REGISTRY (an expression yielding a
// Registry&, e.g. `ModelRegistry()`); the remaining arguments are the honoured config fields.
#define TZREC_REGISTER(REGISTRY, NAME, FACTORY, ...)                               \
  [[maybe_unused]] static const bool TZREC_REGISTRY_CONCAT(tzrec_registered_, __COUNTER__) = \
      ::tzrec::RegisterIn(REGISTRY, NAME, FACTORY, std::vector<std::string>{__VA_ARGS__})
