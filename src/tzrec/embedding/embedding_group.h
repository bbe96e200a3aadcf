// EmbeddingGroup: a view that turns a model config's feature groups into model inputs, one
// tensor per group (TorchEasyRec's EmbeddingGroup). The tables live in the model's
// EmbeddingCollection; a view only registers the tables and lookups its groups need.
//
// DEEP groups concatenate, in feature_names order, the pooled embedding of each sparse feature
// and the raw values of each dense feature -> [B, total_dim]. WIDE groups hold sparse features
// only, each looked up in its own "<embedding_name>_wide" table of `wide_embedding_dim`
// columns. A model that needs separate tables per tower (DSSM) gives each tower's view its own
// `table_prefix`. Not thread-safe (one per model).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "tzrec/embedding/embedding_collection.h"
#include "tzrec/features/feature.h"
#include "tzrec/protos/model.pb.h"

namespace tzrec {

class EmbeddingGroup {
 public:
  struct Options {
    int wide_embedding_dim = 4;
    std::string table_prefix;  // prepended to every table name of this view
    std::string where = "model_config.feature_groups";  // config path of `groups` in errors
  };
  EmbeddingGroup(EmbeddingCollection* collection, const std::vector<const Feature*>& features,
                 const google::protobuf::RepeatedPtrField<protos::FeatureGroupConfig>& groups,
                 Options options);

  bool HasGroup(const std::string& name) const { return groups_.count(name) > 0; }
  // Output width of each feature of a group, in order.
  std::vector<int> GroupDims(const std::string& name) const;
  int GroupTotalDim(const std::string& name) const;
  const std::vector<std::string>& group_names() const { return group_order_; }

  // {group_name: [B, total_dim]} from one Lookup of the collection.
  std::map<std::string, at::Tensor> Forward(const LookupOutputs& lookups, const Batch& batch) const;

 private:
  struct Member {
    const Feature* feature;
    int lookup = -1;  // index of the collection's lookup, -1 for dense features
    int dim = 0;
  };
  const std::vector<Member>& Members(const std::string& name) const;

  std::map<std::string, std::vector<Member>> groups_;
  std::vector<std::string> group_order_;
};

}  // namespace tzrec
