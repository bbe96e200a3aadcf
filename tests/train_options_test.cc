// Training options of train_config: gradient accumulation (dense and table rows), dense
// gradient clipping, the dense EMA, and their exact resume.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>

#include "model_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/config/supported_fields.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/modules/fast_linear.h"
#include "tzrec/optim/dense_ema.h"
#include "tzrec/optim/dense_optimizer.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/tensor_archive.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

// A tiny DeepFM (no dropout, no batch norm: a batch's gradient is the mean of its rows'),
// with small tables so the rows of different batches meet.
std::string TinyDeepFM(const std::string& optimizers, const std::string& train_extra = "") {
  return R"(
  data_config { dataset_type: CsvDataset label_fields: "label" }
  feature_configs { id_feature { feature_name: "a" num_buckets: 5 embedding_dim: 4 } }
  feature_configs { id_feature { feature_name: "b" num_buckets: 7 embedding_dim: 4 } }
  feature_configs { raw_feature { feature_name: "d" } }
  train_config { )" + optimizers + " " + train_extra + R"( }
  model_config {
    feature_groups { group_name: "wide" feature_names: ["a", "b"] group_type: WIDE }
    feature_groups { group_name: "fm" feature_names: ["a", "b"] group_type: DEEP }
    feature_groups { group_name: "deep" feature_names: ["a", "b", "d"] group_type: DEEP }
    deepfm { deep { hidden_units: [8, 4] } wide_embedding_dim: 1 }
    losses { binary_cross_entropy {} }
  })";
}

ParsedBatch RandomRows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  ParsedBatch parsed;
  parsed.size = n;
  for (int64_t i = 0; i < n; ++i) {
    const int a_count = static_cast<int>(rng() % 3), b_count = 1 + static_cast<int>(rng() % 2);
    for (int k = 0; k < a_count; ++k) parsed.sparse["a"].values.push_back(rng() % 5);
    parsed.sparse["a"].lengths.push_back(a_count);
    for (int k = 0; k < b_count; ++k) parsed.sparse["b"].values.push_back(rng() % 7);
    parsed.sparse["b"].lengths.push_back(b_count);
    parsed.dense["d"].values.push_back(static_cast<float>(rng() % 100) / 50.0f - 1.0f);
    parsed.labels["label"].push_back(static_cast<float>(rng() % 2));
  }
  return parsed;
}

std::unique_ptr<Pipeline> Build(const std::string& config) {
  at::manual_seed(11);  // both sides of a comparison start from the same weights
  return testing::BuildTestPipeline(config);
}

// Dense parameters and table weights with their optimizer state, copied.
std::map<std::string, at::Tensor> Snapshot(Pipeline& pipeline) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : pipeline.model->named_parameters()) out[item.key()] = item.value().detach().clone();
  for (EmbeddingTable* t : pipeline.model->embedding_collection().tables()) {
    out[t->name()] = t->weight().clone();
    for (const auto& [name, state] : t->optimizer_state()) out[t->name() + "." + name] = state.clone();
  }
  return out;
}

void ExpectClose(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b,
                 double tolerance, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [name, tensor] : a) {
    ASSERT_TRUE(b.count(name)) << what << " " << name;
    const double diff = (tensor - b.at(name)).abs().max().item<double>();
    EXPECT_LE(diff, tolerance) << what << " " << name;
  }
}

bool AnyChanged(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
  for (const auto& [name, tensor] : a) {
    if (!torch::equal(tensor, b.at(name))) return true;
  }
  return false;
}

