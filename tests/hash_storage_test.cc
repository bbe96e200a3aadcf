// Hash-stored embedding tables (rows allocated on first touch): initial values and rows as a
// dense table has them, concurrent first touches, memory that follows the ids seen, training
// bit-identical to dense tables, checkpoints of touched rows restoring into either storage,
// exports serving trained rows, and TorchEasyRec's 40M-row Criteo configs training here
// without editing their table sizes.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <cstdlib>
#include <thread>

#include "export_test_util.h"
#include "model_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/data/safetensors.h"
#include "tzrec/embedding/embedding_storage.h"
#include "tzrec/embedding/fused_lookup.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/serving/predict.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/runtime.h"

namespace tzrec {
namespace {

using testing::DeterministicRuntime;
using testing::TempDir;
using testing::LoadModelFile;
using testing::SmallOptions;
using testing::WriteSmallConfig;

// Sets TZREC_EMBEDDING_STORAGE for one scope.
class StoragePolicy {
 public:
  explicit StoragePolicy(const char* policy) { setenv("TZREC_EMBEDDING_STORAGE", policy, 1); }
  ~StoragePolicy() { unsetenv("TZREC_EMBEDDING_STORAGE"); }
};

at::Tensor Ids(std::vector<int64_t> ids) {
  return torch::tensor(ids, torch::TensorOptions().dtype(torch::kLong));
}

TEST(HashStorage, RowsAreHandedOutOnFirstTouchWithTheDenseTablesInitialValues) {
  auto optimizer = SparseOptimizer::Create([] {
    protos::SparseOptimizer c;
    c.mutable_adagrad_optimizer()->set_lr(0.1f);
    return c;
  }());
  EmbeddingStorage dense(8, optimizer.get()), hashed(8, optimizer.get());
  EmbeddingTable* d = dense.AddTable("t", 1000, true);
  dense.AddTable("other", 10, true);
  hashed.AddTable("before", 7, true);
  EmbeddingTable* h = hashed.AddTable("t", 1000, true, /*hashed=*/true);
  dense.Allocate();
  hashed.Allocate();
  EXPECT_TRUE(hashed.has_hashed_tables());
  EXPECT_EQ(h->resident_rows(), 0);
  at::Tensor slots = hashed.SlotsOf(h, Ids({5, 900, 5, 3}));
  EXPECT_TRUE(torch::equal(slots, Ids({0, 1, 0, 2})));
  EXPECT_EQ(h->resident_rows(), 3);
  EXPECT_EQ(h->resident_ids(), (std::vector<int64_t>{5, 900, 3}));
  // Same values as the dense table's rows (a function of seed, table name, row, column).
  EXPECT_TRUE(torch::equal(h->weight(), d->weight().index_select(0, Ids({5, 900, 3}))));
  EXPECT_TRUE(torch::equal(h->optimizer_state()[0].second, torch::zeros({3, 8})));
  EXPECT_FALSE(torch::equal(d->weight()[5], d->weight()[6]));
  const double bound = std::sqrt(1.0 / 1000);
  EXPECT_LE(d->weight().abs().max().item<float>(), bound);
  EXPECT_GE(d->weight().abs().max().item<float>(), 0.9 * bound);
  EXPECT_NEAR(d->weight().mean().item<float>(), 0.0, 0.05 * bound);
  // Dense tables ignore SlotsOf; bad ids name the table.
  EXPECT_TRUE(torch::equal(dense.SlotsOf(d, Ids({7})), Ids({7})));
  EXPECT_TZREC_ERROR(hashed.SlotsOf(h, Ids({1000})), "embedding id 1000 out of range [0, 1000) of table 't'");
  EXPECT_TZREC_ERROR(hashed.SlotsOf(h, Ids({-1})), "out of range");
  // Storage rows <-> id rows for exchanges between ranks.
  at::Tensor rows = Ids({7 + 1, 3, 7 + 2});
  hashed.SlotRowsToIdRows(&rows);
  EXPECT_TRUE(torch::equal(rows, Ids({7 + 900, 3, 7 + 3})));
  rows = Ids({7 + 900, 7 + 42, 2});
  hashed.IdRowsToSlotRows(&rows);
  EXPECT_TRUE(torch::equal(rows, Ids({7 + 1, 7 + 3, 2})));  // 42 got a new row
  EXPECT_TRUE(torch::equal(h->weight()[3], d->weight()[42]));
  // A shard's rows are its logical rows' values: a contiguous block from row 500, and every
  // second row from row 1 (rank 1 of 2, row-wise).
  EmbeddingStorage shard(8, nullptr);
  EmbeddingTable* s = shard.AddTable("t", 500, true, true);
  EmbeddingTable* interleaved = shard.AddTable("t", 500, true, true);
  shard.Allocate(false);
  shard.InitializeTable(s, 1000, 8, 500, 1, 0);
  shard.InitializeTable(interleaved, 1000, 8, 1, 2, 0);
  shard.SlotsOf(s, Ids({400}));
  shard.SlotsOf(interleaved, Ids({400, 3}));
  EXPECT_TRUE(torch::equal(s->weight()[0], d->weight()[900]));
  EXPECT_TRUE(torch::equal(interleaved->weight()[0], d->weight()[801]));
  EXPECT_TRUE(torch::equal(interleaved->weight()[1], d->weight()[7]));
}

TEST(HashStorage, ConcurrentFirstTouchesGiveEachIdOneWholeRow) {
  EmbeddingStorage dense(16, nullptr), hashed(16, nullptr);
  EmbeddingTable* d = dense.AddTable("t", 5000, false);
  EmbeddingTable* h = hashed.AddTable("t", 5000, false, true);
  dense.Allocate();
  hashed.Allocate();
  std::vector<std::thread> threads;
  std::vector<at::Tensor> results(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<int64_t> ids;
      for (int64_t i = 0; i < 3000; ++i) ids.push_back((i * (t + 1) * 7919) % 5000);
      at::Tensor slots = hashed.SlotsOf(h, Ids(ids));
      results[t] = torch::stack({Ids(ids), slots});
    });
  }
  for (auto& thread : threads) thread.join();
  const std::vector<int64_t> resident = h->resident_ids();
  std::set<int64_t> distinct(resident.begin(), resident.end());
  EXPECT_EQ(distinct.size(), resident.size());
  for (const at::Tensor& r : results) {
    for (int64_t i = 0; i < r.size(1); ++i) {
      ASSERT_EQ(resident[r[1][i].item<int64_t>()], r[0][i].item<int64_t>());
    }
  }
  EXPECT_TRUE(torch::equal(h->weight(), d->weight().index_select(0, Ids(resident))));
}

