// DSSM (model_config.dssm) and DSSM v2 (model_config.dssm_v2), TorchEasyRec's two-tower
// retrieval models (models/two_tower.h): each tower reads one DEEP group (`input`) through its
// optional MLP. DSSM keeps each tower's tables apart; DSSM v2 shares one embedding group and
// reads every feature from __BASE__ (force_base_data_group).
#include "tzrec/models/two_tower.h"
#include "tzrec/protos/models/match_model.pb.h"

namespace tzrec {
namespace {

template <typename Config>
TwoTowerSpec DssmSpec(const Config& config, const std::string& where, bool shared) {
  TwoTowerSpec spec;
  spec.where = where;
  spec.shared_group = shared;
  spec.in_batch_negative = config.in_batch_negative();
  spec.temperature = config.temperature();
  spec.similarity = config.similarity();
  spec.output_dim = config.output_dim();
  spec.user.groups = {config.user_tower().input()};
  spec.item.groups = {config.item_tower().input()};
  if (config.user_tower().has_mlp()) spec.user.mlp = &config.user_tower().mlp();
  if (config.item_tower().has_mlp()) spec.item.mlp = &config.item_tower().mlp();
  return spec;
}

std::shared_ptr<Model> MakeDSSM(const ModelContext& context) {
  return std::make_shared<TwoTowerModel>(context, DssmSpec(context.config->dssm(), "model_config.dssm", false));
}

std::shared_ptr<Model> MakeDSSMV2(const ModelContext& context) {
  return std::make_shared<TwoTowerModel>(context, DssmSpec(context.config->dssm_v2(), "model_config.dssm_v2", true));
}

}  // namespace

TZREC_REGISTER(ModelRegistry(), "dssm", MakeDSSM, "user_tower.input", "user_tower.mlp.*",
               "item_tower.input", "item_tower.mlp.*", "output_dim", "similarity", "temperature",
               "in_batch_negative");
TZREC_REGISTER(ModelRegistry(), "dssm_v2", MakeDSSMV2, "user_tower.input", "user_tower.mlp.*",
               "item_tower.input", "item_tower.mlp.*", "output_dim", "similarity", "temperature",
               "in_batch_negative");

}  // namespace tzrec
