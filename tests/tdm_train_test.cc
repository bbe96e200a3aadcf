// TorchEasyRec's TDM configs (tzrec/tests/configs/tdm_fg_mock.config, examples/tdm_taobao.config)
// train as a user without MaxCompute runs them: Parquet data and the item tree from gen_data
// (the tables tdm_init_tree writes), the tdm_sampler reading them in process. tdm_taobao's
// layer_num_sample (21 levels, a tree of about a million items) is cut to the 13 levels of
// gen_data's 4096 items, as a user sizes it to their catalogue.
//
// Test size: 8000 rows, one epoch, batch 64 (each row grows by its ancestors and per-level
// negatives: 54 rows for tdm_fg_mock, 90 for the cut tdm_taobao), sparse learning rate 0.05.
// Measured eval AUC over the grown rows: 0.82 (tdm_fg_mock), 0.92 (tdm_taobao); the bar is 0.7.
//
// tdm_fg_mock then runs TorchEasyRec's whole TDM flow (its match_integration_test): export
// (model/ and embedding/), predict of the items' embeddings, tdm_cluster_tree over them, and
// tdm_retrieval, whose beam search is checked against scoring every leaf through predict.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <numeric>
#include <set>

#include "export_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/serving/predict.h"
#include "tzrec/serving/tdm_retrieval.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/parquet/parquet_reader.h"
#include "tzrec/data/parquet/parquet_writer.h"
#include "tzrec/input/tdm_sampler.h"
#include "tzrec/tools/faiss_index.h"
#include "tzrec/tools/tdm_cluster_tree.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

// Every cell of `batch` as text (all gen_data's FG columns are strings).
std::string Cell(const RecordBatch& batch, const std::string& column, size_t row) {
  const Column* c = batch.Find(column);
  return c->IsNull(row) ? std::string() : c->TextAt(row);
}

void WriteStringParquet(const std::string& path, const std::vector<std::string>& names,
                        const std::vector<std::vector<std::string>>& rows) {
  RecordBatch batch;
  std::vector<ParquetFieldSpec> fields;
  for (size_t c = 0; c < names.size(); ++c) {
    fields.push_back(ParquetFieldSpec::Plain(names[c], ParquetType::kString));
    Column& column = batch.columns.emplace_back();
    column.name = names[c];
    for (const auto& row : rows) column.AppendString(row[c], true);
  }
  for (size_t r = 0; r < rows.size(); ++r) batch.line_numbers.push_back(static_cast<int64_t>(r) + 1);
  MakeDirs(path.substr(0, path.rfind('/')));
  ParquetFileWriter writer(path, fields);
  writer.Write(batch);
  writer.Close();
}

// recall_ids of each row of a tdm_retrieval CSV part, and its column names.
std::vector<std::vector<int64_t>> ReadRecall(const std::string& path, std::vector<std::string>* header) {
  std::vector<std::vector<int64_t>> out;
  const std::vector<std::string> lines = Split(ReadFileToString(path), "\n");
  *header = testing::CsvCells(lines[0]);
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    std::vector<int64_t> ids;
    for (const std::string& id : Split(testing::CsvCells(lines[i]).back(), ",")) {
      int64_t value = 0;
      EXPECT_TRUE(ParseInt64(id, &value)) << lines[i];
      ids.push_back(value);
    }
    out.push_back(std::move(ids));
  }
  return out;
}

// The tree as tdm_init_tree wrote it: each node's level (node_table.txt, the first attribute)
// and children in table order (predict_edge_table.txt).
struct TestTree {
  std::map<int64_t, int> level;
  std::map<int64_t, std::vector<int64_t>> children;
};

TestTree ReadTestTree(const std::string& dir) {
  TestTree tree;
  const std::vector<std::string> nodes = Split(ReadFileToString(dir + "/node_table.txt"), "\n");
  for (size_t i = 1; i < nodes.size(); ++i) {
    if (nodes[i].empty()) continue;
    const std::vector<std::string> fields = Split(nodes[i], "\t");
    tree.level[std::stoll(fields[0])] = std::stoi(Split(fields[2], ",")[0]);
  }
  const std::vector<std::string> edges = Split(ReadFileToString(dir + "/predict_edge_table.txt"), "\n");
  for (size_t i = 1; i < edges.size(); ++i) {
    if (edges[i].empty()) continue;
    const std::vector<std::string> fields = Split(edges[i], "\t");
    tree.children[std::stoll(fields[0])].push_back(std::stoll(fields[1]));
  }
  return tree;
}

