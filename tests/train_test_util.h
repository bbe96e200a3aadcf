// Helpers of the training tests: a small fast config with generated data, options for it,
// checkpoint weights, a deterministic runtime, and running a shell command.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace testing {

// Runs `command` with stderr merged into the output; sets the exit code (-1 when signalled).
std::string Shell(const std::string& command, int* exit_code);
std::vector<nlohmann::json> ReadJsonLines(const std::string& path);
// The last line of <model_dir>/train_eval_result_v2.txt (a test failure, and {}, when none).
nlohmann::json LastEvalResult(const std::string& model_dir);

// A small DeepFM config (20 steps of 64, checkpoints every 10) written to dir/small.config,
// with generated data under dir/data (1000 train rows in 2 files, 300 eval rows).
std::string WriteSmallConfig(const TempDir& dir, const std::string& dataset_type = "CsvDataset");
// Trains the small config (WriteSmallConfig) into dir/model and exports its last checkpoint
// to dir/export with the default (INT8) pooled tables; returns dir/export.
std::string TrainAndExportSmallModel(const TempDir& dir);
// Exports the last checkpoint of the model dir holding `pipeline_config` to `export_dir`
// (QUANT_* not read from the environment) and returns the export's manifest.
nlohmann::json ExportLatest(const std::string& pipeline_config, const std::string& export_dir);
TrainEvalOptions SmallOptions(const TempDir& dir, const std::string& config,
                              const std::string& model_dir);
// The small config (WriteSmallConfig) trained into dir/model with `edits`, without evaluation.
TrainEvalOptions SmallTrainOnlyOptions(const TempDir& dir, const std::string& edits);
// gen_data output for `config` (3000 train and 600 eval Parquet rows, histories of at most 12
// steps) in dir/data, and options that train `config_path` on it into dir/model.
TrainEvalOptions MockDataOptions(const TempDir& dir, const protos::EasyRecConfig& config,
                                 const std::string& config_path);
// The planted-data tests' config head: Parquet data in batches of 512 with `label_fields`
// (config text: `"clk"` or `["clk", "buy"]`), id features u, i, c (20, 30, 10 ids, dim 8)
// and raw r, Adagrad 0.05 for the tables, Adam `dense_lr`, `num_epochs`, no TensorBoard.
std::string PlantedFeatures(const std::string& label_fields, int num_epochs, double dense_lr);
// `config_text` written to dir/pipeline.config, planted data for it in dir/data (gen_data with
// a first-order signal of variance 4 and no pairwise interactions, Parquet), trained into
// dir/model. Returns the last eval result and gen_data's oracle.json.
struct PlantedRun {
  nlohmann::json result;
  nlohmann::json oracle;
};
PlantedRun TrainOnPlantedData(const TempDir& dir, const std::string& config_text, int64_t train_rows,
                              int64_t eval_rows);
// The weights of a checkpoint (table optimizer state left out).
std::map<std::string, at::Tensor> LoadModelFile(const std::string& checkpoint);
// Seeded, deterministic algorithms (bit-identical reruns).
void DeterministicRuntime();

}  // namespace testing
}  // namespace tzrec
