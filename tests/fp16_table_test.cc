// FP16 embedding tables (`data_type: "FP16"`): half weights with fp32 optimizer state in the
// fused storage, initial values rounded to nearest, updates rounded stochastically (exactly as
// the reference twin rounds, and unbiased), checkpoints in fp32 that restore into either
// format; TorchEasyRec's FP16-table config trains, resumes bit for bit and exports; and half
// tables learn the planted signal as fp32 ones do.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <random>

#include "managed_ids_test_util.h"
#include "model_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/strings.h"
#include "tzrec/embedding/embedding_collection.h"
#include "tzrec/embedding/embedding_storage.h"
#include "tzrec/embedding/fused_lookup.h"
#include "tzrec/train/checkpoint.h"

namespace tzrec {
namespace {

SparseOptimizerSpec Spec(SparseOptimizerSpec::Kind kind, float lr) {
  SparseOptimizerSpec spec;
  spec.kind = kind;
  spec.lr = lr;
  return spec;
}

// One single-id bag per row of `table`, in row order.
struct EveryRowOnce {
  explicit EveryRowOnce(const EmbeddingTable* table) : table(table) {
    for (int64_t r = 0; r <= table->rows(); ++r) offsets.push_back(r);
    for (int64_t r = 0; r < table->rows(); ++r) values.push_back(r);
  }
  std::vector<LookupArgs> Args() const {
    return {{values.data(), offsets.data(), table->first_row(), table->rows(), false, true, nullptr}};
  }
  const EmbeddingTable* table;
  std::vector<int64_t> values, offsets;
};

TEST(Fp16Table, RowsHoldHalvesInLessThanHalfTheMemory) {
  SparseOptimizer optimizer(Spec(SparseOptimizerSpec::Kind::kRowwiseAdagrad, 0.1f));
  EmbeddingStorage fp32(16, &optimizer), fp16(16, &optimizer, RowFormat::kFloat16);
  EmbeddingTable* full = fp32.AddTable("t", 1000, true);
  EmbeddingTable* half = fp16.AddTable("t", 1000, true);
  fp32.Allocate();
  fp16.Allocate();
  // 8 floats of halves + 1 of row-wise state, against 16 + 1.
  EXPECT_EQ(fp16.row_width(), 9);
  EXPECT_EQ(fp32.row_width(), 17);
  EXPECT_EQ(fp16.state_offset(), 8);
  EXPECT_EQ(fp16.resident_bytes(), 1000 * (9 * 4 + 4));
  EmbeddingTableSpec spec{"t", 1000, 16};
  const int64_t fp32_bytes = EmbeddingCollection::TableBytes(spec, &optimizer.spec());
  spec.fp16 = true;
  EXPECT_EQ(EmbeddingCollection::TableBytes(spec, &optimizer.spec()) * 72, fp32_bytes * 40);
  // Stored as halves; weight() is their fp32 copy; initial values are fp32's rounded to nearest.
  ASSERT_EQ(half->stored().scalar_type(), at::kHalf);
  EXPECT_EQ(half->stored().sizes(), (std::vector<int64_t>{1000, 16}));
  EXPECT_EQ(half->weight().scalar_type(), at::kFloat);
  EXPECT_TRUE(torch::equal(half->weight(), half->stored().to(at::kFloat)));
  EXPECT_TRUE(torch::equal(half->weight(), full->weight().to(at::kHalf).to(at::kFloat)));
  EXPECT_FALSE(torch::equal(half->weight(), full->weight()));
  ASSERT_EQ(half->optimizer_state().size(), 1u);
  EXPECT_TRUE(torch::equal(half->optimizer_state()[0].second, full->optimizer_state()[0].second));
  // Writing fp32 values through stored() rounds them to nearest.
  const at::Tensor values = torch::randn({1000, 16});
  half->stored().copy_(values);
  EXPECT_TRUE(torch::equal(half->weight(), values.to(at::kHalf).to(at::kFloat)));
  EXPECT_TRUE(torch::equal(half->optimizer_state()[0].second, full->optimizer_state()[0].second));  // untouched
  EXPECT_TRUE(torch::equal(fp16.StoredForm(values), values.to(at::kHalf)));

  // A hash-stored FP16 table initialises rows on first touch as the dense one holds them.
  EmbeddingStorage dense(19, nullptr, RowFormat::kFloat16), hashed(19, nullptr, RowFormat::kFloat16);
  EmbeddingTable* d = dense.AddTable("h", 500, true);
  EmbeddingTable* h = hashed.AddTable("h", 500, true, /*hashed=*/true);
  dense.Allocate();
  hashed.Allocate();
  const at::Tensor ids = torch::tensor({7, 499, 0, 123}, torch::kLong);
  const at::Tensor slots = hashed.SlotsOf(h, ids);
  EXPECT_TRUE(torch::equal(h->weight().index_select(0, slots), d->weight().index_select(0, ids)));
  EXPECT_EQ(h->weight().size(0), 4);
}

// With equal fp32 results (SGD with lr 1 and each row once: w - g rounded once, FMA or not),
// the fused kernels of every ISA round every element exactly as the reference twin: normal and
// subnormal halves, both signs, overflow to infinity; untouched and unchanged rows stay.
TEST(Fp16Table, StochasticRoundingEqualsTheReferenceTwinBitForBit) {
  testing::ForEachCpuIsa([] {
    for (int dim : {16, 19}) {
      SCOPED_TRACE(dim);
      SparseOptimizer optimizer(Spec(SparseOptimizerSpec::Kind::kSgd, 1.0f));
      EmbeddingStorage fused(dim, &optimizer, RowFormat::kFloat16), reference(dim, &optimizer, RowFormat::kFloat16);
      EmbeddingTable* fused_table = fused.AddTable("t", 4096, true);
      EmbeddingTable* reference_table = reference.AddTable("t", 4096, true);
      fused.Allocate();
      reference.Allocate();
      std::mt19937 rng(dim);
      // Up to 2^14, so three updates of at most half the value stay below the largest half.
      std::uniform_real_distribution<double> exponent(-26.0, 14.0), unit(0.0, 1.0);
      at::Tensor w = torch::empty({4096, dim}), g = torch::empty({4096, dim});
      for (int64_t i = 0; i < w.numel(); ++i) {
        const double magnitude = std::exp2(exponent(rng));
        const double sign = unit(rng) < 0.5 ? -1.0 : 1.0;
        w.data_ptr<float>()[i] = static_cast<float>(sign * magnitude);
        // Updates from far below a half step to several steps, either direction.
        g.data_ptr<float>()[i] = static_cast<float>((unit(rng) - 0.5) * magnitude * std::exp2(-14.0 * unit(rng)));
      }
      g.narrow(0, 0, 8).zero_();                     // no change: the rows stay exactly
      w.narrow(0, 8, 1).fill_(65000.0f);             // pushed past the largest half: infinity
      g.narrow(0, 8, 1).fill_(-1000.0f);
      fused_table->stored().copy_(w);
      reference_table->stored().copy_(w);
      const at::Tensor before = fused_table->weight();
      EveryRowOnce lookup(fused_table);
      for (int64_t step = 1; step <= 3; ++step) {
        FusedKernels().backward_update(&fused, lookup.Args(), 4096, g.data_ptr<float>(), step);
        ReferenceKernels().backward_update(&reference, lookup.Args(), 4096, g.data_ptr<float>(), step);
        const at::Tensor a = fused_table->weight(), b = reference_table->weight();
        const at::Tensor differ = (a != b).nonzero();
        ASSERT_EQ(differ.size(0), 0) << "step " << step << ": first at " << differ[0] << " fused "
                                     << a.index({differ[0][0], differ[0][1]}).item<float>() << " reference "
                                     << b.index({differ[0][0], differ[0][1]}).item<float>() << " w "
                                     << w.index({differ[0][0], differ[0][1]}).item<float>() << " g "
                                     << g.index({differ[0][0], differ[0][1]}).item<float>();
        ASSERT_TRUE(torch::equal(fused.tensor(), reference.tensor())) << "step " << step;
      }
      EXPECT_TRUE(torch::equal(fused_table->weight().narrow(0, 0, 8), before.narrow(0, 0, 8)));
      EXPECT_TRUE(torch::isinf(fused_table->weight().narrow(0, 8, 1)).all().item<bool>());
      // Every value moved by at most one half step beyond its exact fp32 update, per step.
      const at::Tensor moved = fused_table->weight().narrow(0, 9, 4087);
      const at::Tensor exact = (before - 3 * g).narrow(0, 9, 4087);
      const at::Tensor slack = 3 * (exact.abs() + 3 * g.narrow(0, 9, 4087).abs()) * std::ldexp(1.0, -10) + std::ldexp(3.0, -24);
      EXPECT_TRUE(((moved - exact).abs() <= slack).all().item<bool>());
    }
  });
}

// Updates smaller than a half step survive on average: from values in [0.75, 0.875) (256 of
// them, so elements draw their own random bits), 400 steps of -1e-4 (a fifth of the half
// step there) move them by 0.04 in the mean, where rounding to nearest would never move them.
// Each element's sum of rounding errors is a martingale of about 3e-3 standard deviation, so
// the mean over 8192 elements has one near 5e-5.
TEST(Fp16Table, StochasticRoundingIsUnbiased) {
  testing::ForEachCpuIsa([] {
    SparseOptimizer optimizer(Spec(SparseOptimizerSpec::Kind::kSgd, 1.0f));
    EmbeddingStorage storage(16, &optimizer, RowFormat::kFloat16);
    EmbeddingTable* table = storage.AddTable("t", 512, true);
    storage.Allocate();
    const at::Tensor start =
        (0.75 + torch::arange(512 * 16, torch::kFloat).remainder(256).reshape({512, 16}) * std::ldexp(1.0, -11));
    table->stored().copy_(start);
    ASSERT_TRUE(torch::equal(table->weight(), start));
    EveryRowOnce lookup(table);
    const std::vector<float> grad(512 * 16, 1e-4f);
    for (int64_t step = 1; step <= 400; ++step) {
      FusedKernels().backward_update(&storage, lookup.Args(), 512, grad.data(), step);
    }
    const at::Tensor moved = table->weight() - start;
    EXPECT_NEAR(moved.mean().item<double>(), -400 * 1e-4, 5e-4);
    EXPECT_GT(moved.std().item<double>(), 1e-3);  // elements went separate ways
    EXPECT_TRUE(torch::equal(table->weight(), table->weight().to(at::kHalf).to(at::kFloat)));
  });
}

// Checkpoints hold fp32 weights; an FP16 table restores from fp32 ones (rounded to nearest) and
// an fp32 table from an FP16 table's (exactly).
TEST(Fp16Table, ConfigErrorsAndCheckpointsAcrossFormats) {
  const std::string features = R"(
    feature_configs { id_feature { feature_name: "a" num_buckets: 50 embedding_dim: 8 data_type: "FP16" } }
    feature_configs { id_feature { feature_name: "b" num_buckets: 40 embedding_dim: 8 } }
    model_config {
      feature_groups { group_name: "wide" feature_names: ["a", "b"] group_type: WIDE }
      feature_groups { group_name: "deep" feature_names: ["a", "b"] group_type: DEEP }
      deepfm { deep { hidden_units: [8] } final { hidden_units: [4] } }
      metrics { auc {} } losses { binary_cross_entropy {} }
    }
    data_config { label_fields: "clk" })";
  auto half = testing::BuildTestPipeline(features);
  std::map<std::string, EmbeddingTable*> half_tables;
  for (EmbeddingTable* t : half->model->embedding_collection().tables()) half_tables[t->name()] = t;
  ASSERT_TRUE(half_tables.count("a_emb") && half_tables.count("a_emb_wide"));
  EXPECT_TRUE(half_tables["a_emb_wide"]->storage()->fp16_rows());
  EXPECT_TRUE(half_tables["a_emb"]->storage()->fp16_rows());
  EXPECT_FALSE(half_tables["b_emb"]->storage()->fp16_rows());
  EXPECT_NE(half_tables["a_emb"]->storage(), half_tables["b_emb"]->storage());