// tdm_retrieval over the first users of the eval data against a reference: every (user, tree
// node) row scored by predict (the user's row with the node's columns from node_feature, features
// generated from the data as in training), the beam walked over those scores in the test.
void CheckRetrieval(const testing::TempDir& dir, const std::string& model_dir) {
  constexpr int64_t kUsers = 40;
  RecordBatch users, nodes;
  ParquetFileReader(dir.File("data/eval/part-00000.parquet")).ReadRows(0, kUsers, &users);
  ParquetFileReader node_reader(dir.File("data/sampler/tdm_tree/node_feature/part-0.parquet"));
  node_reader.ReadRows(0, node_reader.num_rows(), &nodes);
  const int64_t node_count = static_cast<int64_t>(nodes.num_rows());
  const TestTree tree = ReadTestTree(dir.File("data/sampler/tdm_tree"));
  std::vector<std::string> names;
  for (const Column& column : users.columns) names.push_back(column.name);
  std::vector<std::vector<std::string>> user_rows, pair_rows;
  std::map<int64_t, int64_t> node_index;  // node id -> position in node_feature
  for (int64_t n = 0; n < node_count; ++n) node_index[std::stoll(Cell(nodes, "item_id", n))] = n;
  for (int64_t u = 0; u < kUsers; ++u) {
    std::vector<std::string> row;
    for (const std::string& name : names) row.push_back(Cell(users, name, u));
    user_rows.push_back(row);
    for (int64_t n = 0; n < node_count; ++n) {
      std::vector<std::string> pair = row;
      for (size_t c = 0; c < names.size(); ++c) {
        if (nodes.Find(names[c])) pair[c] = Cell(nodes, names[c], n);
      }
      pair_rows.push_back(std::move(pair));
    }
  }
  WriteStringParquet(dir.File("users/part-0.parquet"), names, user_rows);
  // Predict's reader threads interleave batches: each pair row carries its position.
  std::vector<std::string> pair_names = names;
  pair_names.push_back("pair_row");
  for (size_t r = 0; r < pair_rows.size(); ++r) pair_rows[r].push_back(std::to_string(r));
  WriteStringParquet(dir.File("pairs/part-0.parquet"), pair_names, pair_rows);
  PredictOptions brute_options;
  brute_options.scripted_model_path = model_dir;
  brute_options.predict_input_path = dir.File("pairs/part-0.parquet");
  brute_options.output_columns = "probs1";
  brute_options.reserved_columns = "pair_row";
  const auto predicted = testing::RunPredict(brute_options, dir.File("pred_pairs"));
  ASSERT_EQ(predicted.at("probs1").size(), static_cast<size_t>(kUsers * node_count));
  std::vector<double> scores(kUsers * node_count, -1.0);
  for (size_t r = 0; r < scores.size(); ++r) {
    scores[static_cast<size_t>(predicted.at("pair_row")[r])] = predicted.at("probs1")[r];
  }
  auto score = [&](int64_t u, int64_t node) { return scores[u * node_count + node_index.at(node)]; };
  auto best_first = [&](int64_t u, std::vector<int64_t> candidates) {
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](int64_t a, int64_t b) { return score(u, a) > score(u, b); });
    return candidates;
  };
  constexpr int leaf_level = 9;  // tdm_fg_mock's 10 levels
  std::vector<int64_t> leaves;
  for (const auto& [id, level] : tree.level) {
    if (level == leaf_level) leaves.push_back(id);
  }
  ASSERT_EQ(leaves.size(), 512u);
  // The reference beam: from the root's descendants on `first`, keep the 2k best per level.
  auto reference_beam = [&](int64_t u, int64_t k, int first) {
    std::vector<int64_t> candidates = tree.children.at(-1);
    for (int level = 0; level < first; ++level) {
      std::vector<int64_t> next;
      for (int64_t c : candidates) next.insert(next.end(), tree.children.at(c).begin(), tree.children.at(c).end());
      candidates = next;
    }
    for (int level = first;; ++level) {
      candidates = best_first(u, candidates);
      if (level == leaf_level) break;
      candidates.resize(std::min<size_t>(candidates.size(), 2 * k));
      std::vector<int64_t> next;
      for (int64_t c : candidates) next.insert(next.end(), tree.children.at(c).begin(), tree.children.at(c).end());
      candidates = next;
    }
    candidates.resize(std::min<size_t>(candidates.size(), k));
    return candidates;
  };

  auto retrieve = [&](int64_t recall_num, const std::string& out) {
    TdmRetrievalOptions options;
    options.scripted_model_path = model_dir;
    options.predict_input_path = dir.File("users/part-0.parquet");
    options.predict_output_path = dir.File(out);
    options.recall_num = recall_num;
    options.reserved_columns = "user_id,item_id";
    options.writer_type = "CsvWriter";
    options.batch_size = 16;
    const TdmRetrievalResult result = TdmRetrieve(options);
    std::vector<std::string> header;
    auto recall = ReadRecall(dir.File(out + "/part-0.csv"), &header);
    EXPECT_EQ(header, (std::vector<std::string>{"user_id", "item_id", "recall_ids"}));
    EXPECT_EQ(result.users, kUsers);
    int64_t hits = 0;
    const size_t item_column = std::find(names.begin(), names.end(), "item_id") - names.begin();
    for (int64_t u = 0; u < kUsers; ++u) {
      hits += std::count(recall[u].begin(), recall[u].end(), std::stoll(user_rows[u][item_column]));
    }
    EXPECT_EQ(result.hits, hits);
    return recall;
  };

  // 512 leaves, recall_num 128: the search starts on the leaf level (2 * 2 * 128 = 2^9), so it
  // scores every leaf: the brute-force top 128, best first (equal up to float rounding).
  ASSERT_EQ(TdmFirstRecallLevel(2, 128, leaf_level), leaf_level);
  const auto exact = retrieve(128, "recall_exact");
  ASSERT_EQ(exact.size(), static_cast<size_t>(kUsers));
  for (int64_t u = 0; u < kUsers; ++u) {
    ASSERT_EQ(exact[u].size(), 128u);
    const double kth = score(u, best_first(u, leaves)[127]);
    double previous = 2.0;
    for (int64_t id : exact[u]) {
      ASSERT_EQ(tree.level.at(id), leaf_level);
      EXPECT_GE(score(u, id), kth - 1e-5) << "user row " << u << " item " << id;
      EXPECT_LE(score(u, id), previous + 1e-5) << "user row " << u << ": recall_ids best first";
      previous = score(u, id);
    }
  }

  // recall_num 8: a beam from level 5 (2 * 2 * 8 = 2^5), the reference beam over the scores of
  // predict. Users may differ only where two scores tie within float rounding.
  ASSERT_EQ(TdmFirstRecallLevel(2, 8, leaf_level), 5);
  const auto beam = retrieve(8, "recall_beam");
  int64_t same = 0;
  double overlap = 0;
  for (int64_t u = 0; u < kUsers; ++u) {
    ASSERT_EQ(beam[u].size(), 8u);
    same += beam[u] == reference_beam(u, 8, 5);
    std::vector<int64_t> top = best_first(u, leaves);
    top.resize(8);
    for (int64_t id : beam[u]) overlap += std::count(top.begin(), top.end(), id);
  }
  EXPECT_GE(same, kUsers - 2) << "users whose recall_ids match the reference beam";
  overlap /= kUsers * 8.0;
  std::printf("tdm_retrieval: %ld of %ld users as the reference beam; the beam finds %.3f of the brute-force top 8\n",
              static_cast<long>(same), static_cast<long>(kUsers), overlap);
}

