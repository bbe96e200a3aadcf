#include "tzrec/train/train_summaries.h"

#include <algorithm>
#include <cmath>

#include "tzrec/common/strings.h"
#include "tzrec/optim/dense_optimizer.h"

namespace tzrec {

bool HasSummary(const protos::TrainConfig& train, const std::string& name) {
  return std::find(train.tensorboard_summaries().begin(), train.tensorboard_summaries().end(), name) !=
         train.tensorboard_summaries().end();
}

void WriteMetricScalars(EventWriter* writer, const std::map<std::string, double>& metrics, int64_t step) {
  if (!writer) return;
  for (const auto& [name, value] : metrics) writer->AddScalar("metric/" + name, value, step);
}

void WriteTrainSummaries(EventWriter* events, const protos::TrainConfig& train, const Trainer& trainer,
                         const Pipeline& pipeline, Model& model, const Trainer::LossValues& global, int64_t step) {
  for (const auto& [name, value] : global.losses) events->AddScalar("loss/" + name, value, step);
  events->AddScalar("loss/total", global.total, step);
  events->AddScalar("lr/g0", pipeline.sparse_optimizer->lr(), step);
  events->AddScalar("lr/g1", DenseLearningRate(*pipeline.dense_optimizer), step);
  for (size_t k = 0; k < pipeline.part_optimizers.size(); ++k) {
    events->AddScalar(StrCat("lr/g", k + 2), DenseLearningRate(*pipeline.part_optimizers[k].optimizer), step);
  }
  WriteMetricScalars(events, model.TrainMetricValues(), step);
  const bool global_norm = HasSummary(train, "global_gradient_norm");
  const bool norms = HasSummary(train, "gradient_norm");
  if (global_norm || norms) {
    double squares = 0.0;
    for (const auto& [name, norm] : trainer.GradientNorms()) {
      squares += norm * norm;
      if (norms) events->AddScalar(name + "/gradient_norm", norm, step);
    }
    if (global_norm) events->AddScalar("global_gradient_norm", std::sqrt(squares), step);
  }
  // Histograms of the dense parameters ("<name>") and their gradients ("<name>/gradient"),
  // as TorchEasyRec; tables are left out (TorchEasyRec logs only this rank's shard of
  // sharded ones, and our fused tables have no gradient tensor).
  const bool parameters = HasSummary(train, "parameter"), gradients = HasSummary(train, "gradient");
  if (parameters || gradients) {
    for (const auto& item : model.named_parameters()) {
      const std::string& name = item.key();
      if (name.rfind("embedding_group.", 0) == 0) continue;
      if (parameters) {
        at::Tensor p = item.value().detach().contiguous();
        events->AddHistogram(name, p.data_ptr<float>(), p.numel(), step);
      }
      if (gradients && item.value().grad().defined()) {
        at::Tensor g = item.value().grad().contiguous();
        events->AddHistogram(name + "/gradient", g.data_ptr<float>(), g.numel(), step);
      }
    }
  }
}

}  // namespace tzrec
