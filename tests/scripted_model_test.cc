// scripted_model.pt: the TorchScript written for each module equals the module's own forward
// (every MLP layer kind, activation and norm); whole exported models with weighted, mean-pooled,
// shared and dense features give the loaded pipeline's predictions with FP32, FP16 and INT8
// tables; models without a TorchScript form export without one and say why.
#include <gtest/gtest.h>

#include <ATen/ops/abs.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randn.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/serialization/import.h>

#include <string>

#include "test_util.h"
#include "export_test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/modules/extraction_net.h"
#include "tzrec/modules/masknet.h"
#include "tzrec/modules/mlp.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/serving/predict.h"
#include "tzrec/serving/scripted_model.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

using testing::TempDir;

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return at::abs(a.to(at::kDouble) - b.to(at::kDouble)).max().item<double>();
}

TEST(ScriptWriter, LiteralsRoundTrip) {
  EXPECT_EQ(ScriptFloat(1), "1.0");
  EXPECT_EQ(ScriptFloat(0.1), "0.10000000000000001");
  EXPECT_EQ(ScriptFloat(1e-5), "1.0000000000000001e-05");
  EXPECT_EQ(ScriptIntList({-1, 4}), "[-1, 4]");
  ScriptWriter w;
  EXPECT_EQ(w.Let("data", "1"), "data_1");  // forward's argument names are never reused
  EXPECT_EQ(w.Tensor("t", at::zeros({2}), "k"), "self.t");
  EXPECT_EQ(w.Tensor("t", at::ones({2}), "k"), "self.t");  // one attribute per key
  EXPECT_EQ(w.Tensor("t", at::ones({2})), "self.t_1");
  EXPECT_THROW(w.Input("a\"b"), ScriptUnsupported);
}

TEST(ScriptedModel, MlpLayersMatchTheirModules) {
  torch::manual_seed(3);
  c10::NoGradGuard no_grad;
  const at::Tensor x = at::randn({9, 6});
  for (const char* activation : {"", "nn.ReLU", "nn.Sigmoid", "nn.Tanh", "nn.GELU", "nn.SiLU",
                                 "nn.ELU(alpha=0.5)", "nn.LeakyReLU(negative_slope=0.2)",
                                 "nn.PReLU", "torch.nn.PReLU(num_parameters=5)", "Dice"}) {
    for (int norm = 0; norm < 3; ++norm) {  // none, use_bn, use_ln
      SCOPED_TRACE(std::string(activation) + " norm " + std::to_string(norm));
      protos::MLP config;
      config.add_hidden_units(5);
      config.add_hidden_units(5);
      config.set_activation(activation);
      config.set_use_bn(norm == 1);
      config.set_use_ln(norm == 2);
      config.add_dropout_ratio(0.3);
      MLP mlp(6, config, "test");
      // Trained-looking parameters and batch statistics, not the initial ones.
      for (auto& p : mlp->parameters()) p.copy_(at::randn(p.sizes()));
      for (auto& b : mlp->buffers()) {
        if (b.is_floating_point()) b.copy_(at::rand(b.sizes()) + 0.5);
      }
      mlp->eval();
      ScriptWriter w;
      w.Output("y", mlp->Script(w, w.Let("x", w.Input("x")), "mlp"));
      torch::jit::Module module = ModuleFromScript(w);
      const at::Tensor got = RunScriptedModule(module, {{"x", x}}).at("y");
      EXPECT_LE(MaxAbsDiff(got, mlp->forward(x)), 1e-5);
    }
  }
}

// DBMTL's mask net (parallel and serial blocks, with a top MLP) and PLE's extraction networks
// (a middle layer with its shared gate, a final one) as TorchScript give their modules' outputs.
TEST(ScriptedModel, MaskNetAndExtractionNetMatchTheirModules) {
  torch::manual_seed(5);
  c10::NoGradGuard no_grad;
  const at::Tensor x = at::randn({7, 6});
  auto randomize = [](torch::nn::Module& module) {
    for (auto& p : module.parameters()) p.copy_(at::randn(p.sizes()));
    module.eval();
  };
  for (bool parallel : {true, false}) {
    SCOPED_TRACE(parallel ? "parallel" : "serial");
    protos::MaskNetModule config;
    config.set_n_mask_blocks(3);
    config.set_use_parallel(parallel);
    config.mutable_mask_block()->set_reduction_ratio(1.5);
    config.mutable_mask_block()->set_hidden_dim(parallel ? 4 : 6);
    config.mutable_top_mlp()->add_hidden_units(5);
    MaskNetModule net(6, config, "mask_net");
    randomize(*net);
    ScriptWriter w;
    w.Output("y", net->Script(w, w.Let("x", w.Input("x")), "mask_net"));
    torch::jit::Module module = ModuleFromScript(w);
    EXPECT_LE(MaxAbsDiff(RunScriptedModule(module, {{"x", x}}).at("y"), net->forward(x)), 1e-5);
  }
  protos::ExtractionNetwork config;
  config.set_expert_num_per_task(2);
  config.set_share_num(1);
  config.mutable_task_expert_net()->add_hidden_units(4);
  config.mutable_share_expert_net()->add_hidden_units(4);
  ExtractionNet middle(std::vector<int64_t>{6, 6}, int64_t{6}, config, false, std::string("middle"));
  ExtractionNet last(std::vector<int64_t>{4, 4}, int64_t{4}, config, true, std::string("last"));
  randomize(*middle);
  randomize(*last);
  ScriptWriter w;
  const std::string in = w.Let("x", w.Input("x"));
  auto [tasks, shared] = middle->Script(w, {in, in}, in, "middle");
  auto [outs, none] = last->Script(w, tasks, shared, "last");
  EXPECT_TRUE(none.empty());
  w.Output("t0", outs[0]);
  w.Output("t1", outs[1]);
  torch::jit::Module module = ModuleFromScript(w);
  auto got = RunScriptedModule(module, {{"x", x}});
  auto [task_out, shared_out] = middle->forward({x, x}, x);
  auto [final_out, unused] = last->forward(task_out, shared_out);
  EXPECT_LE(MaxAbsDiff(got.at("t0"), final_out[0]), 1e-5);
  EXPECT_LE(MaxAbsDiff(got.at("t1"), final_out[1]), 1e-5);
}

