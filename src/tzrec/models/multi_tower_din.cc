// MultiTowerDIN (model_config.multi_tower_din): MultiTower's per-group MLP towers plus one DIN
// encoder per `din_towers[].input` SEQUENCE group (its MLP is `attn_mlp`); outputs are
// concatenated, towers first, then the `final` MLP and Linear(num_class).
#include <ATen/ops/cat.h>
#include <torch/nn/modules/linear.h>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/models/group_towers.h"
#include "tzrec/models/model.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/modules/sequence_encoder.h"
#include "tzrec/protos/models/rank_model.pb.h"

namespace tzrec {
namespace {

class MultiTowerDin : public Model {
 public:
  explicit MultiTowerDin(const ModelContext& context) : Model(context) {
    const auto& config = this->config().multi_tower_din();
    AddRankHead();
    InitInput();
    if (config.towers_size() + config.din_towers_size() == 0) {
      Fail("model_config.multi_tower_din: neither towers nor din_towers are set");
    }
    towers_ = register_module("towers", GroupTowers(config.towers(), [this](const std::string& group) {
      return embedding_group().HasGroup(group) ? InputDim(group) : int64_t{-1};
    }, "model_config.multi_tower_din.towers"));
    int64_t total = towers_->output_dim();
    for (int t = 0; t < config.din_towers_size(); ++t) {
      const auto& tower = config.din_towers(t);
      const std::string where = StrCat("model_config.multi_tower_din.din_towers[", t, "]");
      if (!embedding_group().HasSequenceGroup(tower.input())) {
        Fail(where, ".input: no SEQUENCE feature group '", tower.input(), "'");
      }
      auto encoder = MakeDinEncoder(tower.input(), embedding_group().QueryDim(tower.input()),
                                    embedding_group().SequenceDim(tower.input()), tower.attn_mlp(),
                                    /*max_seq_length=*/0, where);
      total += encoder->output_dim();
      dins_.push_back(register_module(StrCat("din_tower_", t), encoder));
    }
    final_ = register_module("final_mlp", MLP(total, config.final(), "model_config.multi_tower_din.final"));
    output_ = register_module("output_mlp", torch::nn::Linear(final_->output_dim(),
                                                                  static_cast<int64_t>(heads()[0]->num_class())));
  }

  Predictions Predict(const Batch& batch) override {
    auto grouped = BuildInput(batch);
    std::vector<at::Tensor> parts = towers_->forward(grouped);
    for (const auto& din : dins_) {
      const std::string& g = din->input();
      parts.push_back(din->Encode({grouped.at(g + ".query"), grouped.at(g + ".sequence"),
                                   grouped.at(g + ".sequence_length")}));
    }
    at::Tensor joined = parts.size() == 1 ? parts[0] : at::cat(parts, 1);
    return HeadPredictions({output_->forward(final_->forward(joined))});
  }

  void WriteScript(ScriptWriter& w, const StoredTables& tables) const override {
    const std::map<std::string, std::string> grouped = ScriptInput(w, tables);
    std::vector<std::string> parts = towers_->Script(w, grouped);
    for (size_t t = 0; t < dins_.size(); ++t) {
      const std::string& g = dins_[t]->input();
      parts.push_back(dins_[t]->Script(w, grouped.at(g + ".query"), grouped.at(g + ".sequence"),
                                       grouped.at(g + ".sequence_length"), StrCat("din_tower_", t)));
    }
    std::string joined = parts[0];
    if (parts.size() > 1) joined = w.Let("towers", "torch.cat([" + Join(parts, ", ") + "], 1)");
    ScriptHeadPredictions(w, {ScriptLinear(w, *output_, final_->Script(w, joined, "final_mlp"), "output_mlp")});
  }

 private:
  GroupTowers towers_{nullptr};
  std::vector<std::shared_ptr<SequenceEncoder>> dins_;
  MLP final_{nullptr};
  torch::nn::Linear output_{nullptr};
};

std::shared_ptr<Model> Make(const ModelContext& context) { return std::make_shared<MultiTowerDin>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "multi_tower_din", Make, "towers.input", "towers.mlp.*",
               "din_towers.input", "din_towers.attn_mlp.*", "final.*");

}  // namespace tzrec