// gradient_accumulation_steps N: N steps of batch B (loss / N, table rows included) apply one
// update equal to one step of the concatenated batch N*B - with stateful optimizers on both
// sides (Adagrad rows, Adam dense, whose step count must advance once per update).
TEST(GradientAccumulation, NStepsOfBatchBEqualOneStepOfBatchNB) {
  const std::string optimizers =
      "sparse_optimizer { adagrad_optimizer { lr: 0.1 } constant_learning_rate {} } "
      "dense_optimizer { adam_optimizer { lr: 0.01 } constant_learning_rate {} }";
  auto accumulating = Build(TinyDeepFM(optimizers, "gradient_accumulation_steps: 3"));
  auto whole = Build(TinyDeepFM(optimizers));
  Trainer trainer_n(accumulating.get(), nullptr), trainer_1(whole.get(), nullptr);
  const auto start = Snapshot(*accumulating);
  ExpectClose(start, Snapshot(*whole), 0.0, "initial weights");
  for (int cycle = 0; cycle < 2; ++cycle) {
    const ParsedBatch rows = RandomRows(12, 100 + cycle);
    for (int part = 0; part < 3; ++part) {
      const auto before = Snapshot(*accumulating);
      Trainer::StepResult r = trainer_n.TrainStep(ToBatch(rows.Slice(part * 4, part * 4 + 4)), cycle * 3 + part, 0);
      EXPECT_TRUE(std::isfinite(r.total.item<double>()));
      // Nothing moves until the cycle's last step.
      if (part < 2) EXPECT_FALSE(AnyChanged(before, Snapshot(*accumulating))) << "cycle " << cycle << " part " << part;
    }
    ParsedBatch copy = rows.Slice(0, 12);
    trainer_1.TrainStep(ToBatch(std::move(copy)), cycle, 0);
    EXPECT_TRUE(AnyChanged(start, Snapshot(*accumulating)));
    ExpectClose(Snapshot(*accumulating), Snapshot(*whole), 2e-6, "cycle " + std::to_string(cycle));
    EXPECT_EQ(accumulating->sparse_optimizer->step(), cycle + 1);
  }
  // A partial cycle waits until ApplyAccumulatedGradients (what a checkpoint save calls).
  const auto before = Snapshot(*accumulating);
  trainer_n.TrainStep(ToBatch(RandomRows(4, 7)), 6, 0);
  EXPECT_FALSE(AnyChanged(before, Snapshot(*accumulating)));
  trainer_n.ApplyAccumulatedGradients(6);
  EXPECT_TRUE(AnyChanged(before, Snapshot(*accumulating)));
  EXPECT_EQ(accumulating->sparse_optimizer->step(), 3);
  trainer_n.ApplyAccumulatedGradients(6);  // nothing pending: no update
  EXPECT_EQ(accumulating->sparse_optimizer->step(), 3);
}

// grad_clipping on the dense gradients only, against hand computation: with dense SGD at lr 1
// one step moves each parameter by minus its (clipped) gradient, so an unclipped twin gives
// the gradients and the clipped run's moves must equal them clipped as torch's
// clip_grad_norm_ (norm 2, inf) / clip_grad_value_ do. Tables move the same with or without.
TEST(GradClipping, NormAndValueClipTheDenseGradients) {
  const std::string optimizers =
      "sparse_optimizer { sgd_optimizer { lr: 0.5 } constant_learning_rate {} } "
      "dense_optimizer { sgd_optimizer { lr: 1.0 momentum: 0 } constant_learning_rate {} }";
  const ParsedBatch rows = RandomRows(16, 5);
  auto plain = Build(TinyDeepFM(optimizers));
  const auto start = Snapshot(*plain);
  Trainer(plain.get(), nullptr).TrainStep(ToBatch(rows.Slice(0, 16)), 0, 0);
  const auto moved = Snapshot(*plain);
  std::map<std::string, at::Tensor> grads;
  double l2 = 0.0, linf = 0.0;
  for (const auto& item : plain->model->named_parameters()) {
    at::Tensor g = (start.at(item.key()) - moved.at(item.key())).to(at::kDouble);
    grads[item.key()] = g;
    l2 += g.pow(2).sum().item<double>();
    linf = std::max(linf, g.abs().max().item<double>());
  }
  l2 = std::sqrt(l2);
  ASSERT_GT(l2, 0.02);
  struct Case {
    std::string clipping;
    std::function<at::Tensor(const at::Tensor&)> expected;
  };
  const std::vector<Case> cases = {
      {"clipping_type: 'norm' max_gradient: 0.01", [&](const at::Tensor& g) { return g * (0.01 / (l2 + 1e-6)); }},
      {"clipping_type: 'NORM' max_gradient: 0.002 norm_type: inf",
       [&](const at::Tensor& g) { return g * (0.002 / (linf + 1e-6)); }},
      {"clipping_type: 'value' max_gradient: 0.001", [&](const at::Tensor& g) { return g.clamp(-0.001, 0.001); }},
      {"clipping_type: 'norm' max_gradient: 1000", [&](const at::Tensor& g) { return g; }},
  };
  for (const Case& c : cases) {
    auto clipped = Build(TinyDeepFM(optimizers, "grad_clipping { " + c.clipping + " }"));
    Trainer(clipped.get(), nullptr).TrainStep(ToBatch(rows.Slice(0, 16)), 0, 0);
    const auto after = Snapshot(*clipped);
    for (const auto& [name, g] : grads) {
      const at::Tensor step = (start.at(name) - after.at(name)).to(at::kDouble);
      EXPECT_LE((step - c.expected(g)).abs().max().item<double>(), 1e-6) << c.clipping << " " << name;
    }
    for (EmbeddingTable* t : clipped->model->embedding_collection().tables()) {
      EXPECT_TRUE(torch::allclose(after.at(t->name()), moved.at(t->name()), 1e-6, 1e-7)) << c.clipping << " " << t->name();
    }
  }
  EXPECT_TZREC_ERROR(Trainer(Build(TinyDeepFM(optimizers, "grad_clipping { clipping_type: 'clip' }")).get(), nullptr),
                     "train_config.grad_clipping.clipping_type: 'clip' (valid: none, norm, value)");
  EXPECT_TZREC_ERROR(
      Trainer(Build(TinyDeepFM(optimizers, "grad_clipping { clipping_type: 'value' max_gradient: 0 }")).get(), nullptr),
      "train_config.grad_clipping.max_gradient: 0 must be > 0");
}

