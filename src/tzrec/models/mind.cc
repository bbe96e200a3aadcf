// MIND (model_config.mind), TorchEasyRec's Multi-Interest Network with Dynamic routing (Li et
// al. 2019): a two-tower retrieval model (models/two_tower.h) whose user tower gives several
// interest vectors per user.
//
// User tower (`input` a DEEP group, `history_input` a SEQUENCE group):
//   u = user_mlp(user group): an MLP of hidden_units[:-1], then Linear(hidden_units[-1]) (one
//       hidden unit: just that Linear); TorchEasyRec reads only activation, use_bn and the first
//       dropout_ratio of it;
//   h = hist_seq_mlp(history sequence), per step: the same shape without biases (optional);
//   capsules, mask = CapsuleLayer(h, lengths)            (modules/capsule.h), [B, K, high_dim];
//   interests = concat_mlp([u tiled K times, capsules] * mask) * mask, per interest;
//   then Linear(output_dim, no bias) when output_dim > 0, and L2 normalisation for COSINE.
// Item tower: mlp, Linear(output_dim) when output_dim > 0, COSINE normalisation (MatchTower).
// Label-aware attention picks each row's user vector for scoring: softmax over its active
// interests of simi_pow * <interest, the row's positive item>, then the weighted sum. The
// similarity with the positive and sampled items, / temperature, goes to the match head.
// The exported user tower outputs every interest, user_tower_emb [B, K, D] (inactive ones 0);
// hitrate searches each interest (--num_interests K).
#include <ATen/ATen.h>
#include <torch/nn/functional/normalization.h>
#include <torch/nn/modules/linear.h>

#include <cmath>
#include <limits>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/models/two_tower.h"
#include "tzrec/modules/capsule.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/protos/models/match_model.pb.h"

namespace tzrec {
namespace {

constexpr char kWhere[] = "model_config.mind";

TwoTowerSpec MindSpec(const protos::MIND& config) {
  TwoTowerSpec spec;
  spec.where = kWhere;
  spec.in_batch_negative = config.in_batch_negative();
  spec.temperature = config.temperature();
  spec.similarity = config.similarity();
  spec.output_dim = config.output_dim();
  spec.user.groups = {config.user_tower().input(), config.user_tower().history_input()};
  spec.user.custom = true;
  spec.item.groups = {config.item_tower().input()};
  spec.item.mlp = &config.item_tower().mlp();
  return spec;
}

// An MLP as TorchEasyRec's MIND builds user_mlp / hist_seq_mlp: hidden_units[:-1] through an
// MLP (activation, use_bn, one dropout ratio), then a Linear to hidden_units[-1].
class HeadedMlpImpl : public torch::nn::Module {
 public:
  HeadedMlpImpl(int64_t in_features, const protos::MLP& config, bool bias, const std::string& where) {
    if (config.hidden_units_size() == 0) Fail(where, ".hidden_units: at least one is needed");
    if (config.dropout_ratio_size() > 1) {
      Fail(where, ".dropout_ratio: MIND applies one ratio to every layer (TorchEasyRec reads only the first); give one");
    }
    int64_t width = in_features;
    if (config.hidden_units_size() > 1) {
      protos::MLP body = config;
      body.clear_hidden_units();
      for (int i = 0; i + 1 < config.hidden_units_size(); ++i) body.add_hidden_units(config.hidden_units(i));
      body.set_bias(bias);
      mlp_ = register_module("hidden", MLP(in_features, body, where));
      width = mlp_->output_dim();
    }
    const int64_t out = CheckedWidth(config.hidden_units(config.hidden_units_size() - 1), where + ".hidden_units");
    CheckLinearSize(width, out, where);
    out_ = register_module("out", torch::nn::Linear(torch::nn::LinearOptions(width, out).bias(bias)));
    output_dim_ = out;
  }
  // `x` [N, in] or [B, T, in] (per step).
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor y = x;
    if (mlp_) y = x.dim() == 3 ? mlp_->forward(x.reshape({-1, x.size(2)})).reshape({x.size(0), x.size(1), -1}) : mlp_->forward(x);
    return out_->forward(y);
  }
  std::string Script(ScriptWriter& w, const std::string& x, bool steps, const std::string& name) const {
    std::string y = x;
    if (mlp_) {
      if (steps) {
        y = w.Let(name + "_rows", "torch.reshape(" + x + ", [-1, " + x + ".size(2)])");
        y = mlp_->Script(w, y, name);
        y = w.Let(name + "_steps", "torch.reshape(" + y + ", [" + x + ".size(0), " + x + ".size(1), -1])");
      } else {
        y = mlp_->Script(w, y, name);
      }
    }
    return ScriptLinear(w, *out_, y, name + "_out");
  }
  int64_t output_dim() const { return output_dim_; }

