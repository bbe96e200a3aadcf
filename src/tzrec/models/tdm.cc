// TDM (model_config.tdm), TorchEasyRec's Tree-based Deep Model ranker: a multi-window DIN
// encoder (modules/sequence_encoder.h, `multiwindow_din`: windows_len and attn_mlp) over the
// config's SEQUENCE group, whose query is the tree node's (item) features, concatenated with
// every other group (DEEP, in config order), then the `final` MLP and Linear(num_class; TDM's
// configs use 2 with softmax cross entropy). Its rows are the data's user-item pairs plus the
// tdm_sampler's tree nodes (input/tdm_sampler.h): ancestors labelled 1, per-level negatives 0.
//
// Export writes model/ (the whole ranker, which tdm_retrieval walks the tree with) and
// embedding/: the tower "embedding", the SEQUENCE group's query side alone (the item features'
// embeddings, concatenated), output "item_emb" [B, D]; predict of the item table through it
// feeds tdm_cluster_tree, which rebuilds the tree from the learnt embeddings (TorchEasyRec's
// TDMEmbedding).
#include <ATen/ops/cat.h>
#include <map>
#include <torch/nn/modules/linear.h>

#include "tzrec/batch/batch.h"
#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/modules/sequence_encoder.h"
#include "tzrec/protos/models/match_model.pb.h"

namespace tzrec {
namespace {

constexpr char kWhere[] = "model_config.tdm";

class TDM : public Model {
 public:
  explicit TDM(const ModelContext& context) : Model(context) {
    const protos::TDM& config = this->config().tdm();
    AddRankHead();
    for (const auto& group : this->config().feature_groups()) {
      if (group.group_type() == protos::SEQUENCE) {
        if (!sequence_group_.empty()) {
          Fail(kWhere, ": one SEQUENCE feature group is read (the tree node's history); '", sequence_group_, "' and '",
               group.group_name(), "' are two");
        }
        sequence_group_ = group.group_name();
      } else if (group.group_type() == protos::DEEP) {
        other_groups_.push_back(group.group_name());
      } else {
        Fail(kWhere, ": feature group '", group.group_name(), "' is ", protos::FeatureGroupType_Name(group.group_type()),
             "; TDM reads one SEQUENCE group and DEEP groups");
      }
    }
    if (sequence_group_.empty()) Fail(kWhere, ": a SEQUENCE feature group (the user's history) is required");
    if (tower_only()) {
      // The embedding tower: the sequence group's query features alone (the only features
      // the tower's config has), their tables named as in the whole model.
      google::protobuf::RepeatedPtrField<protos::FeatureGroupConfig> groups;
      for (const auto& group : this->config().feature_groups()) {
        if (group.group_name() != sequence_group_) continue;
        protos::FeatureGroupConfig* query = groups.Add();
        *query = group;
        query->clear_feature_names();
        for (const Feature* feature : QueryFeatures()) query->add_feature_names(feature->name());
      }
      EmbeddingGroup::Options options;
      options.query_only_sequence_groups = true;
      query_dim_ = AddEmbeddingGroup(groups, options).QueryDim(sequence_group_);
      return;
    }
    InitInput();
    if (!config.has_multiwindow_din()) Fail(kWhere, ".multiwindow_din is required");
    protos::SeqEncoderConfig encoder_config;
    auto* multi_window = encoder_config.mutable_multi_window_din_encoder();
    multi_window->set_input(sequence_group_);
    *multi_window->mutable_attn_mlp() = config.multiwindow_din().attn_mlp();
    *multi_window->mutable_windows_len() = config.multiwindow_din().windows_len();
    SequenceEncoderContext encoder_context;
    encoder_context.config = &encoder_config;
    query_dim_ = embedding_group().QueryDim(sequence_group_);
    encoder_context.query_dim = query_dim_;
    encoder_context.sequence_dim = embedding_group().SequenceDim(sequence_group_);
    encoder_context.where = std::string(kWhere) + ".multiwindow_din";
    encoder_ = register_module("multiwindow_din", CreateSequenceEncoder(encoder_context));
    int64_t total = encoder_->output_dim();
    for (const std::string& group : other_groups_) total += InputDim(group);
    final_ = register_module("deep_mlp", MLP(total, config.final(), std::string(kWhere) + ".final"));
    output_ = register_module("output_mlp", torch::nn::Linear(final_->output_dim(),
                                                                  static_cast<int64_t>(heads()[0]->num_class())));
  }