  std::map<std::string, std::map<std::string, at::Tensor>> saved;
  half->model->embedding_collection().VisitTableStates(
      true, [&](const std::string& name, const std::map<std::string, at::Tensor>& tensors) { saved[name] = tensors; });
  ASSERT_EQ(saved.at("a_emb").at("weight").scalar_type(), at::kFloat);
  const at::Tensor trained = torch::randn({50, 8});
  saved["a_emb"]["weight"] = trained;
  int missing = 0;
  EXPECT_GE(half->model->embedding_collection().RestoreTables(saved, true, "test", [&](const std::string&) { ++missing; }), 4);
  EXPECT_EQ(missing, 0);
  EXPECT_TRUE(torch::equal(half_tables["a_emb"]->weight(), trained.to(at::kHalf).to(at::kFloat)));
  // An fp32 table (here a_emb of a pipeline edited to FP32) takes the FP16 table's values exactly.
  std::string fp32_features = features;
  fp32_features.erase(fp32_features.find(R"( data_type: "FP16")"), 18);
  auto fp32 = testing::BuildTestPipeline(fp32_features);
  std::map<std::string, std::map<std::string, at::Tensor>> from_half;
  half->model->embedding_collection().VisitTableStates(
      true, [&](const std::string& name, const std::map<std::string, at::Tensor>& tensors) { from_half[name] = tensors; });
  fp32->model->embedding_collection().RestoreTables(from_half, true, "test", [](const std::string&) {});
  for (EmbeddingTable* t : fp32->model->embedding_collection().tables()) {
    EXPECT_FALSE(t->storage()->fp16_rows());
    EXPECT_TRUE(torch::equal(t->weight(), from_half.at(t->name()).at("weight"))) << t->name();
  }

  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(R"(
    feature_configs { id_feature { feature_name: "a" num_buckets: 50 embedding_dim: 8 data_type: "BF16" } }
    model_config { feature_groups { group_name: "wide" feature_names: ["a"] group_type: WIDE }
      feature_groups { group_name: "deep" feature_names: ["a"] group_type: DEEP }
      deepfm { deep { hidden_units: [8] } final { hidden_units: [4] } } losses { binary_cross_entropy {} } }
    data_config { label_fields: "clk" })"),
                     "feature_configs[0].id_feature.data_type: 'BF16' is not one of FP32, FP16");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(R"(
    feature_configs { id_feature { feature_name: "a" num_buckets: 50 embedding_dim: 8 data_type: "FP16" embedding_name: "s" } }
    feature_configs { id_feature { feature_name: "b" num_buckets: 50 embedding_dim: 8 embedding_name: "s" } }
    model_config { feature_groups { group_name: "wide" feature_names: ["a", "b"] group_type: WIDE }
      feature_groups { group_name: "deep" feature_names: ["a", "b"] group_type: DEEP }
      deepfm { deep { hidden_units: [8] } final { hidden_units: [4] } } losses { binary_cross_entropy {} } }
    data_config { label_fields: "clk" })"),
                     "is shared by features with data_type FP16 and FP32");
}

