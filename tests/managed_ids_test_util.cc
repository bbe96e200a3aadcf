#include "managed_ids_test_util.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "export_test_util.h"
#include "train_test_util.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/serving/predict.h"
#include "tzrec/train/checkpoint.h"

namespace tzrec::testing {

StraightCheckpoints ExpectResumeIsBitForBit(const LegOptions& options, const TempDir& dir, int64_t first_leg,
                                            int64_t steps, const std::string& marker, int min_marked) {
  DeterministicRuntime();
  TrainAndEvaluate(options(steps, false, "straight"));
  DeterministicRuntime();
  TrainAndEvaluate(options(first_leg, false, "resumed"));
  DeterministicRuntime();
  TrainAndEvaluate(options(steps, true, "resumed"));
  const auto checkpoints = ListCheckpoints(dir.File("straight"));
  StraightCheckpoints out;
  EXPECT_GE(checkpoints.size(), 2u);
  if (checkpoints.size() < 2) return out;
  out.first = LoadCheckpointTensors(checkpoints.front().path);
  out.last = LoadCheckpointTensors(checkpoints.back().path);
  const auto resumed = LoadCheckpointTensors(ListCheckpoints(dir.File("resumed")).back().path);
  int marked = 0;
  for (const auto& [name, tensor] : out.last) {
    auto it = resumed.find(name);
    if (it == resumed.end()) {
      ADD_FAILURE() << name << " is missing from the resumed checkpoint";
      continue;
    }
    EXPECT_TRUE(torch::equal(tensor, it->second)) << name;
    marked += name.find(marker) != std::string::npos;
  }
  EXPECT_GE(marked, min_marked);
  return out;
}

nlohmann::json ExpectExportPredictsLikeCheckpoint(const TempDir& dir, const std::string& model_dir,
                                                  const std::string& input, const std::string& quant_emb,
                                                  double tolerance) {
  ExportOptions exporting;
  exporting.pipeline_config_path = model_dir + "/pipeline.config";
  exporting.quant_from_environment = false;
  exporting.quant_emb = quant_emb;
  exporting.export_dir = dir.File("export_" + quant_emb);
  ExportModel(exporting);
  PredictOptions from_export, from_checkpoint;
  from_export.scripted_model_path = exporting.export_dir;
  from_checkpoint.pipeline_config_path = exporting.pipeline_config_path;
  for (PredictOptions* p : {&from_export, &from_checkpoint}) p->predict_input_path = input;
  auto a = RunPredict(from_export, dir.File("pred_export_" + quant_emb));
  auto b = RunPredict(from_checkpoint, dir.File("pred_checkpoint_" + quant_emb));
  EXPECT_FALSE(a.empty());
  for (const auto& [name, values] : a) EXPECT_LE(MaxAbsDiff(values, b[name]), tolerance) << name;
  return ReadExportManifest(exporting.export_dir);
}

}  // namespace tzrec::testing
