// Export and predict: an export (FP32 tables) and predict from a checkpoint give exactly the
// model's outputs on the same rows, as evaluation computes them; INT8 tables cost at most
// 0.001 AUC with about a third of the bytes; failures leave nothing half-written.
#include <gtest/gtest.h>

#include <google/protobuf/text_format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <tuple>

#include <torch/csrc/jit/serialization/import.h>

#include "test_util.h"
#include "export_test_util.h"
#include "train_test_util.h"
#include "tzrec/batch/batch_stream.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/data/safetensors.h"
#include "tzrec/embedding/fused_lookup.h"
#include "tzrec/embedding/table_quantization.h"
#include "tzrec/kernels/cpu_kernels.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/serving/predict.h"
#include "tzrec/serving/scripted_model.h"
#include "tzrec/tools/create_fg_json.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/train/checkpoint.h"

namespace tzrec {
namespace {

using testing::TempDir;
using testing::CheckScriptedModel;
using testing::MaxAbsDiff;
using testing::ReadCsvColumns;
using testing::RunPredict;

// ---------------------------------------------------------------- table quantisation

TEST(TableQuantization, Int8RowwiseHasTorchRecsLayoutAndBoundedError) {
  at::manual_seed(3);
  at::Tensor w = at::randn({257, 16}) * 0.3;
  w[5].fill_(0.25);  // a constant row
  w[6].zero_();
  at::Tensor q = QuantizeTable(w, TableDtype::kINT8);
  ASSERT_EQ(q.scalar_type(), at::kByte);
  ASSERT_EQ(q.sizes(), (at::IntArrayRef{257, 20}));
  EXPECT_EQ(TableRowBytes(TableDtype::kINT8, 16), 20);
  at::Tensor back = DequantizeTable(q, TableDtype::kINT8, 16, "test");
  for (int64_t r = 0; r < w.size(0); ++r) {
    // The reference: codes, then the fp16 scale and bias read back as plain bits.
    const uint8_t* row = q[r].data_ptr<uint8_t>();
    c10::Half scale, bias;
    std::memcpy(&scale.x, row + 16, 2);
    std::memcpy(&bias.x, row + 18, 2);
    const float lo = w[r].min().item<float>(), hi = w[r].max().item<float>();
    EXPECT_EQ(static_cast<float>(bias), static_cast<float>(c10::Half(lo))) << r;
    if (hi > lo) {
      EXPECT_EQ(static_cast<float>(scale), static_cast<float>(c10::Half((hi - lo) / 255.0f))) << r;
    }
    for (int d = 0; d < 16; ++d) {
      const float expected = row[d] * static_cast<float>(scale) + static_cast<float>(bias);
      EXPECT_EQ(back[r][d].item<float>(), expected);
      // Rounding to the nearest code, plus the fp16 rounding of the bias (below the step).
      EXPECT_LE(std::abs(expected - w[r][d].item<float>()),
                0.5f * static_cast<float>(scale) + std::abs(lo - static_cast<float>(bias)) + 1e-6f)
          << r << "," << d;
    }
  }
  EXPECT_TRUE(at::allclose(back[5], w[5], 0, 1e-3));
  EXPECT_TRUE(at::equal(back[6], w[6]));
  at::Tensor half = QuantizeTable(w, TableDtype::kFP16);
  EXPECT_EQ(half.scalar_type(), at::kHalf);
  EXPECT_TRUE(at::equal(DequantizeTable(half, TableDtype::kFP16, 16, "t"), w.to(at::kHalf).to(at::kFloat)));
  EXPECT_TRUE(at::equal(DequantizeTable(QuantizeTable(w, TableDtype::kFP32), TableDtype::kFP32, 16, "t"), w));
  EXPECT_TZREC_ERROR(DequantizeTable(q, TableDtype::kINT8, 8, "table [x]"), "table [x]");
  // Finiteness without decoding: an INT8 row is finite exactly when its scale and bias are.
  EXPECT_TRUE(StoredTableFinite(q, TableDtype::kINT8, 16));
  at::Tensor broken = q.clone();
  const c10::Half inf = std::numeric_limits<float>::infinity();
  std::memcpy(broken[7].data_ptr<uint8_t>() + 16, &inf.x, 2);
  EXPECT_FALSE(StoredTableFinite(broken, TableDtype::kINT8, 16));
  EXPECT_FALSE(at::isfinite(DequantizeTable(broken, TableDtype::kINT8, 16, "t")[7]).all().item<bool>());
  at::Tensor nan_half = half.clone();
  nan_half[3][2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(StoredTableFinite(nan_half, TableDtype::kFP16, 16));
}

TEST(TableQuantization, SettingsAreTorchEasyRecs) {
  EXPECT_EQ(ParseTableQuantization("", TableDtype::kINT8, "QUANT_EMB"), TableDtype::kINT8);
  EXPECT_EQ(ParseTableQuantization("0", TableDtype::kINT8, "QUANT_EMB"), TableDtype::kFP32);
  EXPECT_EQ(ParseTableQuantization("1", TableDtype::kFP32, "QUANT_EC_EMB"), TableDtype::kINT8);
  EXPECT_EQ(ParseTableQuantization("fp16", TableDtype::kINT8, "QUANT_EMB"), TableDtype::kFP16);
  EXPECT_TZREC_ERROR(ParseTableQuantization("INT4", TableDtype::kINT8, "QUANT_EMB"),
                   "QUANT_EMB=INT4: not supported yet");
  EXPECT_TZREC_ERROR(ParseTableQuantization("int3", TableDtype::kINT8, "QUANT_EMB"), "unknown");
}

// INT8 storages look up exactly what an fp32 storage holding the dequantised rows looks up
// (up to float rounding), in every instruction set and in the reference twin; weighted, mean
// and empty bags, dims with and without a fixed-size kernel.
TEST(TableQuantization, Int8LookupsMatchFp32LookupsOfTheDequantisedRows) {
  at::manual_seed(5);
  for (int dim : {16, 12}) {
    SCOPED_TRACE(dim);
    EmbeddingStorage fp32(dim, nullptr), int8(dim, nullptr, RowFormat::kInt8);
    EmbeddingTable* a1 = fp32.AddTable("a", 300, false);
    EmbeddingTable* a2 = fp32.AddTable("b", 40, false);
    EmbeddingTable* q1 = int8.AddTable("a", 300, false);
    EmbeddingTable* q2 = int8.AddTable("b", 40, false);
    fp32.Allocate(false);
    int8.Allocate(false);
    EXPECT_EQ(int8.row_bytes(), dim + 4);
    for (auto [f, q, rows] : {std::tuple{a1, q1, 300}, std::tuple{a2, q2, 40}}) {
      at::Tensor w = at::randn({rows, dim});
      at::Tensor stored = QuantizeTable(w, TableDtype::kINT8);
      q->stored().copy_(stored);
      f->weight().copy_(DequantizeTable(stored, TableDtype::kINT8, dim, "t"));
    }
    const int64_t bags = 97;
    std::vector<LookupTensors> lookups;
    for (int k = 0; k < 3; ++k) {
      at::Tensor lengths = at::randint(0, 5, {bags}, at::kLong);
      at::Tensor offsets = at::zeros({bags + 1}, at::kLong);
      offsets.narrow(0, 1, bags).copy_(lengths.cumsum(0));
      const int64_t n = offsets[bags].item<int64_t>();
      LookupTensors l;
      l.values = at::randint(0, k == 1 ? 40 : 300, {n}, at::kLong);
      l.offsets = offsets;
      l.mean = k == 2;
      if (k == 0) l.weights = at::rand({n});
      lookups.push_back(l);
    }
    auto run = [&](bool quantized) {
      std::vector<LookupTensors> ls = lookups;
      ls[0].table = quantized ? q1 : a1;
      ls[1].table = quantized ? q2 : a2;
      ls[2].table = quantized ? q1 : a1;
      return StoragePooledLookup(quantized ? &int8 : &fp32, ls, bags, false);
    };
    const at::Tensor expected = run(false);
    testing::ForEachCpuIsa([&] {
      EXPECT_TRUE(at::allclose(run(true), expected, 1e-5, 1e-5)) << ActiveCpuKernels().isa;
    });
    setenv("TZREC_EMBEDDING_REFERENCE", "1", 1);
    EXPECT_TRUE(at::allclose(run(true), expected, 1e-5, 1e-5));
    unsetenv("TZREC_EMBEDDING_REFERENCE");
    EXPECT_THROW(a1->stored().size(0) == 300 ? q1->weight() : at::Tensor(), Error);
  }
}

// ---------------------------------------------------------------- export and predict

double ExactAuc(const std::vector<double>& scores, const std::vector<double>& labels) {
  std::vector<size_t> order(scores.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return scores[a] < scores[b]; });
  double positives = 0, rank_sum = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5) {
        positives += 1;
        rank_sum += (i + j + 1) / 2.0;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(scores.size()) - positives;
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

// What evaluation computes: the model restored from `checkpoint`, run over `input` in order.
std::map<std::string, std::vector<double>> ModelOutputs(const std::string& config_path,
                                                        const std::string& checkpoint,
                                                        const std::string& input) {
  auto config = LoadPipelineConfig(config_path);
  auto pipeline = BuildFeatures(config, PipelineMode::kEval);
  auto dataset = pipeline->MakeDataset(input, DatasetMode::kPredict, 1, nullptr);
  BuildModel(pipeline.get(), nullptr);
  RestoreOptions restore;
  restore.restore_optimizer = false;
  restore.restore_rng = false;
  RestoreCheckpoint(checkpoint, TrainingState{pipeline->model.get(), nullptr, nullptr}, restore);
  pipeline->model->eval();
  c10::NoGradGuard no_grad;
  BatchStream stream(*dataset, 0);
  Batch batch;
  std::map<std::string, std::vector<double>> out;
  while (stream.Next(&batch)) {
    for (const auto& [name, tensor] : pipeline->model->Predict(batch)) {
      at::Tensor t = tensor.contiguous();
      out[name].insert(out[name].end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
    }
  }
  return out;
}

struct TrainedModel {
  std::string config;  // model_dir/pipeline.config
  std::string checkpoint;
  std::string eval_pattern;
  std::vector<std::string> labels;
};

TrainedModel TrainReference(const TempDir& dir, const std::string& config_name,
                            const std::string& edits) {
  auto config = LoadPipelineConfig(testing::ReferenceConfig(config_name));
  EditConfigJson(&config, edits);
  GenDataOptions gen;
  gen.output_dir = dir.File("data");
  gen.train_rows = 12000;
  gen.eval_rows = 3001;
  gen.first_order_variance = 4.0;
  gen.interaction_variance = 0.0;
  auto data = GenerateMockData(config, gen);
  TrainEvalOptions options;
  options.pipeline_config_path = testing::ReferenceConfig(config_name);
  options.model_dir = dir.File("model");
  options.train_input_path = data.train_pattern;
  options.eval_input_path = data.eval_pattern;
  options.edit_config_json = edits;
  TrainAndEvaluate(options);
  TrainedModel trained;
  trained.config = dir.File("model/pipeline.config");
  trained.checkpoint = ListCheckpoints(dir.File("model")).back().path;
  trained.eval_pattern = data.eval_pattern;
  for (const auto& label : config.data_config().label_fields()) trained.labels.push_back(label);
  return trained;
}

void ExportsAndPredictsAsEvaluated(const std::string& config_name) {
  TempDir dir;
  const std::string edits = R"({"data_config.dataset_type": "ParquetDataset",
      "data_config.batch_size": 1000, "train_config.num_epochs": 1,
      "feature_configs[id_feature.num_buckets>1000].id_feature.num_buckets": 1000,
      "train_config.sparse_optimizer.adagrad_optimizer.lr": 0.05})";
  TrainedModel trained = TrainReference(dir, config_name, edits);
  auto expected = ModelOutputs(trained.config, trained.checkpoint, trained.eval_pattern);
  ASSERT_FALSE(expected.empty());

  PredictOptions base;
  base.predict_input_path = trained.eval_pattern;
  base.reserved_columns = Join(trained.labels, ",");
  PredictOptions from_checkpoint = base;
  from_checkpoint.pipeline_config_path = trained.config;
  auto checkpoint_out = RunPredict(from_checkpoint, dir.File("pred_ckpt"));

  ExportOptions export_options;
  export_options.pipeline_config_path = trained.config;
  export_options.quant_from_environment = false;
  export_options.quant_emb = "0";
  export_options.export_dir = dir.File("export_fp32");
  ExportModel(export_options);
  export_options.quant_emb = "";  // TorchEasyRec's default: INT8
  export_options.export_dir = dir.File("export_int8");
  ExportModel(export_options);

  PredictOptions from_fp32 = base, from_int8 = base;
  from_fp32.scripted_model_path = dir.File("export_fp32");
  from_int8.scripted_model_path = dir.File("export_int8");
  from_int8.predict_threads = 1;
  auto fp32_out = RunPredict(from_fp32, dir.File("pred_fp32"));
  auto int8_out = RunPredict(from_int8, dir.File("pred_int8"));

  int probs_columns = 0;
  for (const auto& [name, values] : expected) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(checkpoint_out.count(name));
    EXPECT_EQ(values.size(), 3001u);
    EXPECT_LE(MaxAbsDiff(checkpoint_out[name], values), 1e-6);
    EXPECT_LE(MaxAbsDiff(fp32_out[name], values), 1e-6);
    if (!StartsWith(name, "probs")) continue;
    ++probs_columns;
    const std::string tower = name == "probs" ? "" : name.substr(6);
    const std::string label = tower.empty() ? trained.labels[0] : "";
    const auto& labels = fp32_out.count(label) ? fp32_out[label] : fp32_out.begin()->second;
    if (!fp32_out.count(label)) continue;  // multi-task: checked below per label
    const double auc32 = ExactAuc(fp32_out[name], labels);
    const double auc8 = ExactAuc(int8_out[name], labels);
    EXPECT_GT(auc32, 0.6);
    EXPECT_LE(std::abs(auc8 - auc32), 0.001) << auc32 << " vs " << auc8;
  }
  EXPECT_GT(probs_columns, 0);
  // Multi-task: each tower's probabilities against each label (the tower of that label is
  // among them): INT8 moves none of these AUCs by more than 0.001.
  for (const auto& [name, values] : fp32_out) {
    if (!StartsWith(name, "probs_")) continue;
    for (const auto& label : trained.labels) {
      const double auc32 = ExactAuc(values, fp32_out[label]);
      const double auc8 = ExactAuc(int8_out[name], fp32_out[label]);
      EXPECT_LE(std::abs(auc8 - auc32), 0.001) << name << " / " << label;
    }
  }
  // Tables: INT8 rows are dim + 4 bytes instead of 4 * dim.
  auto manifest = ReadExportManifest(dir.File("export_int8"));
  int64_t int8_bytes = 0, fp32_bytes = 0;
  for (const auto& table : manifest["tables"]) {
    EXPECT_EQ(table["dtype"], table["sequence"].get<bool>() ? "FP32" : "INT8");
    int8_bytes += table["rows"].get<int64_t>() * (table["dim"].get<int64_t>() + 4);
    fp32_bytes += table["rows"].get<int64_t>() * table["dim"].get<int64_t>() * 4;
  }
  EXPECT_EQ(manifest["table_bytes"].get<int64_t>(), int8_bytes);
  EXPECT_EQ(manifest["table_bytes_fp32"].get<int64_t>(), fp32_bytes);
  EXPECT_LE(static_cast<double>(int8_bytes) / fp32_bytes, 0.4);
  EXPECT_EQ(ReadExportManifest(dir.File("export_fp32"))["table_bytes"].get<int64_t>(), fp32_bytes);

