// EmbeddingGroup: a view that turns a model config's feature groups into model inputs
// (TorchEasyRec's EmbeddingGroup). The tables live in the model's EmbeddingCollection; a view
// only registers the tables and lookups its groups need.
//
// DEEP groups concatenate, in feature_names order, the pooled embedding of each sparse feature
// and the raw values of each dense feature -> "<group>" [B, total_dim]. WIDE groups hold sparse
// features only, each looked up in its own "<embedding_name>_wide" table of `wide_embedding_dim`
// columns.
//
// SEQUENCE groups (and the `sequence_groups` nested in a DEEP group; a single unnamed one takes
// its parent's name) give three inputs:
//   "<g>.query"           [B, Dq]    the group's non-sequence features, concatenated
//   "<g>.sequence"        [B, T, Ds] its sequence features side by side, zero-padded to the
//                                    batch's longest sequence T (JAGGED_SEQUENCE: [sum T, Ds])
//   "<g>.sequence_length" int64 [B]  steps of the group's first sequence feature
// Sparse features of sequence groups use tables of their own ("<embedding_name>.seq"), apart
// from the pooled tables of DEEP/WIDE groups, as TorchEasyRec's EmbeddingCollection is apart
// from its EmbeddingBagCollection; a step with several ids is pooled by the feature's pooling.
// What a DEEP group's nested sequence groups are encoded with is the model's business
// (modules/sequence_encoder.h): this view only names them (NestedSequenceGroups).
//
// `embedding_name_suffix` of a group or nested sequence group appends "_<suffix>" to its table
// names (separate tables). A model that needs separate tables per tower (DSSM) gives each
// tower's view its own `table_prefix`. Not thread-safe (one per model).
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <vector>

#include "tzrec/embedding/dense_embedding.h"
#include "tzrec/embedding/embedding_collection.h"
#include "tzrec/embedding/table_quantization.h"
#include "tzrec/features/feature.h"
#include "tzrec/protos/model.pb.h"
#include "tzrec/script/script_writer.h"

namespace tzrec {

// Suffix of the tables of sequence groups.
constexpr char kSequenceTableSuffix[] = ".seq";

// [N, D] rows of `lengths` [B] consecutive runs -> [B, T, D], zero after each run's length
// (differentiable). T = max_length when given (>= every length), else the longest run.
at::Tensor PadJagged(const at::Tensor& values, const at::Tensor& lengths, int64_t max_length = -1);

// A table as a scripted model stores it (serving's export: maybe quantised, table_quantization.h).
struct StoredTable {
  at::Tensor stored;
  TableDtype dtype = TableDtype::kFP32;
  int64_t dim = 0;
};
using StoredTables = std::map<std::string, StoredTable>;  // by table name

class EmbeddingGroup {
 public:
  struct Options {
    int wide_embedding_dim = 4;
    std::string table_prefix;  // prepended to every table name of this view
    std::string where = "model_config.feature_groups";  // config path of `groups` in errors
    // SEQUENCE groups may hold query features only and then give only "<g>.query" (TDM's
    // exported item embedding: the sequence group's query side, its tables named as in the
    // whole model).
    bool query_only_sequence_groups = false;
    // Where dense features' autodis / mlp embeddings get their parameters (the model's
    // module; required when a group holds such a feature), keyed table_prefix + feature name.
    DenseEmbeddingsImpl* dense_embeddings = nullptr;
  };
  EmbeddingGroup(EmbeddingCollection* collection, const std::vector<const Feature*>& features,
                 const google::protobuf::RepeatedPtrField<protos::FeatureGroupConfig>& groups,
                 Options options);

  // DEEP and WIDE groups (the pooled ones).
  bool HasGroup(const std::string& name) const { return groups_.count(name) > 0; }
  // Output width of each feature of a DEEP/WIDE group, in order.
  std::vector<int> GroupDims(const std::string& name) const;
  int GroupTotalDim(const std::string& name) const;
  // Every group of the config in order, pooled and sequence ones (not the nested ones).
  const std::vector<std::string>& group_names() const { return group_order_; }

  // Sequence groups: top-level SEQUENCE / JAGGED_SEQUENCE groups and nested ones.
  bool HasSequenceGroup(const std::string& name) const { return sequence_groups_.count(name) > 0; }
  int QueryDim(const std::string& sequence_group) const;
  int SequenceDim(const std::string& sequence_group) const;
  // The nested sequence groups of DEEP group `name`, in config order.
  const std::vector<std::string>& NestedSequenceGroups(const std::string& name) const;

  // {input name: tensor} from one Lookup of the collection (see the top of this file).
  std::map<std::string, at::Tensor> Forward(const LookupOutputs& lookups, const Batch& batch) const;
  // Forward as TorchScript (script/script_writer.h) over the generated feature inputs:
  // {input name: local}, the same names as Forward's. Tables come from `tables`;
  // JAGGED_SEQUENCE groups have no TorchScript form yet (ScriptUnsupported).
  std::map<std::string, std::string> Script(ScriptWriter& w, const StoredTables& tables) const;

 private:
  struct Member {
    const Feature* feature;
    int lookup = -1;  // pooled (or, in a sequence part, sequence) lookup; -1: dense feature
    int dim = 0;
    std::string table;  // its table's name (sparse features)
    std::string dense_key;  // dense features with an autodis / mlp embedding
  };
  struct SequenceGroup {
    std::vector<Member> query;
    std::vector<Member> sequence;
    bool jagged = false;
  };
  const std::vector<Member>& Members(const std::string& name) const;
  const SequenceGroup& SequenceGroupOf(const std::string& name) const;
  void AddSequenceGroup(EmbeddingCollection* collection, const std::map<std::string, const Feature*>& by_name,
                        const std::string& name,
                        const google::protobuf::RepeatedPtrField<std::string>& feature_names,
                        const std::string& suffix, bool jagged, const Options& options,
                        const std::string& where);
  // Concatenation of pooled members (neighbouring lookups of one storage output as one slice).
  at::Tensor ConcatPooled(const std::vector<Member>& members, const LookupOutputs& lookups,
                          const Batch& batch) const;
  // A dense member's input: its values, or their autodis / mlp embedding.
  at::Tensor DenseInput(const Member& member, const at::Tensor& values) const;
  // Fills member.dim (and dense_key) of a dense feature.
  void AddDenseMember(Member* member, const Options& options);
  void ForwardSequence(const std::string& name, const SequenceGroup& group, const LookupOutputs& lookups,
                       const Batch& batch, std::map<std::string, at::Tensor>* out) const;

  std::map<std::string, std::vector<Member>> groups_;
  std::map<std::string, SequenceGroup> sequence_groups_;
  std::map<std::string, std::vector<std::string>> nested_;
  std::vector<std::string> group_order_;
  std::vector<std::string> sequence_order_;
  DenseEmbeddingsImpl* dense_embeddings_ = nullptr;
};

}  // namespace tzrec
