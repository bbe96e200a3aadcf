// TensorBoard event files of training and evaluation, read back by an independent Python
// reader (tests/interop/read_tfevents.py: its own CRC-32C and protobuf decoding).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/tensorboard.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

using testing::TempDir;

// The events of every events.out.tfevents.* file in `dir` (not below it), as the reader prints them.
std::vector<nlohmann::json> ReadEvents(const std::string& dir) {
  std::vector<nlohmann::json> events;
  int files = 0;
  for (const std::string& name : ListDirectory(dir)) {
    if (name.rfind("events.out.tfevents.", 0) != 0) continue;
    ++files;
    const std::string command = "/usr/bin/python3 " + testing::SourceDir() + "/tests/interop/read_tfevents.py '" +
                                JoinPath(dir, name) + "' 2>&1";
    FILE* pipe = popen(command.c_str(), "r");
    EXPECT_NE(pipe, nullptr);
    std::string output;
    char buffer[4096];
    size_t n;
    while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
    EXPECT_EQ(pclose(pipe), 0) << output;
    std::istringstream lines(output);
    std::string line;
    while (std::getline(lines, line)) events.push_back(nlohmann::json::parse(line));
  }
  EXPECT_EQ(files, 1) << dir;
  return events;
}

// gradient_norm: each dense parameter's gradient norm at the logged steps (tables have none);
// global_gradient_norm: the norm of those norms. Checked against the last step's gradients.
TEST(TensorBoard, GradientNormsOfTheDenseParameters) {
  TempDir dir;
  auto options = SmallTrainOnlyOptions(dir, R"({"train_config.use_tensorboard": true, "train_config.num_steps": 3,
      "train_config.log_step_count_steps": 1, "train_config.save_checkpoints_steps": 100,
      "train_config.tensorboard_summaries": ["global_gradient_norm", "gradient_norm"]})");
  TrainAndEvaluate(options);
  std::map<std::string, std::map<int64_t, double>> scalars;
  for (const auto& e : ReadEvents(dir.File("model"))) {
    if (e.contains("tag")) scalars[e["tag"].get<std::string>()][e["step"].get<int64_t>()] = e["value"].get<double>();
  }
  ASSERT_EQ(scalars["global_gradient_norm"].size(), 3u);
  int per_parameter = 0;
  for (int64_t step = 0; step < 3; ++step) {
    double squares = 0.0;
    for (const auto& [tag, values] : scalars) {
      if (tag.size() < 14 || tag.substr(tag.size() - 14) != "/gradient_norm") continue;
      EXPECT_EQ(tag.find("embedding_group"), std::string::npos) << tag;
      ASSERT_TRUE(values.count(step)) << tag;
      squares += values.at(step) * values.at(step);
      if (step == 0) ++per_parameter;
    }
    EXPECT_NEAR(scalars["global_gradient_norm"][step], std::sqrt(squares), 1e-4 * std::sqrt(squares)) << step;
    EXPECT_GT(squares, 0.0);
  }
  EXPECT_GE(per_parameter, 4);  // the MLP weights and biases at least
}

// parameter / gradient: histograms of the dense parameters and their gradients; the last
// step's parameter histograms describe the final checkpoint's tensors exactly.
TEST(TensorBoard, ParameterAndGradientHistograms) {
  TempDir dir;
  auto options = SmallTrainOnlyOptions(dir, R"({"train_config.use_tensorboard": true, "train_config.num_steps": 3,
      "train_config.log_step_count_steps": 1, "train_config.tensorboard_summaries": ["parameter", "gradient"]})");
  TrainAndEvaluate(options);
  std::map<std::string, nlohmann::json> last;  // tag -> histogram at step 2
  for (const auto& e : ReadEvents(dir.File("model"))) {
    if (e.contains("histo") && e["step"].get<int64_t>() == 2) last[e["tag"].get<std::string>()] = e["histo"];
  }
  auto checkpoint = LoadCheckpointTensors(ListCheckpoints(dir.File("model")).back().path);
  int checked = 0;
  for (const auto& [name, tensor] : checkpoint) {
    if (name.rfind("embedding_group.", 0) == 0 || tensor.scalar_type() != at::kFloat) continue;
    ASSERT_TRUE(last.count(name)) << name;
    ASSERT_TRUE(last.count(name + "/gradient")) << name;
    const nlohmann::json& h = last.at(name);
    EXPECT_EQ(h["num"].get<double>(), static_cast<double>(tensor.numel())) << name;
    EXPECT_EQ(h["min"].get<double>(), tensor.min().item<double>()) << name;
    EXPECT_EQ(h["max"].get<double>(), tensor.max().item<double>()) << name;
    EXPECT_NEAR(h["sum"].get<double>(), tensor.sum().item<double>(), 1e-4 + 1e-4 * tensor.abs().sum().item<double>())
        << name;
    double in_buckets = 0.0;
    for (double c : h["bucket"].get<std::vector<double>>()) in_buckets += c;
    EXPECT_EQ(in_buckets, static_cast<double>(tensor.numel())) << name;
    const auto limits = h["bucket_limit"].get<std::vector<double>>();
    ASSERT_EQ(limits.size(), h["bucket"].size()) << name;
    EXPECT_TRUE(std::is_sorted(limits.begin(), limits.end())) << name;
    EXPECT_GT(limits.back(), h["max"].get<double>()) << name;  // each bucket ends above its values
    EXPECT_EQ(last.at(name + "/gradient")["num"].get<double>(), static_cast<double>(tensor.numel())) << name;
    ++checked;
  }
  EXPECT_GE(checked, 4);
}