// part_optimizers: parameters whose names fully match a part's regex_pattern (first match wins)
// step with that part's optimizer, the rest with the dense optimizer. With one step from the
// same weights: the SGD part moves its parameters by lr * g, Adam's first step moves the others
// by lr * g / (|g| + eps); a part without its own schedule follows the dense one's from its
// own base rate, one with a schedule its own; a pattern matching nothing is left unused.
TEST(PartOptimizers, MatchedParametersTakeTheirOwnOptimizerAndSchedule) {
  const ParsedBatch rows = RandomRows(16, 9);
  const std::string sparse = "sparse_optimizer { sgd_optimizer { lr: 0.5 } constant_learning_rate {} } ";
  auto plain = Build(TinyDeepFM(sparse + "dense_optimizer { sgd_optimizer { lr: 1.0 momentum: 0 } constant_learning_rate {} }"));
  const auto start = Snapshot(*plain);
  Trainer(plain.get(), nullptr).TrainStep(ToBatch(rows.Slice(0, 16)), 0, 0);
  const auto moved = Snapshot(*plain);
  auto parts = Build(TinyDeepFM(sparse + R"(dense_optimizer {
      adam_optimizer { lr: 0.01 } exponential_decay_learning_rate { decay_size: 1 decay_factor: 0.5 }
      part_optimizers { sgd_optimizer { lr: 0.25 momentum: 0 } regex_pattern: "output_mlp\\..*" }
      part_optimizers { adam_optimizer { lr: 0.1 } regex_pattern: "nothing" }
      part_optimizers { sgd_optimizer { lr: 0.125 momentum: 0 } regex_pattern: "deep_mlp\\.mlp\\.1\\..*"
                        constant_learning_rate {} }
    })"));
  ASSERT_EQ(parts->part_optimizers.size(), 2u);
  EXPECT_EQ(parts->part_optimizers[0].index, 0);
  EXPECT_EQ(parts->part_optimizers[1].index, 2);
  Trainer trainer(parts.get(), nullptr);
  trainer.TrainStep(ToBatch(rows.Slice(0, 16)), 0, 0);
  const auto after = Snapshot(*parts);
  int sgd = 0, sgd2 = 0, adam = 0;
  for (const auto& item : parts->model->named_parameters()) {
    const std::string& name = item.key();
    const at::Tensor g = (start.at(name) - moved.at(name)).to(at::kDouble);
    const at::Tensor step = (start.at(name) - after.at(name)).to(at::kDouble);
    at::Tensor expected;
    if (name.rfind("output_mlp.", 0) == 0) {
      expected = 0.25 * g;
      ++sgd;
    } else if (name.rfind("deep_mlp.mlp.1.", 0) == 0) {
      expected = 0.125 * g;
      ++sgd2;
    } else {
      expected = 0.01 * g / (g.abs() + 1e-8);
      ++adam;
    }
    EXPECT_LE((step - expected).abs().max().item<double>(), 2e-6) << name;
  }
  EXPECT_EQ(sgd, 2);
  EXPECT_EQ(sgd2, 2);
  EXPECT_GT(adam, 0);
  // Step 2 of decay_size 1, factor 0.5: a quarter of each base rate; the part with its own
  // constant schedule keeps its rate.
  trainer.TrainStep(ToBatch(rows.Slice(0, 16)), 1, 0);
  trainer.TrainStep(ToBatch(rows.Slice(0, 16)), 2, 0);
  EXPECT_NEAR(DenseLearningRate(*parts->dense_optimizer), 0.01 / 4, 1e-9);
  EXPECT_NEAR(DenseLearningRate(*parts->part_optimizers[0].optimizer), 0.25 / 4, 1e-9);
  EXPECT_NEAR(DenseLearningRate(*parts->part_optimizers[1].optimizer), 0.125, 1e-9);
  EXPECT_TZREC_ERROR(Build(TinyDeepFM(sparse + R"(dense_optimizer { adam_optimizer { lr: 0.01 }
                                          part_optimizers { adam_optimizer { lr: 0.1 } regex_pattern: "(" } })")),
                     "train_config.dense_optimizer.part_optimizers[0].regex_pattern: '(' is not a regular expression");
}