// TorchEasyRec's multi_tower_din_fg_mock_bf16_emb_fp16: its FP16 tables (pooled, sequence,
// lookup and match features) train, a resumed run ends bit for bit where a straight one does,
// the checkpoints hold the halves' exact fp32 values, and the export predicts as the checkpoint.
TEST(Fp16Table, TorchEasyRecsFp16TableConfigTrainsResumesAndExports) {
  testing::TempDir dir;
  auto config = LoadPipelineConfig(testing::ReferenceConfig("multi_tower_din_fg_mock_bf16_emb_fp16.config"));
  testing::WriteFile(dir.File("id_vocab_list_1"), "xyz\n<OOV>\nabc\nefg\n");
  for (auto& feature : *config.mutable_feature_configs()) {
    if (feature.has_id_feature() && feature.id_feature().has_vocab_file()) {
      feature.mutable_id_feature()->set_vocab_file(dir.File("id_vocab_list_1"));
    }
  }
  // Its BF16 GEMMs apply to predict from a checkpoint but not to an export without
  // export_config.mixed_precision: fp32 here, so the two predict alike (BF16 is tested apart).
  ASSERT_EQ(config.train_config().mixed_precision(), "BF16");
  config.mutable_train_config()->clear_mixed_precision();
  SavePipelineConfig(config, dir.File("pipeline.config"));
  const TrainEvalOptions base = testing::MockDataOptions(dir, config, dir.File("pipeline.config"));
  const auto straight = testing::ExpectResumeIsBitForBit(
      [&](int64_t steps, bool resume, const std::string& name) {
        TrainEvalOptions options = base;
        options.model_dir = dir.File(name);
        options.continue_train = resume;
        options.edit_config_json = StrCat(R"({"data_config.batch_size": 64, "data_config.num_workers": 1,
            "train_config.num_epochs": 0, "train_config.num_steps": )", steps,
                                          R"(, "train_config.save_checkpoints_steps": 4})");
        return options;
      },
      dir, 4, 8, "_emb.weight", 10);
  int halves = 0;
  for (const char* table : {"user_id_emb", "item_id_emb", "combo_1_emb", "lookup_2_emb", "match_2_emb"}) {
    const at::Tensor w = straight.last.at(StrCat("embedding_group.", table, ".weight"));
    ASSERT_EQ(w.scalar_type(), at::kFloat) << table;
    EXPECT_TRUE(torch::equal(w, w.to(at::kHalf).to(at::kFloat))) << table;
    halves += !torch::equal(w, straight.first.at(StrCat("embedding_group.", table, ".weight")));
  }
  EXPECT_GE(halves, 3);  // trained between the first and the last checkpoint
  const at::Tensor fp32_table = straight.last.at("embedding_group.id_3_emb.weight");
  EXPECT_FALSE(torch::equal(fp32_table, fp32_table.to(at::kHalf).to(at::kFloat)));
  testing::ExpectExportPredictsLikeCheckpoint(dir, dir.File("straight"), base.eval_input_path);
}

