// TwoTowerModel: what TorchEasyRec's two-tower retrieval models (DSSM, DSSM v2, DAT) share.
// Each tower concatenates its DEEP groups (the first is its `input`; DAT adds `augment_input`),
// maps them through its MLP, then Linear(output_dim) when output_dim > 0, then L2 normalisation
// for COSINE similarity. The similarity, divided by `temperature`, is the task output of a match
// head (heads/task_head.h):
//   in_batch_negative   user @ item^T [B, B(+N)], positives on the diagonal;
//   sampled negatives   [sum(u * i_pos) | u @ i_neg^T | hard block], positive in column 0,
//                       the item rows being [B positives | N negatives | hard negatives]; the
//                       hard block is [B, max slot + 1] with -1e32 where a row has no such slot.
// Without a shared group the towers' tables are kept apart (TorchEasyRec gives every tower its
// own embedding group); with one (DSSM v2) every feature is read from __BASE__
// (force_base_data_group, user rows padded to B + N) and the first B user rows are kept.
// Towers are scored alone (Model::SetTower) or built alone (ModelContext::tower). A model whose
// tower is not "groups -> MLP" (MIND's user tower) marks it `custom` and builds, runs and
// scripts it itself (TowerEmbedding, UserForScoring, ScriptTower, TowerOutputShape).
// One thread at a time.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tzrec/models/model.h"
#include "tzrec/modules/match_tower.h"
#include "tzrec/protos/simi.pb.h"

namespace tzrec {

struct TwoTowerSpec {
  struct Tower {
    std::vector<std::string> groups;  // DEEP groups, concatenated; the first is `input`
    const protos::MLP* mlp = nullptr;
    bool custom = false;  // built by the derived model, not as a MatchTower over `groups`
  };
  std::string where;  // "model_config.dssm", for errors
  bool shared_group = false;
  bool in_batch_negative = false;
  double temperature = 1.0;
  protos::Similarity similarity = protos::INNER_PRODUCT;
  int output_dim = 0;
  Tower user, item;
};

class TwoTowerModel : public Model {
 public:
  TwoTowerModel(const ModelContext& context, TwoTowerSpec spec);

  std::vector<std::string> TowerNames() const override { return {"user", "item"}; }
  std::vector<const Feature*> TowerFeatures(const std::string& tower) const override;
  std::vector<int64_t> TowerOutputShape(const std::string& tower) const override;
  Predictions Predict(const Batch& batch) override;
  // Only a tower has a TorchScript form: the whole model's output needs the sampler.
  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override;

 protected:
  // Tower `tower`'s embedding from the group inputs, [rows, D] (a custom tower may add dims).
  virtual at::Tensor TowerEmbedding(const std::string& tower, const std::map<std::string, at::Tensor>& inputs);
  // The user vectors scored against `item` (the B positives first), [B, D]: the user tower's
  // embedding; MIND attends over its interests with each row's positive item.
  virtual at::Tensor UserForScoring(const std::map<std::string, at::Tensor>& inputs, const at::Tensor& item,
                                    int64_t batch_size) {
    return TowerEmbedding("user", inputs);
  }
  // TowerEmbedding as TorchScript over the scripted group inputs; returns the output local.
  virtual std::string ScriptTower(ScriptWriter& w, const std::map<std::string, std::string>& inputs,
                                  const std::string& tower) const;
  // Training only: predictions beyond "similarity" that a model's own losses read (DAT's
  // augmented vectors), from the group inputs and the towers' outputs (item rows B + N + H).
  virtual void AddTrainingPredictions(const std::map<std::string, at::Tensor>& inputs, const at::Tensor& user,
                                      const at::Tensor& item, int64_t batch_size, Predictions* out) {}
  const TwoTowerSpec& spec() const { return spec_; }

 private:
  at::Tensor TowerInput(const std::map<std::string, at::Tensor>& inputs, const TwoTowerSpec::Tower& tower) const;
  std::vector<const Feature*> GroupFeatures(const std::vector<std::string>& groups) const;
  void CheckDataGroups() const;

  TwoTowerSpec spec_;
  MatchTower user_tower_{nullptr}, item_tower_{nullptr};
};

}  // namespace tzrec
