// What training writes to TensorBoard, named as TorchEasyRec names it: metric scalars
// ("metric/<name>") and a logged step's losses, learning rates and tensorboard_summaries
// extras (gradient norms, parameter and gradient histograms). Not thread-safe: the training
// thread writes.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "tzrec/pipeline/pipeline.h"
#include "tzrec/protos/train.pb.h"
#include "tzrec/train/tensorboard.h"
#include "tzrec/train/trainer.h"

namespace tzrec {

// Whether train_config.tensorboard_summaries lists `name`.
bool HasSummary(const protos::TrainConfig& train, const std::string& name);

// "metric/<name>" scalars of `metrics` at `step`; nothing when `writer` is null.
void WriteMetricScalars(EventWriter* writer, const std::map<std::string, double>& metrics, int64_t step);

// The scalars (loss/<name>, loss/total, lr/g<i>, train metrics) and tensorboard_summaries
// extras of logged step `step`, from the global losses.
void WriteTrainSummaries(EventWriter* events, const protos::TrainConfig& train, const Trainer& trainer,
                         const Pipeline& pipeline, Model& model, const Trainer::LossValues& global, int64_t step);

}  // namespace tzrec
