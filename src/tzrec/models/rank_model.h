// RankModel: shared head of single-task ranking models.
//
// Turns the final [B, num_class] output into predictions ("logits", "probs"), computes the
// configured losses (binary_cross_entropy, with label smoothing and sample weights) and
// metrics (auc) against the first label field, like TorchEasyRec's RankModel.
#pragma once

#include <memory>

#include "tzrec/metrics/auc.h"
#include "tzrec/models/model.h"

namespace tzrec {

class RankModel : public Model {
 public:
  RankModel(const protos::ModelConfig& config, std::vector<const Feature*> features,
            std::vector<std::string> labels, std::vector<std::string> sample_weights);

  std::map<std::string, at::Tensor> ComputeLoss(const Predictions& predictions,
                                                const Batch& batch) override;
  void UpdateMetrics(const Predictions& predictions, const Batch& batch) override;
  std::map<std::string, double> ComputeMetrics() override;
  void ResetMetrics() override;
  std::vector<double> MetricState() const override;
  void SetMetricState(const std::vector<double>& state) override;

 protected:
  // y: [B, num_class] -> predictions.
  Predictions OutputToPrediction(const at::Tensor& y) const;
  int64_t num_class() const { return num_class_; }

 private:
  int64_t num_class_ = 1;
  std::string label_name_;
  std::string weight_name_;
  struct NamedAuc {
    std::string name;
    std::unique_ptr<BinnedAuc> auc;
  };
  std::vector<NamedAuc> aucs_;
  // Mean loss over eval batches, weighted by batch size.
  std::map<std::string, std::pair<double, double>> loss_sums_;
};

}  // namespace tzrec
