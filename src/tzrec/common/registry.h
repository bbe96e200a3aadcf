// Name -> factory registries for models, features, losses, metrics and optimizers.
//
// Components register themselves under their config oneof name with a static
// TZREC_REGISTER(...) object; lookups of an unknown name fail listing the known names.
// Registration happens during static initialisation (single-threaded); lookups afterwards
// are read-only and thread-safe.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tzrec/common/error.h"

namespace tzrec {

template <typename Factory>
class Registry {
 public:
  explicit Registry(std::string kind) : kind_(std::move(kind)) {}

  void Register(const std::string& name, Factory factory) {
    TZREC_CHECK(factories_.count(name) == 0, kind_, " '", name, "' registered twice");
    factories_.emplace(name, std::move(factory));
  }
  bool Has(const std::string& name) const { return factories_.count(name) > 0; }
  const Factory& Get(const std::string& name) const {
    auto it = factories_.find(name);
    if (it == factories_.end()) {
      Fail("unknown ", kind_, " '", name, "'; known: ", JoinNames());
    }
    return it->second;
  }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& kv : factories_) names.push_back(kv.first);
    return names;
  }
  std::string JoinNames() const {
    std::string joined;
    for (const auto& kv : factories_) joined += (joined.empty() ? "" : ", ") + kv.first;
    return joined;
  }

 private:
  std::string kind_;
  std::map<std::string, Factory> factories_;
};

}  // namespace tzrec