// The small DeepFM config (testing::WriteSmallConfig) with `from` replaced by `to`.
std::string SmallConfigWith(const testing::TempDir& dir, const std::string& from, const std::string& to) {
  const std::string config = testing::WriteSmallConfig(dir);
  std::string text = ReadFileToString(config);
  const size_t at = text.find(from);
  if (at == std::string::npos) ADD_FAILURE() << "'" << from << "' is not in the small config";
  if (at != std::string::npos) text.replace(at, from.size(), to);
  testing::WriteFile(config, text);
  return config;
}

// Trains `config` 20 steps into dir/straight, and 11 steps then continued to 20 into
// dir/resumed (unshuffled, deterministic); returns both last checkpoints.
std::pair<std::string, std::string> StraightAndResumed(const testing::TempDir& dir, const std::string& config) {
  const std::string edits = R"("data_config.shuffle": false)";
  testing::DeterministicRuntime();
  auto straight = testing::SmallOptions(dir, config, dir.File("straight"));
  straight.edit_config_json = "{" + edits + "}";
  TrainAndEvaluate(straight);
  testing::DeterministicRuntime();
  auto first = testing::SmallOptions(dir, config, dir.File("resumed"));
  first.edit_config_json = "{" + edits + R"(, "train_config.num_steps": 11})";
  TrainAndEvaluate(first);
  testing::DeterministicRuntime();
  auto second = testing::SmallOptions(dir, config, dir.File("resumed"));
  second.continue_train = true;
  second.edit_config_json = straight.edit_config_json;
  TrainAndEvaluate(second);
  return {ListCheckpoints(dir.File("straight")).back().path, ListCheckpoints(dir.File("resumed")).back().path};
}

// Every sparse optimizer trains the small DeepFM from its config (finite weights, evaluated),
// and a run continued from its checkpoint ends like an uninterrupted one (the optimizer state
// of every table round-trips, whatever its layout).
TEST(SparseOptimizers, EachTrainsAndResumesExactlyFromConfig) {
  for (const std::string optimizer :
       {"lars_sgd_optimizer { lr: 0.5 }", "lamb_optimizer { lr: 0.05 }", "partial_rowwise_lamb_optimizer { lr: 0.05 }",
        "partial_rowwise_adam_optimizer { lr: 0.01 weight_decay: 0.001 }", "adadelta_optimizer { lr: 1.0 }",
        "rmsprop_optimizer { lr: 0.01 }"}) {
    SCOPED_TRACE(optimizer);
    testing::TempDir dir;
    const auto [straight, resumed] =
        StraightAndResumed(dir, SmallConfigWith(dir, "adagrad_optimizer { lr: 0.05 }", optimizer));
    const auto a = LoadCheckpointTensors(straight);
    const auto b = LoadCheckpointTensors(resumed);
    ExpectClose(a, b, 0.0, optimizer);
    for (const auto& [name, tensor] : a) EXPECT_TRUE(at::isfinite(tensor).all().item<bool>()) << name;
    EXPECT_TRUE(testing::LastEvalResult(dir.File("straight")).contains("auc"));
  }
}