 private:
  MLP mlp_{nullptr};
  torch::nn::Linear out_{nullptr};
  int64_t output_dim_ = 0;
};
TORCH_MODULE(HeadedMlp);

class MindUserTowerImpl : public torch::nn::Module {
 public:
  MindUserTowerImpl(const protos::MINDUserTower& config, int64_t user_dim, int64_t sequence_dim, int output_dim,
                    bool cosine)
      : cosine_(cosine) {
    const std::string where = std::string(kWhere) + ".user_tower";
    user_mlp_ = register_module("user_mlp", HeadedMlp(user_dim, config.user_mlp(), true, where + ".user_mlp"));
    int64_t capsule_input = sequence_dim;
    if (config.has_hist_seq_mlp() && config.hist_seq_mlp().hidden_units_size() > 0) {
      if (config.hist_seq_mlp().has_bias() && config.hist_seq_mlp().bias()) {
        Fail(where, ".hist_seq_mlp.bias: MIND's history MLP has no biases (TorchEasyRec); remove it or set false");
      }
      hist_mlp_ = register_module(
          "hist_seq_mlp", HeadedMlp(sequence_dim, config.hist_seq_mlp(), false, where + ".hist_seq_mlp"));
      capsule_input = hist_mlp_->output_dim();
    }
    capsule_ = register_module("capsule_layer", CapsuleLayer(config.capsule_config(), capsule_input, where + ".capsule_config"));
    if (config.concat_mlp().hidden_units_size() == 0) Fail(where, ".concat_mlp.hidden_units: at least one is needed");
    concat_mlp_ = register_module("concat_mlp", MLP(user_mlp_->output_dim() + capsule_->high_dim(), config.concat_mlp(),
                                                    where + ".concat_mlp"));
    output_dim_ = concat_mlp_->output_dim();
    if (output_dim > 0) {
      CheckLinearSize(output_dim_, output_dim, std::string(kWhere) + ".output_dim");
      output_ = register_module("output", torch::nn::Linear(torch::nn::LinearOptions(output_dim_, output_dim).bias(false)));
      output_dim_ = output_dim;
    }
  }

  // user [B, Du], sequence [B, T, Ds], lengths [B] -> interests [B, K, D] and their mask.
  CapsuleOutput forward(const at::Tensor& user, at::Tensor sequence, const at::Tensor& lengths) {
    const at::Tensor u = user_mlp_->forward(user);
    // A batch without history steps: one zero step (masked) keeps the step MLP's statistics defined.
    if (sequence.size(1) == 0) sequence = at::constant_pad_nd(sequence, {0, 0, 0, 1}, 0.0);
    if (hist_mlp_) sequence = hist_mlp_->forward(sequence);
    CapsuleOutput capsules = capsule_->forward(sequence, lengths);
    const at::Tensor mask = capsules.mask.unsqueeze(2).to(u.scalar_type());
    const int64_t k = capsules.interests.size(1);
    at::Tensor interests = at::cat({u.unsqueeze(1).expand({u.size(0), k, u.size(1)}), capsules.interests}, 2) * mask;
    interests = concat_mlp_->forward(interests.reshape({-1, interests.size(2)})).reshape({u.size(0), k, -1}) * mask;
    if (output_) interests = output_->forward(interests);
    if (cosine_) {
      namespace F = torch::nn::functional;
      interests = F::normalize(interests, F::NormalizeFuncOptions().p(2.0).dim(-1));
    }
    return {interests, capsules.mask};
  }

  std::string Script(ScriptWriter& w, const std::string& user, const std::string& sequence, const std::string& lengths) const {
    const std::string u = user_mlp_->Script(w, user, false, "user_tower_user_mlp");
    std::string h = sequence;
    if (hist_mlp_) h = hist_mlp_->Script(w, h, true, "user_tower_hist_seq_mlp");
    const auto [capsules, capsule_mask] = capsule_->Script(w, h, lengths, "user_tower_capsule");
    const std::string mask = w.Let("user_tower_interest_mask", capsule_mask + ".unsqueeze(2).float()");
    const std::string k = std::to_string(capsule_->max_k());
    std::string x = w.Let("user_tower_concat", "torch.cat([" + u + ".unsqueeze(1).expand([" + u + ".size(0), " + k + ", " + u +
                                                   ".size(1)]), " + capsules + "], 2) * " + mask);
    x = w.Let("user_tower_concat_rows", "torch.reshape(" + x + ", [-1, " + x + ".size(2)])");
    x = concat_mlp_->Script(w, x, "user_tower_concat_mlp");
    x = w.Let("user_tower_interests", "torch.reshape(" + x + ", [" + u + ".size(0), " + k + ", -1]) * " + mask);
    if (output_) x = ScriptLinear(w, *output_, x, "user_tower_output");
    // As torch::nn::functional::normalize computes it (eps 1e-12).
    if (cosine_) x = w.Let("user_tower_normalized", "torch.div(" + x + ", torch.clamp_min(torch.norm(" + x + ", 2.0, [-1], True), 1e-12))");
    return x;
  }

  int64_t max_k() const { return capsule_->max_k(); }
  int64_t output_dim() const { return output_dim_; }

