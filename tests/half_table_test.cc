// FP16 and BF16 embedding tables (`data_type: "FP16"` / `"BF16"`): 2-byte weights with fp32
// optimizer state in the fused storage, initial values rounded to nearest, updates rounded
// stochastically (exactly as the reference twin rounds, and unbiased), checkpoints in fp32 that
// restore into any format; TorchEasyRec's FP16-table config trains, resumes bit for bit and
// exports; and 2-byte tables learn the planted signal as fp32 ones do.
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
  spec.data_type = TableDataType::kFP16;
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

// How a 2-byte row format rounds, for the tests below.
struct HalfFormat {
  RowFormat format;
  at::ScalarType type;
  double min_exponent, max_exponent;  // of the test's random values (powers of two)
  float near_overflow, overflow_step;  // a value and an update that pass the largest finite
  int mantissa_bits;                    // one step at |x| is at most |x| * 2^-mantissa_bits
  double smallest_step;                 // the subnormal spacing
};
// Half values up to 2^14, so three updates of at most half the value stay below the largest
// half; BF16 from fp32's subnormal range to 2^120. The largest half (65504) + 1000 passes 2^16;
// the largest bfloat16 (2^128 - 2^120) plus 0.98 of a step rounds up with that probability,
// and from infinity an update stays infinite.
const HalfFormat kFp16Format{RowFormat::kFloat16, at::kHalf, -26.0, 14.0, 65504.0f, -1000.0f, 10, std::ldexp(1.0, -24)};
const HalfFormat kBf16Format{RowFormat::kBFloat16, at::kBFloat16, -140.0, 120.0, 3.3895313892515355e38f, -1.3e36f, 7,
                             std::ldexp(1.0, -133)};

// With equal fp32 results (SGD with lr 1 and each row once: w - g rounded once, FMA or not),
// the fused kernels of every ISA round every element exactly as the reference twin: normal and
// subnormal values, both signs, overflow to infinity; untouched and unchanged rows stay.
void ExpectRoundingEqualsTheReferenceTwin(const HalfFormat& format) {
  testing::ForEachCpuIsa([&] {
    for (int dim : {16, 19}) {
      SCOPED_TRACE(dim);
      SparseOptimizer optimizer(Spec(SparseOptimizerSpec::Kind::kSgd, 1.0f));
      EmbeddingStorage fused(dim, &optimizer, format.format), reference(dim, &optimizer, format.format);
      EmbeddingTable* fused_table = fused.AddTable("t", 4096, true);
      EmbeddingTable* reference_table = reference.AddTable("t", 4096, true);
      fused.Allocate();
      reference.Allocate();
      std::mt19937 rng(dim);
      std::uniform_real_distribution<double> exponent(format.min_exponent, format.max_exponent), unit(0.0, 1.0);
      at::Tensor w = torch::empty({4096, dim}), g = torch::empty({4096, dim});
      for (int64_t i = 0; i < w.numel(); ++i) {
        const double magnitude = std::exp2(exponent(rng));
        const double sign = unit(rng) < 0.5 ? -1.0 : 1.0;
        w.data_ptr<float>()[i] = static_cast<float>(sign * magnitude);
        // Updates from far below a step to several steps, either direction.
        g.data_ptr<float>()[i] = static_cast<float>((unit(rng) - 0.5) * magnitude * std::exp2(-14.0 * unit(rng)));
      }
      // Gradients that underflowed to -0: +0 (the reference sums into +0, the kernels start from
      // the first term, so the sign of a zero update would differ; nothing else does).
      g.masked_fill_(g == 0, 0.0);
      g.narrow(0, 0, 8).zero_();  // no change: the rows stay exactly
      w.narrow(0, 8, 1).fill_(format.near_overflow);
      g.narrow(0, 8, 1).fill_(format.overflow_step);
      fused_table->stored().copy_(w);
      reference_table->stored().copy_(w);
      ASSERT_TRUE(torch::equal(fused_table->weight().narrow(0, 8, 1), w.narrow(0, 8, 1)));
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
        // Bits, not floats: two bfloat16s (an infinity above) can read as a NaN float.
        ASSERT_TRUE(torch::equal(fused.tensor().view(at::kInt), reference.tensor().view(at::kInt))) << "step " << step;
      }
      EXPECT_TRUE(torch::equal(fused_table->weight().narrow(0, 0, 8), before.narrow(0, 0, 8)));
      EXPECT_TRUE(torch::isinf(fused_table->weight().narrow(0, 8, 1)).all().item<bool>());
      // Every value moved by at most one step beyond its exact fp32 update, per step.
      const at::Tensor moved = fused_table->weight().narrow(0, 9, 4087);
      const at::Tensor exact = (before - 3 * g).narrow(0, 9, 4087);
      const at::Tensor slack = 3 * (exact.abs() + 3 * g.narrow(0, 9, 4087).abs()) * std::ldexp(1.0, -format.mantissa_bits) +
                               3 * format.smallest_step;
      EXPECT_TRUE(((moved - exact).abs() <= slack).all().item<bool>());
    }
  });
}