  // scripted_model.pt: the fp32 export's gives evaluation's outputs, the INT8 export's the
  // outputs of predict on INT8 tables; both load in Python torch and match there too.
  const double fp32_diff = CheckScriptedModel(dir.File("export_fp32"), trained.eval_pattern, expected, dir);
  std::map<std::string, std::vector<double>> int8_expected;
  for (const auto& [name, values] : expected) int8_expected[name] = int8_out[name];
  const double int8_diff = CheckScriptedModel(dir.File("export_int8"), trained.eval_pattern, int8_expected, dir);
  std::printf("scripted model vs model: fp32 tables max |diff| %.3g, INT8 tables %.3g\n", fp32_diff, int8_diff);
  // The model's GEMMs run on oneDNN, the scripted copy's on the system BLAS: their float sums
  // round differently by a few ulps of outputs near 1 (9.5e-7 with one draw of weights, 1.2e-6
  // with another); a wrong op shows as 1e-3 or more.
  EXPECT_LE(fp32_diff, 5e-6);
  EXPECT_LE(int8_diff, 1e-5);
}

TEST(ExportPredict, DeepFMCriteo) { ExportsAndPredictsAsEvaluated("deepfm_criteo.config"); }
TEST(ExportPredict, DLRMCriteo) { ExportsAndPredictsAsEvaluated("dlrm_criteo.config"); }
TEST(ExportPredict, MMoETaobao) { ExportsAndPredictsAsEvaluated("mmoe_taobao.config"); }
TEST(ExportPredict, DBMTLTaobao) { ExportsAndPredictsAsEvaluated("dbmtl_taobao.config"); }
TEST(ExportPredict, PLETaobao) { ExportsAndPredictsAsEvaluated("ple_taobao.config"); }

// An export is self-contained: its vocabulary is copied under an md5 name, fg.json refers to
// it, and after the directory moves elsewhere it predicts the same.
TEST(ExportPredict, AssetsTravelWithTheExport) {
  TempDir dir;
  auto config = LoadPipelineConfig(JoinPath(TZREC_SOURCE_DIR, "examples/deepfm_fg_dag.config"));
  GenDataOptions gen;
  gen.output_dir = dir.File("data");
  gen.train_rows = 3000;
  gen.eval_rows = 500;
  auto data = GenerateMockData(config, gen);
  WriteFileAtomic(dir.File("cate_vocab.txt"), "shoes\ndress\nphone\nbag\nwatch\ntoy\nbook\nfood\n");
  TrainEvalOptions options;
  options.pipeline_config_path = JoinPath(TZREC_SOURCE_DIR, "examples/deepfm_fg_dag.config");
  options.model_dir = dir.File("model");
  options.train_input_path = data.train_pattern;
  options.eval_input_path = data.eval_pattern;
  options.edit_config_json = R"({"train_config.num_epochs": 1,
      "feature_configs[2].id_feature.vocab_list": [],
      "feature_configs[2].id_feature.vocab_file": "cate_vocab.txt",
      "feature_configs[2].id_feature.asset_dir": ")" + dir.path() + R"(",
      "feature_configs[2].id_feature.default_bucketize_value": 9})";
  TrainAndEvaluate(options);

  ExportOptions export_options;
  export_options.pipeline_config_path = dir.File("model/pipeline.config");
  export_options.export_dir = dir.File("export");
  export_options.asset_files = dir.File("cate_vocab.txt");
  export_options.additional_export_config = R"({"INPUT_TILE": "2"})";
  ExportModel(export_options);
  const std::string vocab_name =
      "cate_vocab_" + Md5Hex(ReadFileToString(dir.File("cate_vocab.txt"))) + ".txt";
  EXPECT_TRUE(PathExists(dir.File("export/" + vocab_name)));
  EXPECT_TRUE(PathExists(dir.File("export/cate_vocab.txt")));  // --asset_files
  EXPECT_NE(ReadFileToString(dir.File("export/fg.json")).find(vocab_name), std::string::npos);
  auto exported_config = LoadPipelineConfig(dir.File("export/pipeline.config"));
  EXPECT_EQ(exported_config.feature_configs(2).id_feature().vocab_file(), vocab_name);
  EXPECT_EQ(exported_config.feature_configs(2).id_feature().asset_dir(), dir.File("export"));
  auto acc = nlohmann::json::parse(ReadFileToString(dir.File("export/model_acc.json")));
  EXPECT_EQ(acc["SPARSE_INT64"], "1");
  EXPECT_EQ(acc["INPUT_TILE"], "2");
  auto manifest = ReadExportManifest(dir.File("export"));
  EXPECT_EQ(manifest["model"], "deepfm");
  EXPECT_EQ(manifest["fg_json"], "fg.json");
  bool has_weights_input = false;
  for (const auto& input : manifest["inputs"]) has_weights_input |= input["name"] == "item_tags.weights";
  EXPECT_TRUE(has_weights_input);

  PredictOptions predict;
  predict.predict_input_path = data.eval_pattern;
  predict.scripted_model_path = dir.File("export");
  auto before = RunPredict(predict, dir.File("pred_before"));
  RemoveAll(dir.File("cate_vocab.txt"));
  ASSERT_EQ(std::rename(dir.File("export").c_str(), dir.File("moved").c_str()), 0);
  predict.scripted_model_path = dir.File("moved");
  auto after = RunPredict(predict, dir.File("pred_after"));
  ASSERT_EQ(before["probs"].size(), 500u);
  EXPECT_EQ(before["probs"], after["probs"]);
}

