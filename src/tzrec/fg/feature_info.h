// What each entry of `feature_configs` is, derived once from its config (no LibTorch).
//
// DescribeFeatures expands grouped `sequence_feature`s into their sub-features (named
// `<sequence_name>__<feature_name>`) and applies TorchEasyRec's per-type rules: sparse or
// dense, embedding rows (via the Bucketizer), value_dim defaults, and which data columns a
// feature reads in each fg_mode. Feature generation (feature_generator.h), FG_NONE parsing
// (features/feature.h) and create_fg_json all read these, so they cannot disagree.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tzrec/fg/bucketizer.h"
#include "tzrec/fg/dynamic_emb_spec.h"
#include "tzrec/fg/zch_spec.h"
#include "tzrec/protos/data.pb.h"
#include "tzrec/protos/feature.pb.h"

namespace tzrec::fg {

// The most values per row (or step) a feature may declare (value_dim).
constexpr int kMaxValueDim = 1 << 16;

enum class Side { kUser, kItem, kContext, kFeature, kConst };

// One `side:name` input of a feature.
struct FeatureInput {
  Side side = Side::kUser;
  std::string name;       // as written after the side
  std::string column;     // data column (sequence prefix applied) or, for kFeature, the
                          // producing feature's output name; for kConst the constant text
  bool is_sequence = false;  // carries a sequence (split by sequence_delim first)
  bool raw_text = false;     // the op reads the whole value, not split items (maps, text)
  bool is_all = false;       // match_feature pkey/skey "ALL"
};

struct FeatureInfo {
  std::string name;          // output name (grouped sub-features: <sequence>__<feature>)
  std::string config_name;   // feature_name as configured
  std::string type;          // base type: "id_feature", "raw_feature", ...
  std::string config_path;   // "feature_configs[3].sequence_feature.features[1].id_feature"
  const google::protobuf::Message* config = nullptr;  // the feature message (owned by caller)

  bool is_sequence = false;  // grouped sub-feature or sequence_<type>
  bool grouped = false;
  std::string sequence_name;
  int64_t sequence_length = 0;  // steps kept per row; 0: all (unset in the config)
  std::string sequence_delim = ";";
  std::string sequence_pk;

  bool is_sparse = false;
  int64_t num_embeddings = 0;  // sparse only
  std::optional<ZchSpec> zch;  // ids are raw int64 mapped to rows by a managed-collision index
  std::optional<DynamicEmbSpec> dynamicemb;  // ids are raw int64 mapped to rows by a dynamic table
  int value_dim = 1;           // dense: floats per value; sparse: 0 = all values, 1 = first
  bool weighted = false;
  bool stub = false;
  std::string default_value;   // FG default (before bucketize)
  bool has_default_value = false;
  std::string separator = "\x1d";

  std::vector<FeatureInput> inputs;  // FG_NORMAL / FG_DAG inputs
  std::shared_ptr<const Bucketizer> bucketizer;
};

// Parses "side:name"; `where` prefixes errors.
FeatureInput ParseInput(const std::string& expression, const std::string& where);

// All features of a config in order, grouped sequences expanded. Rejects duplicate names,
// unknown or unsupported types (naming the config path).
std::vector<FeatureInfo> DescribeFeatures(
    const google::protobuf::RepeatedPtrField<protos::FeatureConfig>& configs,
    protos::FgMode fg_mode);

// Data columns a feature reads under `fg_mode` (FG_NONE/FG_BUCKETIZE: its own name).
std::vector<std::string> InputColumns(const FeatureInfo& info, protos::FgMode fg_mode);

}  // namespace tzrec::fg