TEST(Fp16Table, StochasticRoundingEqualsTheReferenceTwinBitForBit) { ExpectRoundingEqualsTheReferenceTwin(kFp16Format); }
TEST(Bf16Table, StochasticRoundingEqualsTheReferenceTwinBitForBit) { ExpectRoundingEqualsTheReferenceTwin(kBf16Format); }

// Updates smaller than a step survive on average: from `start`, 400 steps of -`update` per
// element move the mean by 400 x update, where rounding to nearest would never move them; the
// elements go separate ways.
void ExpectRoundingIsUnbiased(const HalfFormat& format, const at::Tensor& start, float update, double tolerance) {
  testing::ForEachCpuIsa([&] {
    SparseOptimizer optimizer(Spec(SparseOptimizerSpec::Kind::kSgd, 1.0f));
    EmbeddingStorage storage(16, &optimizer, format.format);
    EmbeddingTable* table = storage.AddTable("t", 512, true);
    storage.Allocate();
    table->stored().copy_(start);
    ASSERT_TRUE(torch::equal(table->weight(), start));
    EveryRowOnce lookup(table);
    const std::vector<float> grad(512 * 16, update);
    for (int64_t step = 1; step <= 400; ++step) {
      FusedKernels().backward_update(&storage, lookup.Args(), 512, grad.data(), step);
    }
    const at::Tensor moved = table->weight() - start;
    EXPECT_NEAR(moved.mean().item<double>(), -400 * update, tolerance);
    EXPECT_GT(moved.std().item<double>(), 1e-3);  // elements went separate ways
    EXPECT_TRUE(torch::equal(table->weight(), table->weight().to(format.type).to(at::kFloat)));
  });
}

// Values in [0.75, 0.875) (256 of them, so elements draw their own random bits), updates of
// 1e-4 (a fifth of the half step there): each element's sum of rounding errors is a
// martingale of about 3e-3 standard deviation, so the mean over 8192 elements has one near 5e-5.
TEST(Fp16Table, StochasticRoundingIsUnbiased) {
  ExpectRoundingIsUnbiased(
      kFp16Format, 0.75 + torch::arange(512 * 16, torch::kFloat).remainder(256).reshape({512, 16}) * std::ldexp(1.0, -11),
      1e-4f, 5e-4);
}

// The 128 bfloat16s of [0.5, 1) (step 2^-8), updates of 5e-4 (an eighth of a step), 0.2 in
// all: an element's rounding errors sum to about 0.026 standard deviation, and 2048 (value,
// column) pairs draw their own bits, so the mean has one near 6e-4.
TEST(Bf16Table, StochasticRoundingIsUnbiased) {
  ExpectRoundingIsUnbiased(
      kBf16Format, 0.5 + torch::arange(512 * 16, torch::kFloat).remainder(128).reshape({512, 16}) * std::ldexp(1.0, -8),
      5e-4f, 2.5e-3);
}