void TdmTrains(const std::string& config_name, const std::string& extra_edits, bool whole_flow = false) {
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
  ASSERT_EQ(data.sampler_tables.size(), 5u);
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
  export_options.asset_files = data.sampler_tables.at("serving_tree");
  ExportModel(export_options);
  // As TorchEasyRec: model/ (with the serving tree) and embedding/.
  EXPECT_TRUE(PathExists(dir.File("export/model/serving_tree")));
  EXPECT_FALSE(PathExists(dir.File("export/embedding/serving_tree")));
  EXPECT_EQ(ReadExportManifest(dir.File("export/embedding"))["tower"], "embedding");
  PredictOptions from_export = from_checkpoint;
  from_export.pipeline_config_path.clear();
  from_export.scripted_model_path = dir.File("export/model");
  auto exported = testing::RunPredict(from_export, dir.File("pred_export"));
  for (const auto& [name, values] : expected) EXPECT_LE(testing::MaxAbsDiff(exported[name], values), 1e-6) << name;
  EXPECT_LE(testing::CheckScriptedModel(dir.File("export/model"), data.eval_pattern, expected, dir), 1e-5);
  if (!whole_flow) return;

  // The items' learnt embeddings (the sequence group's query side) through embedding/.
  PredictOptions item_options;
  item_options.scripted_model_path = dir.File("export/embedding");
  item_options.predict_input_path = data.sampler_tables.at("item_data");
  item_options.reserved_columns = "item_id,cate_id,id_4,id_5,raw_1,raw_2";
  item_options.output_columns = "item_emb";
  item_options.predict_output_path = dir.File("item_emb");
  item_options.writer_type = "CsvWriter";
  Predict(item_options);
  const EmbeddingRows item_emb = ReadEmbeddingTable(dir.File("item_emb/part-0.csv"), "item_id", "item_emb", "", 4096);
  ASSERT_EQ(item_emb.ids.size(), 512u);
  EXPECT_EQ(item_emb.dim, 16 + 8 + 16 + 1) << "the sequence group's item_id, cate_id, raw_1 (bucketized), raw_2";
  EXPECT_LE(testing::CheckScriptedModel(dir.File("export/embedding"), item_options.predict_input_path,
                                        {{"item_emb", std::vector<double>(item_emb.values.begin(), item_emb.values.end())}},
                                        dir),
            1e-5);

  // A tree learnt from them: every item a leaf on the last level, readable by the sampler.
  TdmClusterOptions cluster;
  cluster.tree.item_input_path = dir.File("item_emb/part-0.csv");
  cluster.tree.item_id_field = "item_id";
  cluster.tree.attr_fields = {"cate_id", "id_4", "id_5"};
  cluster.tree.raw_attr_fields = {"raw_1", "raw_2"};
  cluster.parallel = 2;
  const TdmTree learnt = BuildClusteredTdmTree(cluster);
  ASSERT_EQ(learnt.levels().size(), 10u);
  EXPECT_EQ(learnt.levels().back().size(), 512u);
  learnt.WriteNodeEdgeTables(dir.File("learnt_tree"), ",");
  CheckRetrieval(dir, dir.File("export/model"));
  // The ranker walks the learnt tree as well (tdm_retrieval reads the tree from the config).
  TdmRetrievalOptions on_learnt;
  on_learnt.scripted_model_path = dir.File("export/model");
  on_learnt.predict_input_path = dir.File("users/part-0.parquet");
  on_learnt.predict_output_path = dir.File("recall_learnt");
  on_learnt.recall_num = 8;
  on_learnt.edit_config_json = R"({"data_config.tdm_sampler.item_input_path": ")" + dir.File("learnt_tree/node_table.txt") +
                               R"(", "data_config.tdm_sampler.predict_edge_input_path": ")" +
                               dir.File("learnt_tree/predict_edge_table.txt") + "\"}";
  EXPECT_EQ(TdmRetrieve(on_learnt).users, 40);
  EXPECT_TRUE(PathExists(dir.File("recall_learnt/part-0.parquet")));
  // The command takes TorchEasyRec's flags.
  EXPECT_EQ(TdmRetrievalMain({"--scripted_model_path", dir.File("export/model"), "--predict_input_path",
                              dir.File("users/part-0.parquet"), "--predict_output_path", dir.File("recall_cli"),
                              "--recall_num=4", "--n_cluster=2", "--reserved_columns=user_id", "--batch_size=8",
                              "--num_worker_per_level=2", "--writer_type=CsvWriter"}),
            0);
  std::vector<std::string> header;
  const auto cli = ReadRecall(dir.File("recall_cli/part-0.csv"), &header);
  EXPECT_EQ(header, (std::vector<std::string>{"user_id", "recall_ids"}));
  ASSERT_EQ(cli.size(), 40u);
  for (const auto& ids : cli) EXPECT_EQ(ids.size(), 4u);
  // Bad inputs fail naming what is wrong, writing nothing.
  TdmRetrievalOptions bad = on_learnt;
  bad.predict_output_path = dir.File("recall_bad");
  bad.scripted_model_path = dir.File("export");
  EXPECT_TZREC_ERROR(TdmRetrieve(bad), "holds a TDM export: use its model/ directory");
  bad.scripted_model_path = dir.File("export/embedding");
  EXPECT_TZREC_ERROR(TdmRetrieve(bad), "is not the model/ directory of a TDM export");
  bad.scripted_model_path = dir.File("export/model");
  bad.recall_num = 0;
  EXPECT_TZREC_ERROR(TdmRetrieve(bad), "--recall_num must be positive");
  EXPECT_FALSE(PathExists(dir.File("recall_bad")));
}

TEST(TdmMock, TrainsExportsClustersAndRetrieves) { TdmTrains("tdm_fg_mock.config", "", true); }

TEST(TdmTaobao, TrainsWithLayerNumSampleCutToItsTree) {
  TdmTrains("tdm_taobao.config", R"(, "data_config.tdm_sampler.layer_num_sample": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])");
}

}  // namespace
}  // namespace tzrec