// DenseEma against its definition: the first update copies, then avg += (1 - decay)(p - avg);
// Swap exchanges averages and live values; the state round-trips and is checked on load.
TEST(DenseEma, FollowsTheAveragingFormula) {
  at::Tensor p = torch::tensor({1.0f, 2.0f}).requires_grad_(true);
  DenseEma ema({{"w", p}}, 0.75, "ema");
  ema.Update();
  {
    torch::NoGradGuard no_grad;
    p.copy_(torch::tensor({5.0f, -2.0f}));
  }
  ema.Update();
  ema.Update();
  // copy (1, 2); then twice towards (5, -2) with weight 0.25.
  const double a0 = 1 + (5 - 1) * 0.25, a1 = a0 + (5 - a0) * 0.25;
  const double b0 = 2 + (-2 - 2) * 0.25, b1 = b0 + (-2 - b0) * 0.25;
  auto state = ema.State();
  EXPECT_NEAR(state.at("w")[0].item<double>(), a1, 1e-6);
  EXPECT_NEAR(state.at("w")[1].item<double>(), b1, 1e-6);
  EXPECT_EQ(state.at(DenseEma::kCountKey).item<int64_t>(), 3);
  ema.Swap();
  EXPECT_NEAR(p[0].item<double>(), a1, 1e-6);
  ema.Swap();
  EXPECT_EQ(p[0].item<float>(), 5.0f);

  DenseEma other({{"w", p}}, 0.75, "ema");
  other.LoadState(state, "f");
  EXPECT_EQ(other.updates(), 3);
  EXPECT_TRUE(torch::equal(other.State().at("w"), state.at("w")));
  EXPECT_TZREC_ERROR(other.LoadState({{DenseEma::kCountKey, state.at(DenseEma::kCountKey)}}, "f.pt"),
                     "'f.pt' has no average of dense parameter w");
  other.LoadState({{DenseEma::kCountKey, torch::tensor(int64_t{1})}}, "f.pt", /*partial=*/true);
  EXPECT_EQ(other.updates(), 1);
  EXPECT_TZREC_ERROR(other.LoadState({{"w", torch::tensor({1.0f})}, {DenseEma::kCountKey, torch::tensor(int64_t{1})}}, "f.pt"),
                     "the average of w has shape [1] but the parameter has [2]");
  EXPECT_TZREC_ERROR(DenseEma({{"w", p}}, 1.5, "train_config.dense_optimizer.ema"),
                     "train_config.dense_optimizer.ema.decay: 1.5 is not in [0, 1]");
}

std::map<std::string, at::Tensor> ReadArchive(const std::string& path) {
  return ParseTensorArchive(ReadFileToString(path), path);
}

// Accumulation (3 steps, checkpoints every 10: saves fall inside a cycle), norm clipping, a
// part optimizer (its Adagrad state checkpointed beside the dense optimizer's) and the EMA
// together: a run stopped after step 10 and continued ends with the same weights and
// averages as an uninterrupted one; the checkpoint keeps the averages apart from the weights;
// evaluation and export use the averages by default (use_dense_ema unset), evaluation the
// plain weights with use_dense_ema: false.
TEST(Training, AccumulationClippingAndEmaResumeExactlyAndEvaluationUsesTheAverages) {
  testing::TempDir dir;
  const std::string config = SmallConfigWith(
      dir, "dense_optimizer { adam_optimizer { lr: 0.002 } constant_learning_rate {} }",
      "dense_optimizer { adam_optimizer { lr: 0.002 } constant_learning_rate {} ema { decay: 0.8 } "
      "part_optimizers { adagrad_optimizer { lr: 0.01 } regex_pattern: 'output_mlp\\\\..*' } } "
      "gradient_accumulation_steps: 3 grad_clipping { clipping_type: 'norm' max_gradient: 0.5 }");
  const auto [a, b] = StraightAndResumed(dir, config);
  ASSERT_EQ(ListCheckpoints(dir.File("straight")).back().step, 19);
  ExpectClose(testing::LoadModelFile(a), testing::LoadModelFile(b), 0.0, "weights");
  const auto ema_a = ReadArchive(a + "/dense_ema.pt"), ema_b = ReadArchive(b + "/dense_ema.pt");
  ExpectClose(ema_a, ema_b, 0.0, "averages");
  // 20 steps in cycles of 3, each save (steps 10 and 19) closing a partial cycle:
  // updates after steps 2, 5, 8, 10 | 13, 16, 19.
  EXPECT_EQ(ema_a.at(DenseEma::kCountKey).item<int64_t>(), 7);
  const auto weights = testing::LoadModelFile(a);
  ASSERT_TRUE(ema_a.count("output_mlp.weight"));
  EXPECT_FALSE(torch::equal(ema_a.at("output_mlp.weight"), weights.at("output_mlp.weight")));

  // tzrec eval of the last checkpoint: by default the averaged weights, as the evaluation
  // during training did; with use_dense_ema false the plain weights (another loss).
  const nlohmann::json during = testing::LastEvalResult(dir.File("straight"));
  EvalOptions eval;
  eval.pipeline_config_path = dir.File("straight/pipeline.config");
  eval.eval_result_filename = "";
  const auto averaged = Evaluate(eval);
  EXPECT_NEAR(averaged.at("auc"), during.at("auc").get<double>(), 1e-9);
  std::string plain_config = ReadFileToString(eval.pipeline_config_path) + "\neval_config { use_dense_ema: false }\n";
  testing::WriteFile(dir.File("plain.config"), plain_config);
  eval.pipeline_config_path = dir.File("plain.config");
  const auto plain = Evaluate(eval);
  EXPECT_NE(plain.at("binary_cross_entropy"), averaged.at("binary_cross_entropy"));

  // tzrec export takes the averaged dense weights too (export_config.use_dense_ema unset).
  ExportOptions export_options;
  export_options.pipeline_config_path = dir.File("straight/pipeline.config");
  export_options.export_dir = dir.File("export");
  export_options.quant_from_environment = false;
  export_options.write_scripted_model = false;
  ExportModel(export_options);
  auto exported = LoadExportedPipeline(dir.File("export"), PipelineMode::kPredict);
  const auto params = exported->model->named_parameters();
  EXPECT_TRUE(torch::equal(params["output_mlp.weight"], ema_a.at("output_mlp.weight")));
}