// BF16 rows hold bfloat16s in the FP16 row layout: initial values and fp32 values written
// through stored() are rounded to nearest even as c10 rounds, over fp32's whole range.
TEST(Bf16Table, RowsHoldBfloat16sRoundedToNearest) {
  SparseOptimizer optimizer(Spec(SparseOptimizerSpec::Kind::kAdam, 0.1f));
  EmbeddingStorage fp32(19, &optimizer), bf16(19, &optimizer, RowFormat::kBFloat16);
  EmbeddingTable* full = fp32.AddTable("t", 1000, true);
  EmbeddingTable* table = bf16.AddTable("t", 1000, true);
  fp32.Allocate();
  bf16.Allocate();
  // 10 floats of bfloat16s (one padding) + 2 x 19 of Adam's moments, against 19 + 38.
  EXPECT_EQ(bf16.row_width(), 48);
  EXPECT_EQ(bf16.state_offset(), 10);
  EXPECT_EQ(fp32.row_width(), 57);
  EmbeddingTableSpec spec{"t", 1000, 19};
  spec.data_type = TableDataType::kBF16;
  const int64_t bf16_bytes = EmbeddingCollection::TableBytes(spec, &optimizer.spec());
  spec.data_type = TableDataType::kFP16;
  EXPECT_EQ(bf16_bytes, EmbeddingCollection::TableBytes(spec, &optimizer.spec()));
  EXPECT_EQ(bf16_bytes, 1000 * (48 * 4 + 4));
  ASSERT_EQ(table->stored().scalar_type(), at::kBFloat16);
  EXPECT_EQ(table->stored().sizes(), (std::vector<int64_t>{1000, 19}));
  EXPECT_TRUE(torch::equal(table->weight(), table->stored().to(at::kFloat)));
  EXPECT_TRUE(torch::equal(table->weight(), full->weight().to(at::kBFloat16).to(at::kFloat)));
  EXPECT_FALSE(torch::equal(table->weight(), full->weight()));
  ASSERT_EQ(table->optimizer_state().size(), 2u);
  EXPECT_TRUE(torch::equal(table->optimizer_state()[1].second, full->optimizer_state()[1].second));
  // Magnitudes no half holds: 1e-30 .. 1e30.
  const at::Tensor values = torch::randn({1000, 19}) * torch::pow(10.0, torch::randint(-30, 31, {1000, 1}).to(at::kFloat));
  table->stored().copy_(values);
  EXPECT_TRUE(torch::equal(table->weight(), values.to(at::kBFloat16).to(at::kFloat)));
  EXPECT_TRUE(torch::isfinite(table->weight()).all().item<bool>());
  EXPECT_LE(((table->weight() - values).abs() / values.abs()).max().item<double>(), std::ldexp(1.0, -8));
  EXPECT_TRUE(torch::equal(bf16.StoredForm(values), values.to(at::kBFloat16)));

  // A hash-stored BF16 table initialises rows on first touch as the dense one holds them.
  EmbeddingStorage dense(19, nullptr, RowFormat::kBFloat16), hashed(19, nullptr, RowFormat::kBFloat16);
  EmbeddingTable* d = dense.AddTable("h", 500, true);
  EmbeddingTable* h = hashed.AddTable("h", 500, true, /*hashed=*/true);
  dense.Allocate();
  hashed.Allocate();
  const at::Tensor ids = torch::tensor({7, 499, 0, 123}, torch::kLong);
  const at::Tensor slots = hashed.SlotsOf(h, ids);
  EXPECT_TRUE(torch::equal(h->weight().index_select(0, slots), d->weight().index_select(0, ids)));
  // The forward reads what stored() holds.
  EveryRowOnce lookup(d);
  at::Tensor out = torch::empty({500, 19});
  StorageForward(&dense, lookup.Args(), 500, out.data_ptr<float>());
  EXPECT_TRUE(torch::equal(out, d->weight()));
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
  EXPECT_EQ(half_tables["a_emb_wide"]->storage()->row_format(), RowFormat::kFloat16);
  EXPECT_EQ(half_tables["a_emb"]->storage()->row_format(), RowFormat::kFloat16);
  EXPECT_EQ(half_tables["b_emb"]->storage()->row_format(), RowFormat::kFloat32);
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
    EXPECT_FALSE(t->storage()->half_rows());
    EXPECT_TRUE(torch::equal(t->weight(), from_half.at(t->name()).at("weight"))) << t->name();
  }

  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(R"(
    feature_configs { id_feature { feature_name: "a" num_buckets: 50 embedding_dim: 8 data_type: "FP8" } }
    model_config { feature_groups { group_name: "wide" feature_names: ["a"] group_type: WIDE }
      feature_groups { group_name: "deep" feature_names: ["a"] group_type: DEEP }
      deepfm { deep { hidden_units: [8] } final { hidden_units: [4] } } losses { binary_cross_entropy {} } }
    data_config { label_fields: "clk" })"),
                     "feature_configs[0].id_feature.data_type: 'FP8' is not one of FP32, FP16, BF16");
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(R"(
    feature_configs { id_feature { feature_name: "a" num_buckets: 50 embedding_dim: 8 data_type: "FP16" embedding_name: "s" } }
    feature_configs { id_feature { feature_name: "b" num_buckets: 50 embedding_dim: 8 embedding_name: "s" } }
    model_config { feature_groups { group_name: "wide" feature_names: ["a", "b"] group_type: WIDE }
      feature_groups { group_name: "deep" feature_names: ["a", "b"] group_type: DEEP }
      deepfm { deep { hidden_units: [8] } final { hidden_units: [4] } } losses { binary_cross_entropy {} } }
    data_config { label_fields: "clk" })"),
                     "is shared by features with data_type FP16 and FP32");
}