TEST(HashStorage, MemoryFollowsTheRowsTouchedNotTheDeclaredRows) {
  auto optimizer = SparseOptimizer::Create([] {
    protos::SparseOptimizer c;
    c.mutable_adam_optimizer()->set_lr(0.01f);
    return c;
  }());
  const int64_t before = ResidentSetBytes();
  // 200M rows of [16 weights | 32 Adam state]: 38 GB dense, more than this machine has.
  EmbeddingStorage storage(16, optimizer.get());
  EmbeddingTable* table = storage.AddTable("huge", 200'000'000, true, true);
  storage.Allocate();
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 100000; ++i) ids.push_back((i * 1999993) % 200'000'000);
  at::Tensor slots = storage.SlotsOf(table, Ids(ids));
  // One training step through the fused kernels.
  std::vector<int64_t> offsets(ids.size() + 1);
  for (size_t i = 0; i <= ids.size(); ++i) offsets[i] = static_cast<int64_t>(i);
  LookupArgs args{slots.data_ptr<int64_t>(), offsets.data(), table->first_row(), table->rows(), false, true};
  std::vector<float> grad(ids.size() * 16, 0.5f);
  SelectedKernels().backward_update(&storage, {args}, static_cast<int64_t>(ids.size()), grad.data(), 1);
  EXPECT_EQ(table->resident_rows(), 100000);
  EXPECT_EQ(storage.resident_bytes(), 100000 * (48 * 4 + 4));
  const int64_t grown = ResidentSetBytes() - before;
  std::printf("200M-row hash-stored table, 100k rows touched: RSS grew %lld MiB\n",
              static_cast<long long>(grown >> 20));
  EXPECT_LT(grown, int64_t{256} << 20);
  EXPECT_LT(table->weight().max().item<float>(), 0.0f + std::sqrt(1.0 / 200'000'000));  // stepped down
}

