// TorchEasyRec's TDM configs (tzrec/tests/configs/tdm_fg_mock.config, examples/tdm_taobao.config)
// train as a user without MaxCompute runs them: Parquet data and the item tree from gen_data
// (the tables tdm_init_tree writes), the tdm_sampler reading them in process. tdm_taobao's
// layer_num_sample (21 levels, a tree of about a million items) is cut to the 13 levels of
// gen_data's 4096 items, as a user sizes it to their catalogue.
//
// Test size: 8000 rows, one epoch, batch 64 (each row grows by its ancestors and per-level
// negatives: 54 rows for tdm_fg_mock, 90 for the cut tdm_taobao), sparse learning rate 0.05.
// Measured eval AUC over the grown rows: 0.82 (tdm_fg_mock), 0.92 (tdm_taobao); the bar is 0.7.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "export_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/serving/predict.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

void TdmTrains(const std::string& config_name, const std::string& extra_edits) {
  SCOPED_TRACE(config_name);
  testing::DeterministicRuntime();
  testing::TempDir dir;
  const std::string config_path = testing::ReferenceConfig(config_name);
  std::string edits = R"({"data_config.dataset_type": "ParquetDataset", "data_config.batch_size": 64,
      "train_config.num_epochs": 1, "train_config.sparse_optimizer.adagrad_optimizer.lr": 0.05)" +
                      extra_edits + "}";
  auto config = LoadPipelineConfig(config_path);
  EditConfigJson(&config, edits);
  GenDataOptions gen;
  gen.output_dir = dir.File("data");
  gen.train_rows = 8000;
  gen.eval_rows = 2000;
  const GenDataResult data = GenerateMockData(config, gen);
  ASSERT_EQ(data.sampler_tables.size(), 3u);
  const std::string s = "\"data_config.tdm_sampler.";
  edits.insert(edits.size() - 1, ", " + s + "item_input_path\": \"" + data.sampler_tables.at("node_table") + "\", " + s +
                                     "edge_input_path\": \"" + data.sampler_tables.at("edge_table") + "\", " + s +
                                     "predict_edge_input_path\": \"" + data.sampler_tables.at("predict_edge_table") + "\"");
  TrainEvalOptions options;
  options.pipeline_config_path = config_path;
  options.model_dir = dir.File("model");
  options.train_input_path = data.train_pattern;
  options.eval_input_path = data.eval_pattern;
  options.edit_config_json = edits;
  TrainAndEvaluate(options);
  const nlohmann::json result = testing::LastEvalResult(dir.File("model"));
  ASSERT_TRUE(result.contains("auc")) << result.dump();
  EXPECT_GE(result["auc"].get<double>(), 0.7) << result.dump();
  EXPECT_FALSE(ListCheckpoints(dir.File("model")).empty());

  // The trained ranker scores (user, item) rows alike from its checkpoint, its export and its
  // scripted model (predict reads no sampler: the data's rows only).
  PredictOptions from_checkpoint;
  from_checkpoint.predict_input_path = data.eval_pattern;
  from_checkpoint.pipeline_config_path = dir.File("model/pipeline.config");
  const auto expected = testing::RunPredict(from_checkpoint, dir.File("pred_ckpt"));
  ASSERT_TRUE(expected.count("probs1")) << "predict columns";
  EXPECT_EQ(expected.at("probs1").size(), 2000u);
  ExportOptions export_options;
  export_options.pipeline_config_path = dir.File("model/pipeline.config");
  export_options.quant_from_environment = false;
  export_options.quant_emb = "0";
  export_options.export_dir = dir.File("export");
  ExportModel(export_options);
  PredictOptions from_export = from_checkpoint;
  from_export.pipeline_config_path.clear();
  from_export.scripted_model_path = dir.File("export");
  auto exported = testing::RunPredict(from_export, dir.File("pred_export"));
  for (const auto& [name, values] : expected) EXPECT_LE(testing::MaxAbsDiff(exported[name], values), 1e-6) << name;
  EXPECT_LE(testing::CheckScriptedModel(dir.File("export"), data.eval_pattern, expected, dir), 1e-5);
}

TEST(TdmMock, TrainsOnGenDatasTree) { TdmTrains("tdm_fg_mock.config", ""); }

TEST(TdmTaobao, TrainsWithLayerNumSampleCutToItsTree) {
  TdmTrains("tdm_taobao.config", R"(, "data_config.tdm_sampler.layer_num_sample": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])");
}

}  // namespace
}  // namespace tzrec