TEST(ExportPredict, BadInputsFailClearlyAndLeaveNothingBehind) {
  TempDir dir;
  std::string config = testing::WriteSmallConfig(dir);
  TrainAndEvaluate(testing::SmallOptions(dir, config, dir.File("model")));
  ExportOptions export_options;
  export_options.pipeline_config_path = dir.File("model/pipeline.config");
  export_options.quant_from_environment = false;
  export_options.export_dir = dir.File("export");
  ExportModel(export_options);
  EXPECT_TZREC_ERROR(ExportModel(export_options), "already exists");
  export_options.export_dir = dir.File("export2");
  export_options.quant_emb = "INT2";
  EXPECT_TZREC_ERROR(ExportModel(export_options), "QUANT_EMB=INT2: not supported yet");
  EXPECT_FALSE(PathExists(dir.File("export2")));
  export_options.quant_emb = "";
  export_options.checkpoint_path = dir.File("nowhere");
  EXPECT_TZREC_ERROR(ExportModel(export_options), "no checkpoint at");

  PredictOptions predict;
  predict.scripted_model_path = dir.File("export");
  predict.predict_input_path = dir.File("data/eval/*.csv");
  predict.predict_output_path = dir.File("out");
  predict.output_columns = "probs,nope";
  EXPECT_TZREC_ERROR(Predict(predict), "the model has no output 'nope' (it has logits, probs)");
  predict.output_columns = "probs";
  predict.debug_level = -1;
  EXPECT_TZREC_ERROR(Predict(predict), "--debug_level must not be negative");
  predict.debug_level = 0;

  // A row that cannot be parsed stops predict naming it; no part file, no staging left.
  std::vector<std::string> eval_files = ExpandInputPaths(dir.File("data/eval/*.csv"));
  ASSERT_FALSE(eval_files.empty());
  std::string text = ReadFileToString(eval_files[0]);
  WriteFileAtomic(dir.File("bad.csv"), text + "1,2\n");
  predict.predict_input_path = dir.File("bad.csv");
  EXPECT_TZREC_ERROR(Predict(predict), "bad.csv");
  EXPECT_TRUE(ListDirectory(dir.File("out")).empty()) << Join(ListDirectory(dir.File("out")), " ");

  // Parquet input with a CSV config says what to change.
  TempDir parquet;
  testing::WriteSmallConfig(parquet, "ParquetDataset");
  predict.predict_input_path = parquet.File("data/eval/*.parquet");
  EXPECT_TZREC_ERROR(Predict(predict), "this is a Parquet file; set data_config.dataset_type, or "
                                       "predict's --dataset_type, to ParquetDataset");
  predict.dataset_type = "ParquetDataset";
  EXPECT_GT(Predict(predict), 0);
  RemoveAll(dir.File("out"));
  predict.dataset_type = "";

  // ALL_COLUMNS passes every input column through; a second run refuses to overwrite.
  predict.predict_input_path = dir.File("data/eval/*.csv");
  predict.reserved_columns = "ALL_COLUMNS";
  EXPECT_GT(Predict(predict), 0);
  EXPECT_EQ(ListDirectory(dir.File("out")), std::vector<std::string>{"part-0.csv"});
  std::string header = ReadFileToString(dir.File("out/part-0.csv"));
  header = header.substr(0, header.find('\n'));
  EXPECT_EQ(header, "probs,x,c0,c1,label");  // outputs, then the input's columns in file order
  EXPECT_TZREC_ERROR(Predict(predict), "exists already");

  // A damaged weights file is named.
  const std::string weights = dir.File("export/model.safetensors");
  std::string bytes = ReadFileToString(weights);
  WriteFileAtomic(weights, bytes.substr(0, bytes.size() - 7));
  EXPECT_TZREC_ERROR(LoadExportedPipeline(dir.File("export"), PipelineMode::kPredict),
                   "model.safetensors");
  EXPECT_TZREC_ERROR(LoadExportedPipeline(dir.File("model"), PipelineMode::kPredict),
                   "is not an export directory");
}

