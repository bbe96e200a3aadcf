// Exponential moving average of the dense parameters (train_config.dense_optimizer.ema), as
// TorchEasyRec's DenseEMA (torch.optim.swa_utils.AveragedModel with the EMA average):
// the first update copies the parameters, every later one moves each average towards its
// parameter, avg += (1 - decay) * (param - avg). Updated after every optimizer step;
// evaluation and export use the averages when eval_config / export_config.use_dense_ema says
// so (by default whenever ema is configured). Not thread-safe: the training thread owns it.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tzrec {

class DenseEma {
 public:
  // Checkpoint key of the update count, beside the parameters' names (as TorchEasyRec).
  static constexpr const char* kCountKey = "__n_averaged__";

  // `parameters`: the dense parameters by model path; `where` names the config field in errors.
  DenseEma(std::vector<std::pair<std::string, at::Tensor>> parameters, double decay,
           const std::string& where);

  void Update();
  // Averages <-> live parameters; calling it twice restores the live values.
  void Swap();
  // Forget the history: the averages become the parameters, the next update copies again.
  void Reset();
  int64_t updates() const { return updates_; }

  // {name: average} plus kCountKey, for checkpoints.
  std::map<std::string, at::Tensor> State() const;
  // Restores State() (checked: shapes equal, finite; every name present unless `partial`,
  // which keeps the current average of a name the state lacks); `file` names errors.
  void LoadState(const std::map<std::string, at::Tensor>& state, const std::string& file,
                 bool partial = false);

 private:
  std::vector<std::string> names_;
  std::vector<at::Tensor> parameters_;
  std::vector<at::Tensor> averages_;
  double decay_;
  int64_t updates_ = 0;
};

// Whether evaluation / export should use the averages: the config's use_dense_ema when set,
// else whether dense_optimizer.ema is configured (TorchEasyRec's rule).
template <typename StageConfig, typename TrainConfig>
bool UseDenseEma(const StageConfig& stage, const TrainConfig& train) {
  if (stage.has_use_dense_ema()) return stage.use_dense_ema();
  return train.dense_optimizer().has_ema();
}

}  // namespace tzrec