TEST(HashStorage, BadSavedRowsFailNamingTheTable) {
  StoragePolicy scoped("hash");
  auto pipeline = testing::BuildTestPipeline(R"(
    data_config { dataset_type: CsvDataset label_fields: "label" }
    feature_configs { id_feature { feature_name: "a" num_buckets: 3 embedding_dim: 2 } }
    model_config {
      feature_groups { group_name: "wide" feature_names: ["a"] group_type: WIDE }
      feature_groups { group_name: "deep" feature_names: ["a"] group_type: DEEP }
      deepfm { deep { hidden_units: [2] } }
      losses { binary_cross_entropy {} }
    })", /*training=*/false);
  EmbeddingCollection& tables = pipeline->model->embedding_collection();
  ASSERT_EQ(tables.hashed_tables(), (std::set<std::string>{"a_emb", "a_emb_wide"}));
  auto restore = [&](at::Tensor ids, at::Tensor weight) {
    std::map<std::string, std::map<std::string, at::Tensor>> saved;
    saved["a_emb"] = {{"ids", ids}, {"weight", weight}};
    tables.RestoreTables(saved, false, "ckpt", [](const std::string&) {});
  };
  EXPECT_TZREC_ERROR(restore(Ids({0, 0}), torch::zeros({2, 2})), "ckpt: table a_emb has repeated ids");
  EXPECT_TZREC_ERROR(restore(Ids({3}), torch::zeros({1, 2})), "ckpt: table a_emb has ids outside [0, 3)");
  EXPECT_TZREC_ERROR(restore(Ids({1}), torch::zeros({2, 2})), "ckpt: table a_emb is Float [2, 2] for 1 ids");
  EXPECT_TZREC_ERROR(restore(torch::zeros({1}), torch::zeros({1, 2})), "ids are Float [1], not int64 [n]");
  restore(Ids({2}), torch::full({1, 2}, 0.5f));
  EmbeddingTable* table = nullptr;
  for (EmbeddingTable* t : tables.tables()) table = t->name() == "a_emb" ? t : table;
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->resident_ids(), (std::vector<int64_t>{2}));
  EXPECT_TRUE(torch::equal(table->weight(), torch::full({1, 2}, 0.5f)));
}

// Trains the small config into `model_dir` under `policy`; returns its last checkpoint.
std::string TrainWithPolicy(const TempDir& dir, const std::string& config, const std::string& model_dir,
                            const char* policy, const std::string& edits, bool continue_train = false) {
  StoragePolicy scoped(policy);
  DeterministicRuntime();
  auto options = SmallOptions(dir, config, model_dir);
  options.edit_config_json = edits;
  options.continue_train = continue_train;
  TrainAndEvaluate(options);
  return ListCheckpoints(model_dir).back().path;
}