// fine_tune_ckpt_param_map: a table renamed since the checkpoint is restored from its old name;
// a malformed line is an error naming the file and line.
TEST(Training, FineTuneParamMapRestoresRenamedStates) {
  testing::TempDir dir;
  std::string config = testing::WriteSmallConfig(dir);
  testing::DeterministicRuntime();
  TrainAndEvaluate(testing::SmallOptions(dir, config, dir.File("base")));
  const auto base = testing::LoadModelFile(ListCheckpoints(dir.File("base")).back().path);
  auto options = testing::SmallOptions(dir, config, dir.File("tuned"));
  options.fine_tune_checkpoint = dir.File("base");
  const std::string edits = R"({"train_config.num_steps": 1,
      "train_config.sparse_optimizer.adagrad_optimizer.lr": 0,
      "train_config.dense_optimizer.adam_optimizer.lr": 0,
      "feature_configs[2].id_feature.embedding_name": "renamed",
      "train_config.fine_tune_ckpt_param_map": ")" + dir.File("map.txt") + R"("})";
  options.edit_config_json = edits;
  // The tables feature_configs[2] used (deep and wide): the base keys a renamed model lacks.
  std::map<std::string, std::string> renamed_from;  // new key -> old key
  {
    auto probe = testing::SmallOptions(dir, config, dir.File("probe"));
    probe.edit_config_json = R"({"train_config.num_steps": 1, "feature_configs[2].id_feature.embedding_name": "renamed"})";
    TrainAndEvaluate(probe);
    const auto renamed = testing::LoadModelFile(ListCheckpoints(dir.File("probe")).back().path);
    for (const auto& [name, tensor] : base) {
      if (renamed.count(name)) continue;
      const bool wide = name.find("_wide.weight") != std::string::npos;
      renamed_from[wide ? "embedding_group.renamed_wide.weight" : "embedding_group.renamed.weight"] = name;
    }
  }
  ASSERT_EQ(renamed_from.size(), 2u);
  std::string map_text = "\n";
  for (const auto& [name, source] : renamed_from) map_text += name + "   " + source + "\n";
  testing::WriteFile(dir.File("map.txt"), map_text);
  TrainAndEvaluate(options);
  const auto tuned = testing::LoadModelFile(ListCheckpoints(dir.File("tuned")).back().path);
  for (const auto& [name, tensor] : tuned) {
    const std::string source = renamed_from.count(name) ? renamed_from.at(name) : name;
    ASSERT_TRUE(base.count(source)) << name;
    EXPECT_TRUE(torch::equal(tensor, base.at(source))) << name;
  }
  testing::WriteFile(dir.File("map.txt"), "a b\nonly_one\n");
  auto bad = options;
  bad.model_dir = dir.File("tuned_bad");
  EXPECT_TZREC_ERROR(TrainAndEvaluate(bad), "map.txt:2: expected '<model state name> <checkpoint state name>'");
}

