// Features: what each entry of `feature_configs` means for data parsing and embeddings.
//
// A Feature knows its input columns, whether it is sparse (ids into an embedding table) or
// dense (float vector), its table shape and pooling, and how to parse its column into a
// ParsedBatch. Feature types register by their config oneof name ("id_feature", ...).
// Features are immutable after construction and safe to use from many reader threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tzrec/common/registry.h"
#include "tzrec/data/parsed_batch.h"
#include "tzrec/data/record_batch.h"
#include "tzrec/protos/data.pb.h"
#include "tzrec/protos/feature.pb.h"

namespace tzrec {

struct FeatureContext {
  protos::FgMode fg_mode = protos::FG_NONE;
  std::string multival_sep = "\x03";  // data_config.fg_encoded_multival_sep
  std::string config_path;            // e.g. "feature_configs[3].id_feature" for errors
};

class Feature {
 public:
  virtual ~Feature() = default;

  const std::string& name() const { return name_; }
  const std::string& config_path() const { return context_.config_path; }
  virtual std::string type() const = 0;

  bool is_sparse() const { return is_sparse_; }
  // Sparse features: embedding table rows, dim, shared table name and pooling.
  int64_t num_embeddings() const { return num_embeddings_; }
  int embedding_dim() const { return embedding_dim_; }
  const std::string& embedding_name() const { return embedding_name_; }
  const std::string& pooling() const { return pooling_; }
  // false: the embedding table is frozen (config `trainable: false`).
  bool trainable() const { return trainable_; }
  // Dense features: floats per row.
  int value_dim() const { return value_dim_; }
  // Width of this feature inside a DEEP group vector.
  int output_dim() const { return is_sparse_ ? embedding_dim_ : value_dim_; }

  // Columns this feature reads under the current fg_mode.
  std::vector<std::string> input_columns() const { return {name_}; }

  // Parses this feature's column of `batch` (FG-encoded data) and adds it to `out`.
  void ParseEncoded(const RecordBatch& batch, ParsedBatch* out) const;

 protected:
  explicit Feature(FeatureContext context) : context_(std::move(context)) {}
  // Called by subclasses once the common fields are known.
  void InitSparse(const std::string& name, int64_t num_embeddings, int embedding_dim,
                  const std::string& embedding_name, const std::string& pooling,
                  const std::string& fg_encoded_default, bool trainable);
  void InitDense(const std::string& name, int value_dim, const std::string& fg_encoded_default);

 private:
  void ParseSparse(const RecordBatch& batch, const Column& column, SparseValues* out) const;
  void ParseDense(const RecordBatch& batch, const Column& column, DenseValues* out) const;
  [[noreturn]] void FailRow(const RecordBatch& batch, size_t row, const std::string& what) const;

  FeatureContext context_;
  std::string name_;
  bool is_sparse_ = false;
  int64_t num_embeddings_ = 0;
  int embedding_dim_ = 0;
  std::string embedding_name_;
  std::string pooling_ = "sum";
  bool trainable_ = true;
  int value_dim_ = 1;
  bool has_default_ = false;
  std::vector<int64_t> default_ids_;
  std::vector<float> default_floats_;
};

using FeatureFactory =
    std::function<std::unique_ptr<Feature>(const protos::FeatureConfig&, FeatureContext)>;
Registry<FeatureFactory>& FeatureRegistry();

struct FeatureRegistration {
  FeatureRegistration(const std::string& oneof_name, FeatureFactory factory) {
    FeatureRegistry().Register(oneof_name, std::move(factory));
  }
};

// Builds all features of a pipeline config, checking names are unique.
std::vector<std::unique_ptr<Feature>> CreateFeatures(
    const google::protobuf::RepeatedPtrField<protos::FeatureConfig>& configs,
    const protos::DataConfig& data_config);

}  // namespace tzrec
