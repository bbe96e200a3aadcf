#include "tzrec/models/rank_model.h"

#include <ATen/ops/binary_cross_entropy_with_logits.h>
#include <ATen/ops/sigmoid.h>

#include "tzrec/common/error.h"
#include "tzrec/loss/losses.h"

namespace tzrec {

RankModel::RankModel(const protos::ModelConfig& config, std::vector<const Feature*> features,
                     std::vector<std::string> labels, std::vector<std::string> sample_weights)
    : Model(config, std::move(features), std::move(labels), std::move(sample_weights)) {
  num_class_ = config.num_class();
  if (num_class_ != 1) {
    Fail("model_config.num_class: ", num_class_, " not supported yet (supported: 1)");
  }
  if (labels_.empty()) Fail("data_config.label_fields: a ranking model needs a label field");
  label_name_ = labels_[0];
  if (!sample_weights_.empty()) weight_name_ = sample_weights_[0];
  if (config.losses_size() == 0) Fail("model_config.losses: at least one loss is required");
  for (int i = 0; i < config.losses_size(); ++i) {
    if (!config.losses(i).has_binary_cross_entropy()) {
      Fail("model_config.losses[", i, "]: not supported yet (supported: binary_cross_entropy)");
    }
  }
  for (int i = 0; i < config.metrics_size(); ++i) {
    if (!config.metrics(i).has_auc()) {
      Fail("model_config.metrics[", i, "]: not supported yet (supported: auc)");
    }
    aucs_.push_back({"auc", std::make_unique<BinnedAuc>(config.metrics(i).auc().thresholds())});
  }
}

Predictions RankModel::OutputToPrediction(const at::Tensor& y) const {
  Predictions out;
  at::Tensor logits = y.squeeze(1);
  out["logits"] = logits;
  out["probs"] = at::sigmoid(logits);
  return out;
}

std::map<std::string, at::Tensor> RankModel::ComputeLoss(const Predictions& predictions,
                                                         const Batch& batch) {
  std::map<std::string, at::Tensor> losses;
  const at::Tensor& label = batch.labels.at(label_name_);
  at::Tensor weight;
  if (!weight_name_.empty()) weight = batch.sample_weights.at(weight_name_);
  for (const auto& loss : config_.losses()) {
    losses["binary_cross_entropy"] = BinaryCrossEntropyLoss(
        predictions.at("logits"), label, weight, loss.binary_cross_entropy().label_smoothing());
  }
  if (!is_training()) {
    for (const auto& kv : losses) {
      auto& sum = loss_sums_[kv.first];
      sum.first += kv.second.item<double>() * static_cast<double>(batch.size);
      sum.second += static_cast<double>(batch.size);
    }
  }
  return losses;
}

void RankModel::UpdateMetrics(const Predictions& predictions, const Batch& batch) {
  at::Tensor probs = predictions.at("probs").detach().contiguous();
  at::Tensor label = batch.labels.at(label_name_).contiguous();
  for (auto& named : aucs_) {
    named.auc->Update(probs.data_ptr<float>(), label.data_ptr<float>(), probs.numel());
  }
}

std::map<std::string, double> RankModel::ComputeMetrics() {
  std::map<std::string, double> values;
  for (auto& named : aucs_) values[named.name] = named.auc->Compute();
  for (const auto& kv : loss_sums_) {
    values[kv.first] = kv.second.second > 0 ? kv.second.first / kv.second.second : 0.0;
  }
  return values;
}

std::vector<double> RankModel::MetricState() const {
  std::vector<double> state;
  for (const auto& named : aucs_) named.auc->AppendState(&state);
  // Losses by their configured names, present or not on this rank.
  for (const auto& loss : config_.losses()) {
    (void)loss;
    auto it = loss_sums_.find("binary_cross_entropy");
    state.push_back(it == loss_sums_.end() ? 0.0 : it->second.first);
    state.push_back(it == loss_sums_.end() ? 0.0 : it->second.second);
  }
  return state;
}

void RankModel::SetMetricState(const std::vector<double>& state) {
  size_t offset = 0;
  for (auto& named : aucs_) named.auc->LoadState(state, &offset);
  for (const auto& loss : config_.losses()) {
    (void)loss;
    auto& sum = loss_sums_["binary_cross_entropy"];
    sum.first = state.at(offset++);
    sum.second = state.at(offset++);
  }
}

void RankModel::ResetMetrics() {
  for (auto& named : aucs_) named.auc->Reset();
  loss_sums_.clear();
}

}  // namespace tzrec