// grad_scaler: the loss is scaled and every gradient (dense and table rows) unscaled before
// any optimizer sees it; with power-of-two scales that is exact, so training equals training
// without it, and the scale grows after growth_interval finite steps.
TEST(GradScaler, ScaledStepsEqualUnscaledOnes) {
  const std::string optimizers =
      "sparse_optimizer { sgd_optimizer { lr: 0.1 } constant_learning_rate {} } "
      "dense_optimizer { adam_optimizer { lr: 0.01 } constant_learning_rate {} }";
  auto scaled = Build(TinyDeepFM(optimizers, "grad_scaler { growth_interval: 2 }"));
  auto plain = Build(TinyDeepFM(optimizers));
  Trainer trainer_s(scaled.get(), nullptr), trainer_p(plain.get(), nullptr);
  const auto start = Snapshot(*scaled);
  for (int step = 0; step < 3; ++step) {
    trainer_s.TrainStep(ToBatch(RandomRows(12, 300 + step)), step, 0);
    trainer_p.TrainStep(ToBatch(RandomRows(12, 300 + step)), step, 0);
  }
  EXPECT_TRUE(AnyChanged(start, Snapshot(*scaled)));
  ExpectClose(Snapshot(*scaled), Snapshot(*plain), 1e-6, "scaled vs plain");
  EXPECT_EQ(scaled->grad_scaler->scale(), 131072.0f);
  EXPECT_EQ(scaled->grad_scaler->growth_tracker(), 1);
  EXPECT_EQ(scaled->sparse_optimizer->step(), plain->sparse_optimizer->step());
}

// A step whose scaled gradients overflow changes nothing - no dense parameter, table row,
// optimizer state or step count - and halves the scale; the next finite step applies.
TEST(GradScaler, AnOverflowSkipsTheWholeStep) {
  const std::string optimizers =
      "sparse_optimizer { adagrad_optimizer { lr: 0.1 } constant_learning_rate {} } "
      "dense_optimizer { adam_optimizer { lr: 0.01 } constant_learning_rate {} }";
  auto pipeline = Build(TinyDeepFM(optimizers, "grad_scaler { init_scale: 3e38 }"));
  Trainer trainer(pipeline.get(), nullptr);
  const auto start = Snapshot(*pipeline);
  ParsedBatch huge = RandomRows(12, 5);
  // Rows of +-1e6 (one sign alone may leave every ReLU of the tiny MLP dead): the scaled
  // gradients of the layers after the first reach ~1e42, past float's range.
  for (size_t i = 0; i < huge.dense["d"].values.size(); ++i) huge.dense["d"].values[i] = i % 2 ? 1e6f : -1e6f;
  trainer.TrainStep(ToBatch(std::move(huge)), 0, 0);
  EXPECT_FALSE(AnyChanged(start, Snapshot(*pipeline)));
  EXPECT_EQ(pipeline->grad_scaler->scale(), 1.5e38f);
  EXPECT_EQ(pipeline->sparse_optimizer->step(), 0);
  pipeline->grad_scaler->SetState(1024.0f, 0, "test");
  trainer.TrainStep(ToBatch(RandomRows(12, 6)), 1, 0);
  EXPECT_TRUE(AnyChanged(start, Snapshot(*pipeline)));
  EXPECT_EQ(pipeline->sparse_optimizer->step(), 1);
  EXPECT_EQ(pipeline->grad_scaler->growth_tracker(), 1);
}

// The scale and its streak are saved in train_state.pt, so a continued run ends as an
// uninterrupted one, scale included (20 steps, growth every 3: 65536 * 2^6, streak 2).
TEST(GradScaler, StateIsCheckpointedAndResumedExactly) {
  testing::TempDir dir;
  const auto [straight, resumed] =
      StraightAndResumed(dir, SmallConfigWith(dir, "num_steps: 20", "num_steps: 20 grad_scaler { growth_interval: 3 }"));
  ExpectClose(LoadCheckpointTensors(straight), LoadCheckpointTensors(resumed), 0.0, "resumed");
  for (const std::string& checkpoint : {straight, resumed}) {
    const std::string file = JoinPath(checkpoint, "train_state.pt");
    const auto state = ParseTensorArchive(ReadFileToString(file), file);
    ASSERT_TRUE(state.count("grad_scaler_scale")) << checkpoint;
    EXPECT_EQ(state.at("grad_scaler_scale").item<float>(), 65536.0f * 64) << checkpoint;
    EXPECT_EQ(state.at("grad_scaler_growth_tracker").item<int64_t>(), 2) << checkpoint;
  }
}