// `data_type: "BF16"` (ours; TorchEasyRec has FP32 and FP16 only) gets storages of its own;
// its checkpoints are fp32 and restore into fp32 tables exactly, fp32 ones into it rounded.
TEST(Bf16Table, ConfigBuildsBf16TablesWhoseCheckpointsCrossFormats) {
  const std::string features = R"(
    feature_configs { id_feature { feature_name: "a" num_buckets: 50 embedding_dim: 8 data_type: "BF16" } }
    feature_configs { id_feature { feature_name: "b" num_buckets: 40 embedding_dim: 8 data_type: "FP16" } }
    feature_configs { id_feature { feature_name: "c" num_buckets: 30 embedding_dim: 8 } }
    model_config {
      feature_groups { group_name: "wide" feature_names: ["a", "b", "c"] group_type: WIDE }
      feature_groups { group_name: "deep" feature_names: ["a", "b", "c"] group_type: DEEP }
      deepfm { deep { hidden_units: [8] } final { hidden_units: [4] } }
      metrics { auc {} } losses { binary_cross_entropy {} }
    }
    data_config { label_fields: "clk" })";
  auto pipeline = testing::BuildTestPipeline(features);
  std::map<std::string, EmbeddingTable*> tables;
  for (EmbeddingTable* t : pipeline->model->embedding_collection().tables()) tables[t->name()] = t;
  EXPECT_EQ(tables.at("a_emb")->storage()->row_format(), RowFormat::kBFloat16);
  EXPECT_EQ(tables.at("a_emb_wide")->storage()->row_format(), RowFormat::kBFloat16);
  EXPECT_EQ(tables.at("b_emb")->storage()->row_format(), RowFormat::kFloat16);
  EXPECT_EQ(tables.at("c_emb")->storage()->row_format(), RowFormat::kFloat32);
  EXPECT_NE(tables.at("a_emb")->storage(), tables.at("b_emb")->storage());

  std::map<std::string, std::map<std::string, at::Tensor>> saved;
  pipeline->model->embedding_collection().VisitTableStates(
      true, [&](const std::string& name, const std::map<std::string, at::Tensor>& tensors) { saved[name] = tensors; });
  ASSERT_EQ(saved.at("a_emb").at("weight").scalar_type(), at::kFloat);
  EXPECT_TRUE(torch::equal(saved.at("a_emb").at("weight"), tables.at("a_emb")->weight()));
  const at::Tensor trained = torch::randn({50, 8}) * 1e20;  // beyond any half
  saved["a_emb"]["weight"] = trained;
  pipeline->model->embedding_collection().RestoreTables(saved, true, "test", [](const std::string&) {});
  EXPECT_TRUE(torch::equal(tables.at("a_emb")->weight(), trained.to(at::kBFloat16).to(at::kFloat)));
  // An fp32 table (a of a pipeline edited to FP32) takes the BF16 table's values exactly.
  std::string fp32_features = features;
  fp32_features.erase(fp32_features.find(R"( data_type: "BF16")"), 18);
  auto fp32 = testing::BuildTestPipeline(fp32_features);
  std::map<std::string, std::map<std::string, at::Tensor>> from_bf16;
  pipeline->model->embedding_collection().VisitTableStates(
      true, [&](const std::string& name, const std::map<std::string, at::Tensor>& tensors) { from_bf16[name] = tensors; });
  fp32->model->embedding_collection().RestoreTables(from_bf16, true, "test", [](const std::string&) {});
  for (EmbeddingTable* t : fp32->model->embedding_collection().tables()) {
    if (t->name() != "a_emb" && t->name() != "a_emb_wide") continue;
    EXPECT_EQ(t->storage()->row_format(), RowFormat::kFloat32);
    EXPECT_TRUE(torch::equal(t->weight(), from_bf16.at(t->name()).at("weight"))) << t->name();
  }
  EXPECT_TZREC_ERROR(testing::BuildTestPipeline(R"(
    feature_configs { id_feature { feature_name: "a" num_buckets: 50 embedding_dim: 8 data_type: "FP16" embedding_name: "s" } }
    feature_configs { id_feature { feature_name: "b" num_buckets: 50 embedding_dim: 8 data_type: "BF16" embedding_name: "s" } }
    model_config { feature_groups { group_name: "wide" feature_names: ["a", "b"] group_type: WIDE }
      feature_groups { group_name: "deep" feature_names: ["a", "b"] group_type: DEEP }
      deepfm { deep { hidden_units: [8] } final { hidden_units: [4] } } losses { binary_cross_entropy {} } }
    data_config { label_fields: "clk" })"),
                     "is shared by features with data_type FP16 and BF16");
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