TEST(TensorBoard, Crc32cMatchesTheCastagnoliCheckValue) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

// use_tensorboard (TorchEasyRec's default: true): losses and learning rates at every logged
// step in model_dir, each evaluation's metrics in model_dir/eval_val, `tzrec eval`'s in
// model_dir/eval, named as TorchEasyRec names them.
TEST(TensorBoard, TrainingAndEvaluationWriteEventFilesTensorBoardReads) {
  TempDir dir;
  const std::string config = WriteSmallConfig(dir);
  auto options = SmallOptions(dir, config, dir.File("model"));
  options.edit_config_json = R"({"train_config.use_tensorboard": true, "train_config.log_step_count_steps": 4,
                                 "train_config.tensorboard_summaries": ["loss"]})";
  TrainAndEvaluate(options);

  std::vector<nlohmann::json> train = ReadEvents(dir.File("model"));
  ASSERT_FALSE(train.empty());
  EXPECT_EQ(train[0].value("file_version", ""), "brain.Event:2");
  std::map<std::string, std::set<int64_t>> steps_of;
  for (const auto& e : train) {
    if (e.contains("tag")) steps_of[e["tag"].get<std::string>()].insert(e["step"].get<int64_t>());
    EXPECT_GT(e["wall_time"].get<double>(), 1.6e9);
  }
  const std::set<int64_t> logged = {0, 4, 8, 12, 16};
  EXPECT_EQ(steps_of["loss/binary_cross_entropy"], logged);
  EXPECT_EQ(steps_of["loss/total"], logged);
  EXPECT_EQ(steps_of["lr/g0"], logged);
  EXPECT_EQ(steps_of["lr/g1"], logged);
  for (const auto& e : train) {
    if (e.value("tag", "") == "lr/g0") EXPECT_NEAR(e["value"].get<double>(), 0.05, 1e-7);
    if (e.value("tag", "") == "loss/total") EXPECT_GT(e["value"].get<double>(), 0.0);
  }

  // Evaluations after the checkpoints at steps 10 and 19: the same AUC as the result file.
  std::vector<nlohmann::json> evals = ReadEvents(dir.File("model/eval_val"));
  std::map<int64_t, double> auc;
  for (const auto& e : evals) {
    if (e.value("tag", "") == "metric/auc") auc[e["step"].get<int64_t>()] = e["value"].get<double>();
  }
  ASSERT_EQ(auc.size(), 2u);
  std::istringstream results(ReadFileToString(dir.File("model/train_eval_result_v2.txt")));
  std::string line;
  while (std::getline(results, line)) {
    const auto result = nlohmann::json::parse(line);
    const int64_t step = result["global_step"].get<int64_t>();
    ASSERT_TRUE(auc.count(step)) << step;
    EXPECT_NEAR(auc[step], result["auc"].get<double>(), 1e-6);
  }

  EvalOptions eval;
  eval.pipeline_config_path = dir.File("model/pipeline.config");
  eval.eval_input_path = dir.File("data/eval/*.csv");
  const auto metrics = Evaluate(eval);
  std::vector<nlohmann::json> eval_events = ReadEvents(dir.File("model/eval"));
  bool found = false;
  for (const auto& e : eval_events) {
    if (e.value("tag", "") != "metric/auc") continue;
    found = true;
    EXPECT_EQ(e["step"].get<int64_t>(), 19);
    EXPECT_NEAR(e["value"].get<double>(), metrics.at("auc"), 1e-6);
  }
  EXPECT_TRUE(found);

  // An unknown summary is refused by name.
  auto histograms = SmallOptions(dir, config, dir.File("other"));
  histograms.edit_config_json = R"({"train_config.tensorboard_summaries": ["losses"]})";
  EXPECT_TZREC_ERROR(TrainAndEvaluate(histograms), "'losses' is none of loss, learning_rate");
}

}  // namespace
}  // namespace tzrec