constexpr char kWeightedConfig[] = R"(
    model_dir: "unused"
    train_config {
      sparse_optimizer { adagrad_optimizer { lr: 0.05 } constant_learning_rate {} }
      dense_optimizer { adam_optimizer { lr: 0.01 } constant_learning_rate {} }
      num_steps: 12
      save_checkpoints_steps: 12
      use_tensorboard: false
    }
    data_config { batch_size: 64 dataset_type: CsvDataset with_header: true label_fields: "label"
                  num_workers: 1 fg_mode: FG_NORMAL }
    feature_configs { raw_feature { feature_name: "x" expression: "item:x" value_dim: 2 } }
    feature_configs { id_feature { feature_name: "c0" expression: "item:c0" num_buckets: 50 embedding_dim: 4 } }
    feature_configs { id_feature { feature_name: "c1" expression: "item:c1" num_buckets: 30 embedding_dim: 4 pooling: "mean"
                                   embedding_name: "shared" } }
    feature_configs { id_feature { feature_name: "w0" expression: "item:w0" num_buckets: 40 embedding_dim: 4 weighted: true } }
    feature_configs { id_feature { feature_name: "w1" expression: "item:w1" num_buckets: 30 embedding_dim: 4 weighted: true
                                   pooling: "mean" embedding_name: "shared" } }
    model_config {
      feature_groups { group_name: "wide" feature_names: ["c0", "c1", "w0", "w1"] group_type: WIDE }
      feature_groups { group_name: "fm" feature_names: ["c0", "c1", "w0", "w1"] }
      feature_groups { group_name: "deep" feature_names: ["x", "c0", "c1", "w0", "w1"] }
      @MODEL@
      losses { binary_cross_entropy {} }
      metrics { auc {} }
    })";

constexpr char kDeepFM[] = R"(deepfm { deep { hidden_units: [8, 4] use_bn: true activation: "nn.PReLU" } })";

// Trains kWeightedConfig with `model` (a few steps) and returns its model_dir's pipeline.config.
std::string TrainWeightedModel(const TempDir& dir, const std::string& model = kDeepFM) {
  const std::string path = dir.File("weighted.config");
  std::string text = kWeightedConfig;
  text.replace(text.find("@MODEL@"), 7, model);
  testing::WriteFile(path, text);
  GenDataOptions gen;
  gen.output_dir = dir.File("data");
  gen.train_rows = 800;
  gen.eval_rows = 64;
  GenerateMockData(LoadPipelineConfig(path), gen);
  TrainEvalOptions options = testing::SmallOptions(dir, path, dir.File("model"));
  TrainAndEvaluate(options);
  return dir.File("model/pipeline.config");
}