// 2-byte tables learn the planted signal as fp32 ones: DeepFM with FP16 and with BF16 tables
// reaches 0.97 of the oracle's lift over 0.5 and the AUC of the same run with fp32 tables.
TEST(Fp16Table, DeepFmWithHalfTablesLearnsLikeFp32) {
  const std::string features = testing::PlantedFeatures(R"("clk")", 2, 0.002);
  const std::string model = R"(
    model_config {
      feature_groups { group_name: "wide" feature_names: ["u", "i", "c"] group_type: WIDE }
      feature_groups { group_name: "deep" feature_names: ["u", "i", "c", "r"] group_type: DEEP }
      feature_groups { group_name: "fm" feature_names: ["u", "i", "c"] group_type: DEEP }
      deepfm { deep { hidden_units: [32, 16] } final { hidden_units: [16] } }
      metrics { auc {} } losses { binary_cross_entropy {} }
    })";
  testing::TempDir fp32_dir;
  testing::DeterministicRuntime();
  const testing::PlantedRun fp32 = testing::TrainOnPlantedData(fp32_dir, features + model, 40000, 10000);
  for (const HalfFormat& format : {kFp16Format, kBf16Format}) {
    const std::string name = format.format == RowFormat::kBFloat16 ? "BF16" : "FP16";
    SCOPED_TRACE(name);
    std::string typed = features;
    for (size_t at = typed.find("embedding_dim: 8"); at != std::string::npos; at = typed.find("embedding_dim: 8", at + 1)) {
      typed.insert(at + 16, StrCat(R"( data_type: ")", name, R"(")"));
    }
    ASSERT_NE(typed.find(StrCat(R"(data_type: ")", name)), std::string::npos);
    testing::TempDir dir;
    testing::DeterministicRuntime();
    const testing::PlantedRun run = testing::TrainOnPlantedData(dir, typed + model, 40000, 10000);
    const double oracle = run.oracle["oracle_auc"].get<double>();
    const double auc = run.result["auc"].get<double>();
    EXPECT_GE(auc - 0.5, 0.97 * (oracle - 0.5)) << "auc " << auc << " oracle " << oracle;
    EXPECT_NEAR(auc, fp32.result["auc"].get<double>(), 0.005);
    const auto weights = testing::LoadModelFile(ListCheckpoints(dir.File("model")).back().path);
    const at::Tensor u = weights.at("embedding_group.u_emb.weight");
    EXPECT_TRUE(torch::equal(u, u.to(format.type).to(at::kFloat)));
  }
}

}  // namespace
}  // namespace tzrec
