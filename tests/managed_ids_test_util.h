// Checks shared by the tests of tables whose raw ids reach rows through an index of their own
// (zch, dynamicemb): a run resumed from a checkpoint ends bit for bit where a straight one
// does, and an export predicts as its checkpoint does. Not thread-safe (tests only).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tzrec/train/trainer.h"

namespace tzrec::testing {

// Options of one leg: `steps` in total, continuing the model dir or not, under model dir `name`.
using LegOptions = std::function<TrainEvalOptions(int64_t steps, bool continue_train, const std::string& name)>;

// The straight run's first and last checkpoints.
struct StraightCheckpoints {
  std::map<std::string, at::Tensor> first, last;
};

// Trains `steps` straight (model dir "straight") and as `first_leg` steps then --continue_train
// (model dir "resumed"), deterministically; expects every tensor of the two last checkpoints
// equal and at least `min_marked` of them to have `marker` in their name (the index's state).
StraightCheckpoints ExpectResumeIsBitForBit(const LegOptions& options, const TempDir& dir, int64_t first_leg,
                                            int64_t steps, const std::string& marker, int min_marked);

// Exports the latest checkpoint of `model_dir` with tables quantised as QUANT_EMB `quant_emb`
// ("0": fp32; into dir/export_<quant_emb>) and expects predict from the export within
// `tolerance` of predict from the checkpoint on `input`. Returns the manifest.
nlohmann::json ExpectExportPredictsLikeCheckpoint(const TempDir& dir, const std::string& model_dir,
                                                  const std::string& input, const std::string& quant_emb = "0",
                                                  double tolerance = 1e-6);

}  // namespace tzrec::testing
