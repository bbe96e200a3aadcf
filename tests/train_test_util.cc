#include "train_test_util.h"

#include "tzrec/common/strings.h"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "tzrec/common/fs.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/runtime.h"

namespace tzrec {
namespace testing {

std::string Shell(const std::string& command, int* exit_code) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  int status = pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return output;
}

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

nlohmann::json LastEvalResult(const std::string& model_dir) {
  std::vector<nlohmann::json> lines = ReadJsonLines(model_dir + "/train_eval_result_v2.txt");
  EXPECT_FALSE(lines.empty()) << model_dir;
  return lines.empty() ? nlohmann::json::object() : lines.back();
}

std::string WriteSmallConfig(const TempDir& dir, const std::string& dataset_type) {
  std::string text = R"(
    model_dir: "unused"
    train_config {
      sparse_optimizer { adagrad_optimizer { lr: 0.05 } constant_learning_rate {} }
      dense_optimizer { adam_optimizer { lr: 0.002 } constant_learning_rate {} }
      num_steps: 20
      save_checkpoints_steps: 10
      log_step_count_steps: 5
      use_tensorboard: false
    }
    data_config { batch_size: 64 dataset_type: CsvDataset with_header: true label_fields: "label"
                  num_workers: 2 shuffle: true shuffle_buffer_size: 4 }
    feature_configs { raw_feature { feature_name: "x" } }
    feature_configs { id_feature { feature_name: "c0" num_buckets: 50 embedding_dim: 4 } }
    feature_configs { id_feature { feature_name: "c1" num_buckets: 30 embedding_dim: 4 pooling: "mean" } }
    model_config {
      feature_groups { group_name: "wide" feature_names: ["c0", "c1"] group_type: WIDE }
      feature_groups { group_name: "fm" feature_names: ["c0", "c1"] }
      feature_groups { group_name: "deep" feature_names: ["x", "c0", "c1"] }
      deepfm { deep { hidden_units: [16, 8] dropout_ratio: 0.1 } final { hidden_units: [4] } }
      losses { binary_cross_entropy {} }
      metrics { auc {} }
    })";
  const size_t at = text.find("CsvDataset");
  text.replace(at, std::string("CsvDataset").size(), dataset_type);
  std::string path = dir.File("small.config");
  WriteFile(path, text);
  auto config = LoadPipelineConfig(path);
  GenDataOptions options;
  options.output_dir = dir.File("data");
  options.train_rows = 1000;  // 16 batches of 64 per pass: step mode crosses an epoch boundary
  options.eval_rows = 300;
  options.num_files = 2;
  GenerateMockData(config, options);
  return path;
}

TrainEvalOptions SmallOptions(const TempDir& dir, const std::string& config,
                              const std::string& model_dir) {
  TrainEvalOptions options;
  options.pipeline_config_path = config;
  options.model_dir = model_dir;
  options.train_input_path = dir.File("data/train/*.csv");
  options.eval_input_path = dir.File("data/eval/*.csv");
  return options;
}

TrainEvalOptions SmallTrainOnlyOptions(const TempDir& dir, const std::string& edits) {
  TrainEvalOptions options = SmallOptions(dir, WriteSmallConfig(dir), dir.File("model"));
  options.eval_input_path.clear();
  options.edit_config_json = edits;
  return options;
}

TrainEvalOptions MockDataOptions(const TempDir& dir, const protos::EasyRecConfig& config,
                                 const std::string& config_path) {
  GenDataOptions gen;
  gen.output_dir = dir.File("data");
  gen.train_rows = 3000;
  gen.eval_rows = 600;
  gen.max_sequence_steps = 12;
  GenerateMockData(config, gen);
  TrainEvalOptions options;
  options.pipeline_config_path = config_path;
  options.model_dir = dir.File("model");
  options.train_input_path = dir.File("data/train/*.parquet");
  options.eval_input_path = dir.File("data/eval/*.parquet");
  return options;
}

std::map<std::string, at::Tensor> LoadModelFile(const std::string& checkpoint) {
  auto all = LoadCheckpointTensors(checkpoint);
  // Weights only: drop the optimizer state entries of tables (keep the ids of hash-stored ones).
  for (auto it = all.begin(); it != all.end();) {
    bool is_state = it->first.rfind("embedding_group.", 0) == 0 && !EndsWith(it->first, ".weight") &&
                    !EndsWith(it->first, ".weight.ids");
    it = is_state ? all.erase(it) : std::next(it);
  }
  return all;
}

std::string PlantedFeatures(const std::string& label_fields, int num_epochs, double dense_lr) {
  return StrCat(R"(
    data_config { batch_size: 512 dataset_type: ParquetDataset label_fields: )", label_fields, R"( }
    feature_configs { id_feature { feature_name: "u" num_buckets: 20 embedding_dim: 8 } }
    feature_configs { id_feature { feature_name: "i" num_buckets: 30 embedding_dim: 8 } }
    feature_configs { id_feature { feature_name: "c" num_buckets: 10 embedding_dim: 8 } }
    feature_configs { raw_feature { feature_name: "r" } }
    train_config {
      sparse_optimizer { adagrad_optimizer { lr: 0.05 } constant_learning_rate {} }
      dense_optimizer { adam_optimizer { lr: )", dense_lr, R"( } constant_learning_rate {} }
      num_epochs: )", num_epochs, R"( use_tensorboard: false
    })");
}

PlantedRun TrainOnPlantedData(const TempDir& dir, const std::string& config_text, int64_t train_rows,
                              int64_t eval_rows) {
  WriteFile(dir.File("pipeline.config"), config_text);
  GenDataOptions gen;
  gen.output_dir = dir.File("data");
  gen.train_rows = train_rows;
  gen.eval_rows = eval_rows;
  gen.first_order_variance = 4.0;
  gen.interaction_variance = 0.0;
  GenerateMockData(ParsePipelineConfigText(config_text, dir.File("pipeline.config")), gen);
  TrainEvalOptions options;
  options.pipeline_config_path = dir.File("pipeline.config");
  options.model_dir = dir.File("model");
  options.train_input_path = dir.File("data/train/*.parquet");
  options.eval_input_path = dir.File("data/eval/*.parquet");
  TrainAndEvaluate(options);
  return {LastEvalResult(dir.File("model")), nlohmann::json::parse(ReadFileToString(dir.File("data/oracle.json")))};
}

std::string TrainAndExportSmallModel(const TempDir& dir) {
  std::string config = WriteSmallConfig(dir);
  TrainAndEvaluate(SmallOptions(dir, config, dir.File("model")));
  ExportLatest(dir.File("model/pipeline.config"), dir.File("export"));
  return dir.File("export");
}

nlohmann::json ExportLatest(const std::string& pipeline_config, const std::string& export_dir) {
  ExportOptions options;
  options.pipeline_config_path = pipeline_config;
  options.export_dir = export_dir;
  options.quant_from_environment = false;
  ExportModel(options);
  return nlohmann::json::parse(ReadFileToString(JoinPath(export_dir, kExportManifestFile)));
}

void DeterministicRuntime() {
  setenv("TORCH_MANUAL_SEED", "11", 1);
  setenv("USE_DETERMINISTIC_ALGORITHMS", "1", 1);
  InitRuntime();
}

}  // namespace testing
}  // namespace tzrec
