// Features: what each entry of `feature_configs` means for data parsing and embeddings.
//
// A Feature knows whether it is sparse (ids into an embedding table) or dense (float vector),
// its table shape and pooling, and how to parse its FG-encoded column (FG_NONE data) into a
// ParsedBatch. What a feature config means (sparse or not, rows, value_dim, inputs) is decided
// once by fg::DescribeFeatures, shared with feature generation, so FG output and FG_NONE
// parsing cannot disagree. Immutable after construction; safe from many reader threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tzrec/data/parsed_batch.h"
#include "tzrec/data/record_batch.h"
#include "tzrec/protos/data.pb.h"
#include "tzrec/fg/feature_info.h"
#include "tzrec/protos/feature.pb.h"

namespace tzrec {

// The widest embedding a feature may ask for.
constexpr int kMaxEmbeddingDim = 1 << 16;

// The data group of features that read a negative sampler's attributes.
inline constexpr char kNegDataGroup[] = "__NEG__";

// How an embedding table stores its weights (config `data_type`): fp32, IEEE half or
// bfloat16; the optimizer state is fp32 in all three.
enum class TableDataType { kFP32, kFP16, kBF16 };
inline const char* TableDataTypeName(TableDataType type) {
  return type == TableDataType::kFP16 ? "FP16" : type == TableDataType::kBF16 ? "BF16" : "FP32";
}

struct FeatureContext {
  protos::FgMode fg_mode = protos::FG_NONE;
  std::string multival_sep = "\x03";  // data_config.fg_encoded_multival_sep
  std::string config_path;            // e.g. "feature_configs[3].id_feature" for errors
  std::string data_group = "__BASE__";  // "__NEG__": an item feature the sampler fills too
  bool negative = false;  // reads a negative sampler's attr_fields (also under force_base_data_group)
};

// A dense feature's learned embedding (config oneof dense_emb), TorchEasyRec's
// DenseEmbeddingCollection: `mlp` projects the values linearly to embedding_dim; `autodis`
// (Guo et al. 2021) softly assigns a single value to num_channels meta-embeddings.
struct DenseEmbeddingSpec {
  enum class Kind { kNone, kMlp, kAutoDis } kind = Kind::kNone;
  int num_channels = 0;
  float temperature = 0.1f;
  float keep_prob = 0.8f;
};

class Feature {
 public:
  Feature(const fg::FeatureInfo& info, FeatureContext context);

  const std::string& name() const { return name_; }
  const std::string& config_path() const { return context_.config_path; }
  const std::string& type() const { return type_; }
  // Data group of the batch holding this feature: "__BASE__", or "__NEG__" for features that
  // read a negative sampler's attr_fields (their rows: the batch's, then the sampled items').
  const std::string& data_group() const { return data_group_; }
  // Reads a negative sampler's attributes: the sampled items' rows follow the batch's.
  bool negative() const { return context_.negative; }

  bool is_sparse() const { return is_sparse_; }
  // Sequence features ([B, T] steps per row); sparse ones may have several ids per step.
  bool is_sequence() const { return is_sequence_; }
  const std::string& sequence_delim() const { return sequence_delim_; }
  // Ids carry weights ("id:weight").
  bool weighted() const { return weighted_; }
  // Sparse features: embedding table rows, dim, shared table name and pooling.
  int64_t num_embeddings() const { return num_embeddings_; }
  // zch features: ids are raw int64 values that a managed-collision index maps to rows.
  const fg::ZchSpec* zch() const { return zch_ ? &*zch_ : nullptr; }
  // dynamicemb features: ids are raw int64 values that a dynamic table maps to rows.
  const fg::DynamicEmbSpec* dynamicemb() const { return dynamicemb_ ? &*dynamicemb_ : nullptr; }
  // Encoded ids must lie in [0, id_limit()): num_embeddings, or 2^63 - 1 for zch / dynamicemb.
  int64_t id_limit() const { return id_limit_; }
  int embedding_dim() const { return embedding_dim_; }
  const std::string& embedding_name() const { return embedding_name_; }
  const std::string& pooling() const { return pooling_; }
  // false: the embedding table is frozen (config `trainable: false`).
  bool trainable() const { return trainable_; }
  // Config `data_type`: how the embedding table stores its weights.
  TableDataType table_data_type() const { return table_data_type_; }
  // Dense features: floats per row.
  int value_dim() const { return value_dim_; }
  // Dense features with an autodis / mlp embedding (embedding_dim wide in a group).
  const DenseEmbeddingSpec& dense_embedding() const { return dense_embedding_; }
  // Width of this feature inside a DEEP group vector.
  int output_dim() const {
    return is_sparse_ || dense_embedding_.kind != DenseEmbeddingSpec::Kind::kNone ? embedding_dim_
                                                                                   : value_dim_;
  }

  // Parses this feature's FG-encoded column of `batch` (FG_NONE data) and adds it to `out`.
  void ParseEncoded(const RecordBatch& batch, ParsedBatch* out) const;

 private:
  void ParseSparse(const RecordBatch& batch, const Column& column, SparseValues* out) const;
  void ParseDense(const RecordBatch& batch, const Column& column, DenseValues* out) const;
  // Appends the ids (and weights) of one encoded value; returns how many.
  int32_t AppendIds(const RecordBatch& batch, size_t row, std::string_view text,
                    std::string_view separator, SparseValues* out) const;
  int32_t AppendFloats(const RecordBatch& batch, size_t row, std::string_view text,
                       std::string_view separator, DenseValues* out) const;
  void ParseDenseEmbedding(const google::protobuf::Message& msg);
  [[noreturn]] void FailRow(const RecordBatch& batch, size_t row, const std::string& what) const;

  FeatureContext context_;
  std::string name_;
  std::string type_;
  std::string data_group_;
  bool is_sparse_ = false;
  bool is_sequence_ = false;
  std::string sequence_delim_;
  bool weighted_ = false;
  int64_t num_embeddings_ = 0;
  std::optional<fg::ZchSpec> zch_;
  std::optional<fg::DynamicEmbSpec> dynamicemb_;
  int64_t id_limit_ = 0;  // ids of the data must be below it
  int embedding_dim_ = 0;
  std::string embedding_name_;
  std::string pooling_ = "sum";
  bool trainable_ = true;
  TableDataType table_data_type_ = TableDataType::kFP32;
  int value_dim_ = 1;
  DenseEmbeddingSpec dense_embedding_;
  bool has_default_ = false;
  std::vector<int64_t> default_ids_;
  std::vector<float> default_floats_;
};

// Builds all features of a pipeline config (grouped sequences expanded), checking names are
// unique and every field is supported. As TorchEasyRec's create_features: with a negative
// sampler (not tdm_sampler), features whose inputs include one of its attr_fields go to
// "__NEG__", unless data_config.force_base_data_group keeps every feature in "__BASE__".
std::vector<std::unique_ptr<Feature>> CreateFeatures(
    const google::protobuf::RepeatedPtrField<protos::FeatureConfig>& configs,
    const protos::DataConfig& data_config);

}  // namespace tzrec