// Half tables learn the planted signal as fp32 ones: DeepFM with FP16 tables reaches 0.97 of
// the oracle's lift over 0.5 and the AUC of the same run with fp32 tables.
TEST(Fp16Table, DeepFmWithHalfTablesLearnsLikeFp32) {
  std::string features = testing::PlantedFeatures(R"("clk")", 2, 0.002);
  const std::string model = R"(
    model_config {
      feature_groups { group_name: "wide" feature_names: ["u", "i", "c"] group_type: WIDE }
      feature_groups { group_name: "deep" feature_names: ["u", "i", "c", "r"] group_type: DEEP }
      feature_groups { group_name: "fm" feature_names: ["u", "i", "c"] group_type: DEEP }
      deepfm { deep { hidden_units: [32, 16] } final { hidden_units: [16] } }
      metrics { auc {} } losses { binary_cross_entropy {} }
    })";
  testing::TempDir fp32_dir, fp16_dir;
  testing::DeterministicRuntime();
  const testing::PlantedRun fp32 = testing::TrainOnPlantedData(fp32_dir, features + model, 40000, 10000);
  for (size_t at = features.find("embedding_dim: 8"); at != std::string::npos;
       at = features.find("embedding_dim: 8", at + 1)) {
    features.insert(at + 16, R"( data_type: "FP16")");
  }
  ASSERT_NE(features.find(R"(data_type: "FP16")"), std::string::npos);
  testing::DeterministicRuntime();
  const testing::PlantedRun fp16 = testing::TrainOnPlantedData(fp16_dir, features + model, 40000, 10000);
  const double oracle = fp16.oracle["oracle_auc"].get<double>();
  const double auc = fp16.result["auc"].get<double>();
  EXPECT_GE(auc - 0.5, 0.97 * (oracle - 0.5)) << "auc " << auc << " oracle " << oracle;
  EXPECT_NEAR(auc, fp32.result["auc"].get<double>(), 0.005);
  const auto weights = testing::LoadModelFile(ListCheckpoints(fp16_dir.File("model")).back().path);
  const at::Tensor u = weights.at("embedding_group.u_emb.weight");
  EXPECT_TRUE(torch::equal(u, u.to(at::kHalf).to(at::kFloat)));
}

}  // namespace
}  // namespace tzrec
