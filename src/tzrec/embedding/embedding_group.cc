#include "tzrec/embedding/embedding_group.h"

#include <ATen/ops/cat.h>

#include "tzrec/common/error.h"

namespace tzrec {

EmbeddingGroup::EmbeddingGroup(
    EmbeddingCollection* collection, const std::vector<const Feature*>& features,
    const google::protobuf::RepeatedPtrField<protos::FeatureGroupConfig>& groups, Options options) {
  std::map<std::string, const Feature*> by_name;
  for (const Feature* f : features) by_name[f->name()] = f;
  for (int g = 0; g < groups.size(); ++g) {
    const auto& group = groups.Get(g);
    std::string where = StrCat(options.where, "[", g, "]");
    if (group.group_type() != protos::DEEP && group.group_type() != protos::WIDE) {
      Fail(where, ".group_type: ", protos::FeatureGroupType_Name(group.group_type()),
           " not supported yet (supported: DEEP, WIDE)");
    }
    if (groups_.count(group.group_name())) {
      Fail(where, ".group_name: duplicate group '", group.group_name(), "'");
    }
    if (group.feature_names_size() == 0) Fail(where, ".feature_names is empty");
    const bool wide = group.group_type() == protos::WIDE;
    std::vector<Member> members;
    for (const auto& feature_name : group.feature_names()) {
      auto it = by_name.find(feature_name);
      if (it == by_name.end()) Fail(where, ".feature_names: unknown feature '", feature_name, "'");
      const Feature* feature = it->second;
      if (feature->is_sequence()) {
        Fail(where, ": sequence feature '", feature_name, "' in a ", wide ? "WIDE" : "DEEP",
             " group is not supported yet (sequence groups and encoders are not implemented)");
      }
      Member member;
      member.feature = feature;
      if (feature->is_sparse()) {
        const int dim = wide ? options.wide_embedding_dim : feature->embedding_dim();
        const std::string table_name =
            options.table_prefix + feature->embedding_name() + (wide ? "_wide" : "");
        const int table = collection->AddTable(table_name, feature->num_embeddings(), dim,
                                               feature->trainable(), feature->name(),
                                               where + " feature '" + feature_name + "'");
        member.lookup = collection->AddLookup(feature, table);
        member.dim = dim;
      } else {
        if (wide) Fail(where, ": WIDE groups take sparse features only, '", feature_name, "' is dense");
        member.dim = feature->value_dim();
      }
      members.push_back(member);
    }
    groups_[group.group_name()] = std::move(members);
    group_order_.push_back(group.group_name());
  }
}

const std::vector<EmbeddingGroup::Member>& EmbeddingGroup::Members(const std::string& name) const {
  auto it = groups_.find(name);
  if (it == groups_.end()) Fail("model needs feature group '", name, "' which the config lacks");
  return it->second;
}

std::vector<int> EmbeddingGroup::GroupDims(const std::string& name) const {
  std::vector<int> dims;
  for (const auto& m : Members(name)) dims.push_back(m.dim);
  return dims;
}

int EmbeddingGroup::GroupTotalDim(const std::string& name) const {
  int total = 0;
  for (const auto& m : Members(name)) total += m.dim;
  return total;
}

std::map<std::string, at::Tensor> EmbeddingGroup::Forward(const LookupOutputs& lookups,
                                                          const Batch& batch) const {
  std::map<std::string, at::Tensor> out;
  for (const auto& name : group_order_) {
    // Neighbouring features that are neighbours in a storage output become one slice: every
    // slice costs a full-size gradient buffer in backward, so fewer slices is much faster.
    std::vector<at::Tensor> parts;
    int run_storage = -1, run_begin = 0, run_end = 0;
    auto flush = [&]() {
      if (run_storage < 0) return;
      const at::Tensor& full = lookups.storage_out[run_storage];
      const int64_t dim = lookups.storage_dim[run_storage];
      parts.push_back(run_begin == 0 && run_end * dim == full.size(1)
                          ? full
                          : full.narrow(1, run_begin * dim, (run_end - run_begin) * dim));
      run_storage = -1;
    };
    for (const auto& m : groups_.at(name)) {
      if (m.lookup >= 0) {
        const int s = lookups.storage_of[m.lookup], k = lookups.position_of[m.lookup];
        if (s == run_storage && k == run_end) {
          ++run_end;
          continue;
        }
        flush();
        run_storage = s;
        run_begin = k;
        run_end = k + 1;
      } else {
        flush();
        parts.push_back(batch.Dense(m.feature->name(), m.feature->data_group()));
      }
    }
    flush();
    out[name] = parts.size() == 1 ? parts[0] : at::cat(parts, 1);
  }
  return out;
}

}  // namespace tzrec
