// DSSM (model_config.dssm) and DSSM v2 (model_config.dssm_v2), TorchEasyRec's two-tower
// retrieval models: each tower maps its DEEP group through its MLP, then Linear(output_dim)
// when output_dim > 0, then L2 normalisation for COSINE similarity. The similarity, divided by
// `temperature`, is the task output of a match head (heads/task_head.h):
//   in_batch_negative   user @ item^T [B, B(+N)], positives on the diagonal;
//   sampled negatives   [sum(u * i_pos) | u @ i_neg^T | hard block], positive in column 0,
//                       the item rows being [B positives | N negatives | hard negatives]; the
//                       hard block is [B, max slot + 1] with -1e32 where a row has no such slot.
// DSSM keeps each tower's tables apart (TorchEasyRec gives every tower its own embedding
// group); DSSM v2 shares one embedding group, reads every feature from __BASE__
// (force_base_data_group, user rows padded to B + N) and keeps the first B user rows.
#include <ATen/ops/mm.h>

#include <set>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/match_tower.h"
#include "tzrec/protos/models/match_model.pb.h"

namespace tzrec {
namespace {

template <typename Config>
class DSSM : public Model {
 public:
  DSSM(const ModelContext& context, const Config& config, const std::string& where, bool shared)
      : Model(context), where_(where), shared_(shared) {
    in_batch_negative_ = config.in_batch_negative();
    temperature_ = config.temperature();
    if (!(temperature_ > 0)) Fail(where, ".temperature must be > 0, got ", temperature_);
    if (config.similarity() == protos::EUCLID) {
      Fail(where, ".similarity: EUCLID is not a DSSM similarity (TorchEasyRec computes an inner ",
           "product for it); use INNER_PRODUCT or COSINE");
    }
    if (config.output_dim() < 0) Fail(where, ".output_dim must be >= 0");
    AddMatchHead(in_batch_negative_);
    user_group_ = config.user_tower().input();
    item_group_ = config.item_tower().input();
    if (user_group_ == item_group_) Fail(where, ": the user and item towers read the same group '", user_group_, "'");
    // Built as one tower alone (an exported user/ or item/ directory): only its group exists.
    const std::string built = tower();
    if (!built.empty() && built != "user" && built != "item") Fail(where, ": no tower '", built, "' (user, item)");
    if (built.empty()) {
      InitInput();
    } else {
      InitInput(4, {built == "user" ? user_group_ : item_group_});
    }
    for (const auto* group : {&user_group_, &item_group_}) {
      if (!built.empty() && built != (group == &user_group_ ? "user" : "item")) continue;
      if (!embedding_group().HasGroup(*group)) {
        Fail(where, group == &user_group_ ? ".user_tower" : ".item_tower", ".input: '", *group,
             "' is not a DEEP feature group of model_config.feature_groups");
      }
    }
    if (built.empty()) CheckDataGroups();
    const bool cosine = config.similarity() == protos::COSINE;
    if (built != "item") {
      user_tower_ = register_module("user_tower", MatchTower(InputDim(user_group_), config.user_tower(),
                                                            config.output_dim(), cosine, where + ".user_tower"));
    }
    if (built != "user") {
      item_tower_ = register_module("item_tower", MatchTower(InputDim(item_group_), config.item_tower(),
                                                            config.output_dim(), cosine, where + ".item_tower"));
    }
  }

  std::vector<std::string> TowerNames() const override { return {"user", "item"}; }

  std::vector<const Feature*> TowerFeatures(const std::string& tower) const override {
    if (tower != "user" && tower != "item") Model::TowerFeatures(tower);
    return GroupFeatures(tower == "user" ? user_group_ : item_group_);
  }

  int64_t TowerOutputDim(const std::string& tower) const override {
    const MatchTower& module = tower == "user" ? user_tower_ : item_tower_;
    if ((tower != "user" && tower != "item") || !module) Model::TowerOutputDim(tower);
    return module->output_dim();
  }

  // Only a tower has a TorchScript form: the whole model's output needs the sampler.
  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    if (tower().empty()) ScriptWriter::Unsupported("a retrieval model is scripted as its towers");
    const bool user = tower() == "user";
    const std::string input = ScriptInput(w, tables).at(user ? user_group_ : item_group_);
    w.Output(tower() + "_tower_emb", (user ? user_tower_ : item_tower_)->Script(w, input, tower() + "_tower"));
  }