 private:
  bool cosine_;
  HeadedMlp user_mlp_{nullptr};
  HeadedMlp hist_mlp_{nullptr};
  CapsuleLayer capsule_{nullptr};
  MLP concat_mlp_{nullptr};
  torch::nn::Linear output_{nullptr};
  int64_t output_dim_ = 0;
};
TORCH_MODULE(MindUserTower);

class MIND : public TwoTowerModel {
 public:
  explicit MIND(const ModelContext& context)
      : TwoTowerModel(context, MindSpec(context.config->mind())), simi_pow_(context.config->mind().simi_pow()) {
    const protos::MIND& config = context.config->mind();
    if (!(simi_pow_ > 0) || !std::isfinite(simi_pow_)) Fail(kWhere, ".simi_pow must be a finite number > 0, got ", simi_pow_);
    if (!config.item_tower().has_mlp()) Fail(kWhere, ".item_tower.mlp is required");
    if (tower() == "item") return;
    const std::string& user_group = spec().user.groups[0];
    const std::string& hist_group = spec().user.groups[1];
    if (!embedding_group().HasGroup(user_group)) {
      Fail(kWhere, ".user_tower.input: '", user_group, "' is not a DEEP feature group of model_config.feature_groups");
    }
    bool sequence_group = false;
    for (const auto& group : this->config().feature_groups()) {
      if (group.group_name() == hist_group) sequence_group = group.group_type() == protos::SEQUENCE;
    }
    if (!sequence_group || !embedding_group().HasSequenceGroup(hist_group)) {
      Fail(kWhere, ".user_tower.history_input: '", hist_group,
           "' is not a SEQUENCE feature group of model_config.feature_groups");
    }
    user_ = register_module("user_tower", MindUserTower(config.user_tower(), InputDim(user_group),
                                                        embedding_group().SequenceDim(hist_group), config.output_dim(),
                                                        config.similarity() == protos::COSINE));
    if (tower().empty() && user_->output_dim() != TowerOutputShape("item")[0]) {
      Fail(kWhere, ": the user interests are ", user_->output_dim(), " wide and the item embedding ",
           TowerOutputShape("item")[0], " (set output_dim, or make concat_mlp and item_tower.mlp end alike)");
    }
  }

  std::vector<int64_t> TowerOutputShape(const std::string& tower) const override {
    if (tower != "user") return TwoTowerModel::TowerOutputShape(tower);
    if (!user_) Model::TowerOutputShape(tower);
    return {user_->max_k(), user_->output_dim()};
  }

 protected:
  at::Tensor TowerEmbedding(const std::string& tower, const std::map<std::string, at::Tensor>& inputs) override {
    if (tower != "user") return TwoTowerModel::TowerEmbedding(tower, inputs);
    return Interests(inputs).interests;
  }

  // Label-aware attention over the active interests with each row's positive item.
  at::Tensor UserForScoring(const std::map<std::string, at::Tensor>& inputs, const at::Tensor& item,
                            int64_t batch_size) override {
    const CapsuleOutput user = Interests(inputs);
    const at::Tensor positive = item.slice(0, 0, batch_size).unsqueeze(2);             // [B, D, 1]
    at::Tensor weight = at::bmm(user.interests, positive).squeeze(2) * simi_pow_;       // [B, K]
    weight = at::softmax(weight.masked_fill(user.mask.logical_not(), -std::numeric_limits<double>::infinity()), 1);
    return at::sum(weight.unsqueeze(2) * user.interests, 1);
  }

  std::string ScriptTower(ScriptWriter& w, const std::map<std::string, std::string>& inputs,
                          const std::string& tower) const override {
    if (tower != "user") return TwoTowerModel::ScriptTower(w, inputs, tower);
    const std::string& hist = spec().user.groups[1];
    return user_->Script(w, inputs.at(spec().user.groups[0]), inputs.at(hist + ".sequence"),
                         inputs.at(hist + ".sequence_length"));
  }

 private:
  CapsuleOutput Interests(const std::map<std::string, at::Tensor>& inputs) {
    const std::string& hist = spec().user.groups[1];
    return user_->forward(inputs.at(spec().user.groups[0]), inputs.at(hist + ".sequence"),
                          inputs.at(hist + ".sequence_length"));
  }

  double simi_pow_;
  MindUserTower user_{nullptr};
};

std::shared_ptr<Model> MakeMIND(const ModelContext& context) { return std::make_shared<MIND>(context); }

}  // namespace

TZREC_REGISTER(ModelRegistry(), "mind", MakeMIND, "user_tower.input", "user_tower.history_input",
               "user_tower.user_mlp.hidden_units", "user_tower.user_mlp.activation", "user_tower.user_mlp.use_bn",
               "user_tower.user_mlp.dropout_ratio", "user_tower.hist_seq_mlp.hidden_units",
               "user_tower.hist_seq_mlp.activation", "user_tower.hist_seq_mlp.use_bn",
               "user_tower.hist_seq_mlp.dropout_ratio", "user_tower.hist_seq_mlp.bias", "user_tower.capsule_config.*",
               "user_tower.concat_mlp.*", "item_tower.input", "item_tower.mlp.*", "output_dim", "similarity",
               "temperature", "in_batch_negative", "simi_pow");

}  // namespace tzrec