TEST(ExportPredict, BestExporterPicksTheBestEvaluatedCheckpoint) {
  TempDir dir;
  std::string config = testing::WriteSmallConfig(dir);
  TrainAndEvaluate(testing::SmallOptions(dir, config, dir.File("model")));
  auto checkpoints = ListCheckpoints(dir.File("model"));
  ASSERT_GE(checkpoints.size(), 2u);
  auto pipeline_config = LoadPipelineConfig(dir.File("model/pipeline.config"));
  pipeline_config.set_model_dir(dir.File("model"));
  pipeline_config.mutable_export_config()->set_exporter_type("best");
  // Rewrite the results so that the first checkpoint is the best by auc and the last by loss.
  std::string lines;
  for (size_t i = 0; i < checkpoints.size(); ++i) {
    lines += StrCat("{\"global_step\": ", checkpoints[i].step, ", \"auc\": ", 0.9 - 0.1 * i,
                    ", \"binary_cross_entropy\": ", 0.9 - 0.1 * i, "}\n");
  }
  WriteFileAtomic(dir.File("model/train_eval_result_v2.txt"), lines);
  EXPECT_EQ(ChooseExportCheckpoint(pipeline_config, ""), checkpoints.front().path);
  pipeline_config.mutable_export_config()->set_best_exporter_metric("binary_cross_entropy");
  pipeline_config.mutable_export_config()->set_metric_larger_is_better(false);
  EXPECT_EQ(ChooseExportCheckpoint(pipeline_config, ""), checkpoints.back().path);
  pipeline_config.mutable_export_config()->set_best_exporter_metric("gauc");
  EXPECT_TZREC_ERROR(ChooseExportCheckpoint(pipeline_config, ""), "has no metric 'gauc'");
  pipeline_config.mutable_export_config()->set_exporter_type("latest");
  EXPECT_EQ(ChooseExportCheckpoint(pipeline_config, ""), checkpoints.back().path);

  // Training with exporter_type "best" and keep_checkpoint_max 1 keeps the newest checkpoint and
  // the best evaluated one before it.
  auto options = testing::SmallOptions(dir, config, dir.File("model_best"));
  options.edit_config_json = R"({"train_config.keep_checkpoint_max": 1,
      "train_config.save_checkpoints_steps": 4, "export_config.exporter_type": "best",
      "export_config.best_exporter_metric": "binary_cross_entropy",
      "export_config.metric_larger_is_better": false})";
  TrainAndEvaluate(options);
  auto results = testing::ReadJsonLines(dir.File("model_best/train_eval_result_v2.txt"));
  ASSERT_GE(results.size(), 3u);
  int64_t best_step = -1;
  double best_loss = 1e9;
  for (size_t i = 0; i + 1 < results.size(); ++i) {
    if (results[i]["binary_cross_entropy"].get<double>() < best_loss) {
      best_loss = results[i]["binary_cross_entropy"].get<double>();
      best_step = results[i]["global_step"].get<int64_t>();
    }
  }
  std::vector<int64_t> kept;
  for (const auto& ckpt : ListCheckpoints(dir.File("model_best"))) kept.push_back(ckpt.step);
  EXPECT_EQ(kept.back(), results.back()["global_step"].get<int64_t>());
  EXPECT_NE(std::find(kept.begin(), kept.end(), best_step), kept.end()) << best_step;
  EXPECT_LE(kept.size(), 2u);
}

}  // namespace
}  // namespace tzrec