  Predictions Predict(const Batch& batch) override {
    if (!tower().empty()) {
      // One tower alone: the other tower's features read as empty, only this one runs.
      const bool user = tower() == "user";
      std::map<std::string, at::Tensor> inputs = BuildInput(WithEmptyFeatures(batch, features()));
      at::Tensor emb = user ? user_tower_->forward(inputs.at(user_group_))
                            : item_tower_->forward(inputs.at(item_group_));
      return {{tower() + "_tower_emb", emb}};
    }
    std::map<std::string, at::Tensor> inputs = BuildInput(batch);
    at::Tensor user = user_tower_->forward(inputs.at(user_group_));
    at::Tensor item = item_tower_->forward(inputs.at(item_group_));
    // v2: user rows are padded to the item rows; the batch's own rows come first.
    if (shared_) user = user.slice(0, 0, batch.size);
    if (user.size(0) != batch.size) {
      Fail(where_, ": the user tower's group '", user_group_, "' has ", user.size(0), " rows for a batch of ",
           batch.size, " (a user feature reads a negative sampler attr_field?)");
    }
    if (!in_batch_negative_ && item.size(0) <= batch.size) {
      Fail(where_, ": no negatives: configure a negative sampler in data_config (its attr_fields feed ",
           "the item tower's features) or set in_batch_negative");
    }
    at::Tensor sim = in_batch_negative_ ? at::mm(user, item.t())
                                        : SimilarityWithSampled(user, item, batch.hard_neg_indices);
    return HeadPredictions({sim / temperature_});
  }

 private:
  // Pooled features of a group and its nested sequence groups, by name.
  std::vector<const Feature*> GroupFeatures(const std::string& group) const {
    std::set<std::string> names;
    for (const auto& g : config().feature_groups()) {
      if (g.group_name() != group) continue;
      names.insert(g.feature_names().begin(), g.feature_names().end());
      for (const auto& nested : g.sequence_groups()) names.insert(nested.feature_names().begin(), nested.feature_names().end());
    }
    std::vector<const Feature*> out;
    for (const Feature* feature : features()) {
      if (names.count(feature->name())) out.push_back(feature);
    }
    return out;
  }

  void CheckDataGroups() const {
    std::map<std::string, std::string> user_tables;
    for (const Feature* feature : GroupFeatures(user_group_)) {
      if (feature->negative()) {
        Fail(where_, ".user_tower: feature '", feature->name(), "' of group '", user_group_,
             "' reads a negative sampler attr_field; user features must not");
      }
      user_tables[feature->embedding_name() + (feature->is_sequence() ? ".seq" : "")] = feature->name();
    }
    for (const Feature* feature : GroupFeatures(item_group_)) {
      if (shared_ || !feature->is_sparse()) continue;
      auto it = user_tables.find(feature->embedding_name() + (feature->is_sequence() ? ".seq" : ""));
      if (it != user_tables.end()) {
        Fail(where_, ": item feature '", feature->name(), "' and user feature '", it->second,
             "' share the table '", feature->embedding_name(),
             "'; TorchEasyRec's DSSM keeps each tower's tables apart, which is not supported yet ",
             "(give them different embedding_names, or use dssm_v2 to share tables)");
      }
    }
  }

  std::string where_;
  bool shared_;
  bool in_batch_negative_ = false;
  double temperature_ = 1.0;
  std::string user_group_, item_group_;
  MatchTower user_tower_{nullptr}, item_tower_{nullptr};
};

std::shared_ptr<Model> MakeDSSM(const ModelContext& context) {
  return std::make_shared<DSSM<protos::DSSM>>(context, context.config->dssm(), "model_config.dssm", false);
}

std::shared_ptr<Model> MakeDSSMV2(const ModelContext& context) {
  return std::make_shared<DSSM<protos::DSSMV2>>(context, context.config->dssm_v2(), "model_config.dssm_v2", true);
}

}  // namespace

TZREC_REGISTER(ModelRegistry(), "dssm", MakeDSSM, "user_tower.input", "user_tower.mlp.*",
               "item_tower.input", "item_tower.mlp.*", "output_dim", "similarity", "temperature",
               "in_batch_negative");
TZREC_REGISTER(ModelRegistry(), "dssm_v2", MakeDSSMV2, "user_tower.input", "user_tower.mlp.*",
               "item_tower.input", "item_tower.mlp.*", "output_dim", "similarity", "temperature",
               "in_batch_negative");

}  // namespace tzrec