  std::vector<std::string> TowerNames() const override { return {kEmbeddingTower}; }
  std::vector<const Feature*> TowerFeatures(const std::string& tower) const override {
    if (tower != kEmbeddingTower) Model::TowerFeatures(tower);
    return QueryFeatures();
  }
  std::string TowerOutputName(const std::string& tower) const override { return "item_emb"; }
  std::vector<ExportPart> ExportParts() const override {
    // As TorchEasyRec: the asset files (the serving tree) go with the whole model only.
    return {ExportPart{"embedding", kEmbeddingTower, false}, ExportPart{"model", "", true}};
  }

  Predictions Predict(const Batch& batch) override {
    if (!tower().empty()) {
      auto grouped = BuildInput(WithEmptyFeatures(batch, features()));
      return {{TowerOutputName(tower()), grouped.at(sequence_group_ + ".query")}};
    }
    auto grouped = BuildInput(batch);
    std::vector<at::Tensor> parts = {encoder_->Encode({grouped.at(sequence_group_ + ".query"),
                                                       grouped.at(sequence_group_ + ".sequence"),
                                                       grouped.at(sequence_group_ + ".sequence_length")})};
    for (const std::string& group : other_groups_) parts.push_back(grouped.at(group));
    const at::Tensor joined = parts.size() == 1 ? parts[0] : at::cat(parts, 1);
    return HeadPredictions({output_->forward(final_->forward(joined))});
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    const std::map<std::string, std::string> grouped = ScriptInput(w, tables);
    if (!tower().empty()) {
      w.Output(TowerOutputName(tower()), grouped.at(sequence_group_ + ".query"));
      return;
    }
    std::vector<std::string> parts = {encoder_->Script(w, grouped.at(sequence_group_ + ".query"),
                                                       grouped.at(sequence_group_ + ".sequence"),
                                                       grouped.at(sequence_group_ + ".sequence_length"), "multiwindow_din")};
    for (const std::string& group : other_groups_) parts.push_back(grouped.at(group));
    std::string joined = parts[0];
    if (parts.size() > 1) joined = w.Let("tdm_input", "torch.cat([" + Join(parts, ", ") + "], 1)");
    ScriptHeadPredictions(w, {ScriptLinear(w, *output_, final_->Script(w, joined, "deep_mlp"), "output_mlp")});
  }

 protected:
  std::vector<int64_t> TowerOutputShape(const std::string& tower) const override {
    if (tower != kEmbeddingTower) return Model::TowerOutputShape(tower);
    return {query_dim_};
  }

 private:
  static constexpr char kEmbeddingTower[] = "embedding";

  // The SEQUENCE group's features that are not sequences (the tree node's), in group order.
  std::vector<const Feature*> QueryFeatures() const {
    std::map<std::string, const Feature*> by_name;
    for (const Feature* feature : features()) by_name[feature->name()] = feature;
    std::vector<const Feature*> out;
    for (const auto& group : config().feature_groups()) {
      if (group.group_name() != sequence_group_) continue;
      for (const std::string& name : group.feature_names()) {
        auto it = by_name.find(name);
        if (it != by_name.end() && !it->second->is_sequence()) out.push_back(it->second);
      }
    }
    return out;
  }
  int64_t query_dim_ = 0;

  std::string sequence_group_;
  std::vector<std::string> other_groups_;
  std::shared_ptr<SequenceEncoder> encoder_;
  MLP final_{nullptr};
  torch::nn::Linear output_{nullptr};
};

std::shared_ptr<Model> MakeTDM(const ModelContext& context) { return std::make_shared<TDM>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "tdm", MakeTDM, "multiwindow_din.windows_len", "multiwindow_din.attn_mlp.*",
               "final.*");

}  // namespace tzrec
