#include "tzrec/models/two_tower.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/mm.h>

#include <set>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"

namespace tzrec {

TwoTowerModel::TwoTowerModel(const ModelContext& context, TwoTowerSpec spec) : Model(context), spec_(std::move(spec)) {
  const std::string& where = spec_.where;
  if (!(spec_.temperature > 0)) Fail(where, ".temperature must be > 0, got ", spec_.temperature);
  if (spec_.similarity == protos::EUCLID) {
    Fail(where, ".similarity: EUCLID is not a two-tower similarity (TorchEasyRec computes an inner ",
         "product for it); use INNER_PRODUCT or COSINE");
  }
  if (spec_.output_dim < 0) Fail(where, ".output_dim must be >= 0");
  AddMatchHead(spec_.in_batch_negative);
  for (const std::string& group : spec_.user.groups) {
    if (std::find(spec_.item.groups.begin(), spec_.item.groups.end(), group) != spec_.item.groups.end()) {
      Fail(where, ": the user and item towers both read the group '", group, "'");
    }
  }
  // Built as one tower alone (an exported user/ or item/ directory): only its groups exist.
  const std::string built = tower();
  if (!built.empty() && built != "user" && built != "item") Fail(where, ": no tower '", built, "' (user, item)");
  if (built.empty()) {
    InitInput();
  } else {
    InitInput(4, built == "user" ? spec_.user.groups : spec_.item.groups);
  }
  for (const char* name : {"user", "item"}) {
    if (!built.empty() && built != name) continue;
    const TwoTowerSpec::Tower& t = std::string(name) == "user" ? spec_.user : spec_.item;
    for (size_t g = 0; g < t.groups.size() && !t.custom; ++g) {
      if (!embedding_group().HasGroup(t.groups[g])) {
        Fail(where, ".", name, "_tower.", g == 0 ? "input" : "augment_input", ": '", t.groups[g],
             "' is not a DEEP feature group of model_config.feature_groups");
      }
    }
  }
  if (built.empty()) CheckDataGroups();
  const bool cosine = spec_.similarity == protos::COSINE;
  auto input_dim = [&](const TwoTowerSpec::Tower& t) {
    int64_t dim = 0;
    for (const std::string& group : t.groups) dim += InputDim(group);
    return dim;
  };
  if (built != "item" && !spec_.user.custom) {
    user_tower_ = register_module("user_tower", MatchTower(input_dim(spec_.user), spec_.user.mlp, spec_.output_dim,
                                                          cosine, where + ".user_tower"));
  }
  if (built != "user" && !spec_.item.custom) {
    item_tower_ = register_module("item_tower", MatchTower(input_dim(spec_.item), spec_.item.mlp, spec_.output_dim,
                                                          cosine, where + ".item_tower"));
  }
}

std::vector<const Feature*> TwoTowerModel::TowerFeatures(const std::string& tower) const {
  if (tower != "user" && tower != "item") Model::TowerFeatures(tower);
  return GroupFeatures(tower == "user" ? spec_.user.groups : spec_.item.groups);
}

std::vector<int64_t> TwoTowerModel::TowerOutputShape(const std::string& tower) const {
  const MatchTower& module = tower == "user" ? user_tower_ : item_tower_;
  if ((tower != "user" && tower != "item") || !module) Model::TowerOutputShape(tower);
  return {module->output_dim()};
}

at::Tensor TwoTowerModel::TowerEmbedding(const std::string& tower, const std::map<std::string, at::Tensor>& inputs) {
  const bool user = tower == "user";
  TZREC_CHECK(user ? !spec_.user.custom : !spec_.item.custom, "a custom tower must override TowerEmbedding");
  return user ? user_tower_->forward(TowerInput(inputs, spec_.user)) : item_tower_->forward(TowerInput(inputs, spec_.item));
}

at::Tensor TwoTowerModel::TowerInput(const std::map<std::string, at::Tensor>& inputs,
                                     const TwoTowerSpec::Tower& tower) const {
  if (tower.groups.size() == 1) return inputs.at(tower.groups[0]);
  std::vector<at::Tensor> parts;
  for (const std::string& group : tower.groups) parts.push_back(inputs.at(group));
  return at::cat(parts, 1);
}

Predictions TwoTowerModel::Predict(const Batch& batch) {
  if (!tower().empty()) {
    // One tower alone: the other tower's features read as empty, only this one runs.
    std::map<std::string, at::Tensor> inputs = BuildInput(WithEmptyFeatures(batch, features()));
    return {{tower() + "_tower_emb", TowerEmbedding(tower(), inputs)}};
  }
  std::map<std::string, at::Tensor> inputs = BuildInput(batch);
  at::Tensor item = TowerEmbedding("item", inputs);
  at::Tensor user = UserForScoring(inputs, item, batch.size);
  // A shared group: user rows are padded to the item rows; the batch's own rows come first.
  if (spec_.shared_group) user = user.slice(0, 0, batch.size);
  if (user.size(0) != batch.size) {
    Fail(spec_.where, ": the user tower's groups have ", user.size(0), " rows for a batch of ", batch.size,
         " (a user feature reads a negative sampler attr_field?)");
  }
  if (!spec_.in_batch_negative && item.size(0) <= batch.size) {
    Fail(spec_.where, ": no negatives: configure a negative sampler in data_config (its attr_fields feed ",
         "the item tower's features) or set in_batch_negative");
  }
  at::Tensor sim = spec_.in_batch_negative ? at::mm(user, item.t())
                                           : SimilarityWithSampled(user, item, batch.hard_neg_indices);
  Predictions out = HeadPredictions({sim / spec_.temperature});
  if (is_training()) AddTrainingPredictions(inputs, user, item, batch.size, &out);
  return out;
}

void TwoTowerModel::WriteScript(ScriptWriter& w, const StoredTables& tables) const {
  if (tower().empty()) ScriptWriter::Unsupported("a retrieval model is scripted as its towers");
  w.Output(tower() + "_tower_emb", ScriptTower(w, ScriptInput(w, tables), tower()));
}

std::string TwoTowerModel::ScriptTower(ScriptWriter& w, const std::map<std::string, std::string>& inputs,
                                       const std::string& tower) const {
  const bool user = tower == "user";
  const TwoTowerSpec::Tower& t = user ? spec_.user : spec_.item;
  TZREC_CHECK(!t.custom, "a custom tower must override ScriptTower");
  std::string input = inputs.at(t.groups[0]);
  if (t.groups.size() > 1) {
    std::vector<std::string> parts;
    for (const std::string& group : t.groups) parts.push_back(inputs.at(group));
    input = w.Let(tower + "_tower_input", "torch.cat([" + Join(parts, ", ") + "], 1)");
  }
  return (user ? user_tower_ : item_tower_)->Script(w, input, tower + "_tower");
}

std::vector<const Feature*> TwoTowerModel::GroupFeatures(const std::vector<std::string>& groups) const {
  std::set<std::string> names;
  for (const auto& g : config().feature_groups()) {
    if (std::find(groups.begin(), groups.end(), g.group_name()) == groups.end()) continue;
    names.insert(g.feature_names().begin(), g.feature_names().end());
    for (const auto& nested : g.sequence_groups()) names.insert(nested.feature_names().begin(), nested.feature_names().end());
  }
  std::vector<const Feature*> out;
  for (const Feature* feature : features()) {
    if (names.count(feature->name())) out.push_back(feature);
  }
  return out;
}

void TwoTowerModel::CheckDataGroups() const {
  std::map<std::string, std::string> user_tables;
  for (const Feature* feature : GroupFeatures(spec_.user.groups)) {
    if (feature->negative()) {
      Fail(spec_.where, ".user_tower: feature '", feature->name(), "' of group '", Join(spec_.user.groups, "', '"),
           "' reads a negative sampler attr_field; user features must not");
    }
    user_tables[feature->embedding_name() + (feature->is_sequence() ? ".seq" : "")] = feature->name();
  }
  for (const Feature* feature : GroupFeatures(spec_.item.groups)) {
    if (spec_.shared_group || !feature->is_sparse()) continue;
    auto it = user_tables.find(feature->embedding_name() + (feature->is_sequence() ? ".seq" : ""));
    if (it != user_tables.end()) {
      Fail(spec_.where, ": item feature '", feature->name(), "' and user feature '", it->second,
           "' share the table '", feature->embedding_name(),
           "'; TorchEasyRec keeps each tower's tables apart, which is not supported yet ",
           "(give them different embedding_names, or use dssm_v2 to share tables)");
    }
  }
}

}  // namespace tzrec