namespace tzrec {
namespace {

// --debug_level's dump, on hand-made rows of every kind of generated feature.
TEST(ExportPredict, FeatureDumpIsTorchEasyRecs) {
  protos::EasyRecConfig config;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"(
    train_input_path: "" eval_input_path: "" model_dir: "unused"
    data_config { batch_size: 2 dataset_type: CsvDataset label_fields: "label" fg_mode: FG_NONE }
    feature_configs { raw_feature { feature_name: "x" expression: "user:x" value_dim: 2 } }
    feature_configs { id_feature { feature_name: "c" expression: "user:c" num_buckets: 100 embedding_dim: 4 } }
    feature_configs { id_feature { feature_name: "w" expression: "user:w" num_buckets: 100 embedding_dim: 4
                                   weighted: true } }
    feature_configs { sequence_id_feature { feature_name: "s" expression: "user:s" num_buckets: 100
                                            embedding_dim: 4 sequence_length: 5 sequence_delim: ";" } }
    feature_configs { sequence_raw_feature { feature_name: "r" expression: "user:r" sequence_length: 5
                                             sequence_delim: ";" } }
    model_config { feature_groups { group_name: "g" feature_names: ["x", "c", "w"] group_type: DEEP }
                   deepfm { deep { hidden_units: [2] } } losses { binary_cross_entropy {} } }
  )", &config));
  auto pipeline = BuildFeatures(config, PipelineMode::kPredict);
  ParsedBatch parsed;
  parsed.size = 2;
  DenseValues& x = parsed.dense["x"];
  x.dim = 2;
  x.values = {0.5f, -1.0f, 0.1f, 3e-8f};
  SparseValues& c = parsed.sparse["c"];
  c.values = {7, 8, 9};
  c.lengths = {2, 1};
  SparseValues& w = parsed.sparse["w"];
  w.values = {30, 4};
  w.lengths = {2, 0};
  w.weights = {0.25f, 2.0f};
  SparseValues& s = parsed.sparse["s"];
  s.sequence = true;
  s.values = {1, 2, 3};
  s.lengths = {2, 0};
  s.key_lengths = {1, 2};
  DenseValues& r = parsed.dense["r"];
  r.dim = 1;
  r.sequence = true;
  r.values = {1.5f, 2.0f, 4.0f};
  r.lengths = {1, 2};
  auto rows = FeatureDump(ToBatch(std::move(parsed)), pipeline->FeaturePointers());
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0], "x:0.5,-1.0 | c:7,8 | w:30:0.25,4:2.0 | s:1;2,3 | r:1.5");
  EXPECT_EQ(rows[1], "x:0.1,3e-08 | c:9 | w: | s: | r:2.0;4.0");
}

TEST(ExportPredict, DebugLevelAddsTheGeneratedFeatures) {
  TempDir dir;
  const std::string export_dir = testing::TrainAndExportSmallModel(dir);
  PredictOptions options;
  options.scripted_model_path = export_dir;
  options.predict_input_path = dir.File("data/eval/*.csv");
  options.predict_output_path = dir.File("pred");
  options.reserved_columns = "label";
  options.debug_level = 1;
  options.writer_type = "CsvWriter";
  Predict(options);
  std::ifstream in(dir.File("pred/part-0.csv"));
  std::string header, first;
  std::getline(in, header);
  std::getline(in, first);
  EXPECT_EQ(header, "logits,probs,label,__features__");
  EXPECT_NE(first.find("x:"), std::string::npos) << first;
  EXPECT_NE(first.find(" | c0:"), std::string::npos) << first;
  EXPECT_NE(first.find(" | c1:"), std::string::npos) << first;
  options.predict_output_path = dir.File("pred2");
  options.reserved_columns = "__features__";
  EXPECT_THROW(Predict(options), Error);
}

}  // namespace
}  // namespace tzrec