// The exports of `config` with every table storage run as the loaded pipeline does.
void ScriptedExportsMatchThePipeline(const TempDir& dir, const std::string& config) {
  c10::NoGradGuard no_grad;
  for (const char* quant : {"FP32", "FP16", "INT8"}) {
    SCOPED_TRACE(quant);
    ExportOptions options;
    options.pipeline_config_path = config;
    options.export_dir = dir.File(std::string("export_") + quant);
    options.quant_from_environment = false;
    options.quant_emb = quant;
    ExportModel(options);  // checks the fp32 module against the model on synthetic rows itself
    auto pipeline = LoadExportedPipeline(options.export_dir, PipelineMode::kPredict);
    torch::jit::Module module = torch::jit::load(JoinPath(options.export_dir, kScriptedModelFile));
    // Random weights, empty rows and ids across each table: every branch of the lookups.
    Batch batch = SyntheticBatch(pipeline->FeaturePointers(), 200, 7);
    Predictions expected = pipeline->model->Predict(batch);
    auto got = RunScriptedModule(module, ScriptedInputs(batch, pipeline->FeaturePointers()));
    ASSERT_EQ(got.size(), expected.size());
    for (const auto& [name, tensor] : expected) {
      SCOPED_TRACE(name);
      ASSERT_TRUE(got.count(name));
      EXPECT_LE(MaxAbsDiff(got.at(name), tensor), 1e-5);
    }
    // The file keeps the exported storage: INT8 codes are uint8 buffers, FP16 tables half.
    bool has_uint8 = false, has_half = false;
    for (const auto& buffer : module.buffers()) {
      has_uint8 = has_uint8 || buffer.scalar_type() == at::kByte;
      has_half = has_half || buffer.scalar_type() == at::kHalf;
    }
    EXPECT_EQ(has_uint8, std::string(quant) == "INT8");
    EXPECT_EQ(has_half, std::string(quant) != "FP32");
  }
}

TEST(ScriptedModel, WeightedMeanSharedAndDenseFeaturesInEveryTableDtype) {
  TempDir dir;
  ScriptedExportsMatchThePipeline(dir, TrainWeightedModel(dir));
}

TEST(ScriptedModel, MultiTowerWithAndWithoutTowerMlps) {
  TempDir dir;
  ScriptedExportsMatchThePipeline(dir, TrainWeightedModel(dir, R"(multi_tower {
      towers { input: "deep" mlp { hidden_units: [8] activation: "nn.Tanh" use_ln: true } }
      towers { input: "fm" }
      final { hidden_units: [4] } })"));
}

TEST(ScriptedModel, ModelsWithoutATorchScriptFormExportWithoutOne) {
  TempDir dir;
  const std::string config = TrainWeightedModel(dir);
  ExportOptions options;
  options.pipeline_config_path = config;
  options.export_dir = dir.File("export_off");
  options.quant_from_environment = false;
  options.write_scripted_model = false;
  ExportModel(options);
  EXPECT_FALSE(PathExists(dir.File("export_off/scripted_model.pt")));
  EXPECT_EQ(ReadExportManifest(options.export_dir)["scripted_model_skipped"], "--noscripted_model");

  // A retrieval model as a whole has no TorchScript form (its towers have): the export says so
  // instead of writing one.
  auto dssm = BuildFeatures(LoadPipelineConfig(testing::ReferenceConfig("dssm_mock.config")), PipelineMode::kPredict);
  BuildModel(dssm.get(), nullptr);
  const std::string why = WriteScriptedModel(*dssm->model, dssm->FeaturePointers(), {}, {}, dir.File("dssm.pt"));
  EXPECT_NE(why.find("a retrieval model is scripted as its towers"), std::string::npos) << why;
  EXPECT_FALSE(PathExists(dir.File("dssm.pt")));
}

// DIN: SEQUENCE groups (steps pooled per step, padded to the longest) and DIN attention in
// TorchScript give predict's outputs on real rows, in LibTorch and in Python torch.
TEST(ScriptedModel, DinSequenceGroupsAndAttention) {
  TempDir dir;
  const std::string din = testing::ReferenceConfig("multi_tower_din_mock.config");
  constexpr char kEdits[] = R"({"data_config.batch_size": 256, "train_config.num_epochs": 1,
      "feature_configs[id_feature.num_buckets>1000].id_feature.num_buckets": 1000})";
  auto din_config = LoadPipelineConfig(din);
  EditConfigJson(&din_config, kEdits);
  GenDataOptions gen;
  gen.output_dir = dir.File("din_data");
  gen.train_rows = 512;
  gen.eval_rows = 256;
  gen.max_sequence_steps = 5;
  auto data = GenerateMockData(din_config, gen);
  TrainEvalOptions train;
  train.pipeline_config_path = din;
  train.model_dir = dir.File("din_model");
  train.train_input_path = data.train_pattern;
  train.eval_input_path = data.eval_pattern;
  train.edit_config_json = kEdits;
  TrainAndEvaluate(train);
  ExportOptions options;
  options.pipeline_config_path = dir.File("din_model/pipeline.config");
  options.export_dir = dir.File("export_din");
  options.quant_from_environment = false;
  ExportModel(options);
  ASSERT_TRUE(PathExists(dir.File("export_din/scripted_model.pt")))
      << ReadExportManifest(options.export_dir).value("scripted_model_skipped", "");
  PredictOptions predict;
  predict.scripted_model_path = dir.File("export_din");
  predict.predict_input_path = data.eval_pattern;
  const auto expected = testing::RunPredict(predict, dir.File("pred"));
  EXPECT_LE(testing::CheckScriptedModel(dir.File("export_din"), data.eval_pattern, expected, dir), 1e-5);
}

}  // namespace
}  // namespace tzrec
