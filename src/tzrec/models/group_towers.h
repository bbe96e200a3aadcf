// GroupTowers: the per-feature-group MLP towers of multi_tower and multi_tower_din. Tower i
// reads DEEP group `towers[i].input` (pooled features and sequence encoders, as
// Model::BuildInput gives it) through its `mlp`, or passes the group through without one.
// Children are named "<i>" (so a model registering this as "towers" has "towers.<i>.mlp...").
// One thread at a time.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tzrec/common/error.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/protos/tower.pb.h"

namespace tzrec {

class GroupTowersImpl : public torch::nn::Module {
 public:
  // `input_dim(group)`: the group's width, or -1 when it is no DEEP group.
  GroupTowersImpl(const google::protobuf::RepeatedPtrField<protos::Tower>& towers,
                  const std::function<int64_t(const std::string&)>& input_dim, const std::string& where) {
    for (int t = 0; t < towers.size(); ++t) {
      const auto& tower = towers.Get(t);
      const std::string tower_where = StrCat(where, "[", t, "]");
      const int64_t in = input_dim(tower.input());
      if (in < 0) Fail(tower_where, ".input: no DEEP feature group '", tower.input(), "'");
      inputs_.push_back(tower.input());
      if (tower.has_mlp()) {
        mlps_.push_back(register_module(std::to_string(t), MLP(in, tower.mlp(), tower_where + ".mlp")));
        output_dim_ += mlps_.back()->output_dim();
      } else {
        mlps_.push_back(nullptr);
        output_dim_ += in;
      }
    }
  }
  int64_t output_dim() const { return output_dim_; }
  // Each tower's output, in config order.
  std::vector<at::Tensor> forward(const std::map<std::string, at::Tensor>& inputs) {
    std::vector<at::Tensor> out;
    for (size_t t = 0; t < inputs_.size(); ++t) {
      const at::Tensor& in = inputs.at(inputs_[t]);
      out.push_back(mlps_[t] ? mlps_[t]->forward(in) : in);
    }
    return out;
  }
  // The same as TorchScript over the group locals (Model::ScriptInput); one local per tower.
  std::vector<std::string> Script(ScriptWriter& w, const std::map<std::string, std::string>& inputs) const {
    std::vector<std::string> out;
    for (size_t t = 0; t < inputs_.size(); ++t) {
      const std::string& in = inputs.at(inputs_[t]);
      out.push_back(mlps_[t] ? mlps_[t]->Script(w, in, "tower_" + std::to_string(t)) : in);
    }
    return out;
  }

 private:
  std::vector<std::string> inputs_;
  std::vector<MLP> mlps_;
  int64_t output_dim_ = 0;
};
TORCH_MODULE(GroupTowers);

}  // namespace tzrec