// Checkpoint tensors of a hash-stored run against a dense run's: dense parameters equal, each
// table's saved rows equal the dense table's rows of those ids.
void ExpectSameTraining(const std::map<std::string, at::Tensor>& dense,
                        const std::map<std::string, at::Tensor>& hashed, bool expect_sparse) {
  int tables = 0;
  for (const auto& [name, tensor] : dense) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(hashed.count(name));
    auto ids = hashed.find(name + ".ids");
    if (ids == hashed.end()) {
      EXPECT_FALSE(expect_sparse && StartsWith(name, "embedding_group.") && EndsWith(name, ".weight"));
      EXPECT_TRUE(torch::equal(tensor, hashed.at(name)));
      continue;
    }
    ++tables;
    EXPECT_LE(ids->second.numel(), 50);
    EXPECT_EQ(tensor.size(0), 100000);
    EXPECT_TRUE(torch::equal(tensor.index_select(0, ids->second), hashed.at(name)));
  }
  if (expect_sparse) EXPECT_GT(tables, 0);
}

TEST(HashStorage, TrainsBitForBitAsDenseTablesAndCheckpointsTouchedRowsOnly) {
  TempDir dir;
  const std::string config = WriteSmallConfig(dir);
  // Tables of 100000 declared rows, of which the data holds at most 50.
  const std::string sizes = R"("feature_configs[id_feature.num_buckets>0].id_feature.num_buckets": 100000)";
  const std::string edits = R"({"data_config.shuffle": false, )" + sizes + "}";
  const std::string dense = TrainWithPolicy(dir, config, dir.File("dense"), "dense", edits);
  const std::string hashed = TrainWithPolicy(dir, config, dir.File("hashed"), "hash", edits);
  auto dense_state = LoadModelFile(dense);
  auto hashed_state = LoadModelFile(hashed);
  ExpectSameTraining(dense_state, hashed_state, /*expect_sparse=*/true);
  EXPECT_EQ(testing::LastEvalResult(dir.File("dense"))["auc"], testing::LastEvalResult(dir.File("hashed"))["auc"]);

  // Interrupted at step 10 and continued in the other storage: the same as straight through
  // (a hash checkpoint restores into dense tables and a dense one into hash-stored tables).
  const std::string first = R"({"data_config.shuffle": false, "train_config.num_steps": 11, )" + sizes + "}";
  TrainWithPolicy(dir, config, dir.File("hash_then_dense"), "hash", first);
  const std::string a = TrainWithPolicy(dir, config, dir.File("hash_then_dense"), "dense", edits, true);
  ExpectSameTraining(dense_state, LoadModelFile(a), false);
  TrainWithPolicy(dir, config, dir.File("dense_then_hash"), "dense", first);
  const std::string b = TrainWithPolicy(dir, config, dir.File("dense_then_hash"), "hash", edits, true);
  ExpectSameTraining(dense_state, LoadModelFile(b), true);
}

TEST(HashStorage, ExportsServeTrainedRowsAndInitialValuesForUnseenIds) {
  TempDir dir;
  const std::string config = WriteSmallConfig(dir);
  // One step of 64 rows: some ids of the 50-row table are first seen by predict.
  const std::string edits = R"({"data_config.shuffle": false, "train_config.num_steps": 1})";
  TrainWithPolicy(dir, config, dir.File("dense"), "dense", edits);
  TrainWithPolicy(dir, config, dir.File("hashed"), "hash", edits);
  std::map<std::string, std::map<std::string, std::vector<double>>> outputs;
  for (const std::string run : {"dense", "hashed"}) {
    // The export keeps the tables hash-stored when they are at export time.
    StoragePolicy scoped(run == "hashed" ? "hash" : "dense");
    ExportOptions options;
    options.pipeline_config_path = dir.File(run + "/pipeline.config");
    options.quant_from_environment = false;
    options.quant_emb = "0";
    options.export_dir = dir.File(run + "_export");
    ExportModel(options);
    auto manifest = ReadExportManifest(options.export_dir);
    int64_t exported = 0, declared = 0;
    for (const auto& table : manifest["tables"]) {
      EXPECT_EQ(table.contains("ids"), run == "hashed") << table.dump();
      declared += table["rows"].get<int64_t>();
      if (table.contains("ids")) {
        exported += SafetensorsFile::Open(options.export_dir + "/model.safetensors")
                        .Get(table["ids"].get<std::string>()).shape[0];
      }
    }
    if (run == "hashed") EXPECT_LT(exported, declared);
    EXPECT_EQ(manifest.contains("scripted_model"), run == "dense");
    // Serving under another seed still gives unseen ids training's initial values.
    setenv("TORCH_MANUAL_SEED", "12345", 1);
    InitRuntime();
    PredictOptions predict;
    predict.scripted_model_path = options.export_dir;
    predict.predict_input_path = dir.File("data/eval/*.csv");
    outputs[run] = testing::RunPredict(predict, dir.File(run + "_pred"));
  }
  ASSERT_FALSE(outputs["dense"].empty());
  for (const auto& [name, values] : outputs["dense"]) {
    EXPECT_LE(testing::MaxAbsDiff(values, outputs["hashed"][name]), 1e-6) << name;
  }
}

long PeakRssMiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss >> 10;
}

// TorchEasyRec's Criteo examples declare 40M-row tables (DeepFM's need 32.7 GB with their
// optimizer state); they train here from gen_data without editing their sizes. Every table
// hash-stored keeps the test small; the default policy (dense tables up to a quarter of the
// memory) measured 7.6 GB (DeepFM), 11.3 GB (DLRM) and 11.8 GB (MaskNet) peak RSS on 24 GB.
void TrainsUncappedCriteo(const std::string& config_name) {
  TempDir dir;
  StoragePolicy scoped("hash");
  auto config = LoadPipelineConfig(testing::ReferenceConfig(config_name));
  const std::string edits = R"({"data_config.dataset_type": "ParquetDataset",
      "data_config.batch_size": 512, "train_config.num_epochs": 1, "eval_config.num_steps": 2})";
  EditConfigJson(&config, edits);
  int64_t declared = 0;
  for (const auto& feature : config.feature_configs()) {
    if (!feature.has_id_feature()) continue;
    declared = std::max<int64_t>(declared, std::max<int64_t>(feature.id_feature().num_buckets(),
                                                             feature.id_feature().hash_bucket_size()));
  }
  EXPECT_GE(declared, 40'000'000);
  GenDataOptions gen;
  gen.output_dir = dir.File("data");
  gen.train_rows = 2048;
  gen.eval_rows = 1024;
  auto data = GenerateMockData(config, gen);
  TrainEvalOptions options;
  options.pipeline_config_path = testing::ReferenceConfig(config_name);
  options.model_dir = dir.File("model");
  options.train_input_path = data.train_pattern;
  options.eval_input_path = data.eval_pattern;
  options.edit_config_json = edits;
  TrainAndEvaluate(options);
  auto results = testing::ReadJsonLines(dir.File("model/train_eval_result_v2.txt"));
  ASSERT_FALSE(results.empty());
  EXPECT_GE(results.back()["global_step"].get<int64_t>(), 3);
  std::printf("%s with its 40M-row tables: peak RSS %ld MiB\n", config_name.c_str(), PeakRssMiB());
  EXPECT_LT(PeakRssMiB(), 3 * 1024);
}

TEST(HashStorage, CriteoDeepFMTrainsWithItsDeclaredTableSizes) { TrainsUncappedCriteo("deepfm_criteo.config"); }
TEST(HashStorage, CriteoDLRMTrainsWithItsDeclaredTableSizes) { TrainsUncappedCriteo("dlrm_criteo.config"); }
TEST(HashStorage, CriteoMaskNetTrainsWithItsDeclaredTableSizes) { TrainsUncappedCriteo("masknet_criteo.config"); }
// Its dense_mlp ends in 128 against sparse features of 16, which TorchEasyRec's WuKong refuses:
// here the dense output makes 8 fields (models/wukong.cc).
TEST(HashStorage, CriteoWuKongTrainsWithItsDeclaredTableSizes) { TrainsUncappedCriteo("wukong_criteo.config"); }

}  // namespace
}  // namespace tzrec