// mixed_precision BF16 trains (its GEMMs round their inputs: the weights differ from fp32
// training, but not by much), evaluates, and an export with export_config.mixed_precision
// records it so predict and serve run in it.
TEST(MixedPrecision, Bf16TrainsNearFp32AndTheExportKeepsItsPrecision) {
  if (!NativeBf16GemmAvailable()) {
    std::printf("[ bf16     ] no AVX512-BF16 here: BF16 training not tested\n");
    GTEST_SKIP();
  }
  testing::TempDir dir;
  const std::string config = SmallConfigWith(dir, "num_steps: 20", R"(num_steps: 20 mixed_precision: "BF16")");
  std::string text = ReadFileToString(config);
  testing::WriteFile(config, text + "\nexport_config { mixed_precision: \"BF16\" }\n");
  testing::DeterministicRuntime();
  TrainAndEvaluate(testing::SmallOptions(dir, config, dir.File("bf16")));
  testing::DeterministicRuntime();
  auto fp32 = testing::SmallOptions(dir, config, dir.File("fp32"));
  fp32.edit_config_json = R"({"train_config.mixed_precision": ""})";
  TrainAndEvaluate(fp32);
  const auto a = testing::LoadModelFile(ListCheckpoints(dir.File("bf16")).back().path);
  const auto b = testing::LoadModelFile(ListCheckpoints(dir.File("fp32")).back().path);
  // Per tensor, relative to its norm: an element-wise bound does not hold for embedding rows,
  // whose first Adagrad step moves each element by +-lr whatever the gradient's size, so a tiny
  // gradient that BF16 rounding flips moves an element by 2 lr (seen: 0.08 on one element,
  // 4% of the table's norm).
  double max_diff = 0.0;
  for (const auto& [name, tensor] : a) {
    EXPECT_TRUE(at::isfinite(tensor).all().item<bool>()) << name;
    const at::Tensor diff = tensor - b.at(name);
    max_diff = std::max(max_diff, diff.abs().max().item<double>());
    EXPECT_LT(diff.norm().item<double>(), 0.1 * b.at(name).norm().item<double>() + 1e-6) << name;
  }
  EXPECT_GT(max_diff, 0.0);
  const double auc_bf16 = testing::LastEvalResult(dir.File("bf16"))["auc"].get<double>();
  const double auc_fp32 = testing::LastEvalResult(dir.File("fp32"))["auc"].get<double>();
  EXPECT_NEAR(auc_bf16, auc_fp32, 0.02);

  const auto manifest = testing::ExportLatest(dir.File("bf16/pipeline.config"), dir.File("export"));
  EXPECT_EQ(manifest["mixed_precision"], "BF16");
  EXPECT_EQ(LoadExportedPipeline(dir.File("export"), PipelineMode::kPredict)->model->gemm_precision(),
            GemmPrecision::kBFloat16);
}

}  // namespace
}  // namespace tzrec

namespace tzrec {
namespace {

// TorchEasyRec's test configs of these options train unchanged from gen_data output (their
// dense features embedded by autodis and mlp; FP16 computed in fp32; FP16 tables as halves).
TEST(TrainingOptionConfigs, TorchEasyRecsOptionConfigsTrain) {
  for (const char* name : {"multi_tower_din_fg_mock_gradient_clipping.config", "multi_tower_din_fg_mock_adagrad_init_acc.config",
                           "multi_tower_din_fg_mock_fp16_ga.config", "multi_tower_din_fg_mock_bf16_emb_fp16.config"}) {
    SCOPED_TRACE(name);
    testing::TempDir dir;
    auto config = LoadPipelineConfig(testing::ReferenceConfig(name));
    testing::WriteFile(dir.File("id_vocab_list_1"), "xyz\n<OOV>\nabc\nefg\n");
    bool dense_feature_embeddings = false;
    for (auto& feature : *config.mutable_feature_configs()) {
      dense_feature_embeddings = dense_feature_embeddings || (feature.has_raw_feature() && feature.raw_feature().has_autodis());
      if (feature.has_id_feature() && feature.id_feature().has_vocab_file()) {
        feature.mutable_id_feature()->set_vocab_file(dir.File("id_vocab_list_1"));
      }
    }
    EXPECT_TRUE(dense_feature_embeddings);
    EXPECT_TRUE(FindUnsupportedFields(config).empty());
    const std::string edits = R"({"data_config.batch_size": 512, "train_config.num_epochs": 1})";
    EditConfigJson(&config, edits);
    SavePipelineConfig(config, dir.File("pipeline.config"));
    TrainEvalOptions options = testing::MockDataOptions(dir, config, dir.File("pipeline.config"));
    TrainAndEvaluate(options);
    EXPECT_TRUE(testing::LastEvalResult(dir.File("model")).contains("auc"));
    bool has_dense_embedding = false;
    for (const auto& [key, tensor] : testing::LoadModelFile(ListCheckpoints(dir.File("model")).back().path)) {
      has_dense_embedding = has_dense_embedding || key.rfind("dense_embedding.", 0) == 0;
    }
    EXPECT_TRUE(has_dense_embedding);
  }
}

}  // namespace
}  // namespace tzrec
