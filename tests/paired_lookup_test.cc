// A companion storage riding with another (fused_lookup.h's CompanionLookups: a feature's WIDE
// table looked up in the pass over its DEEP table's ids) gives what two separate calls give -
// outputs, updated rows and optimizer state - for every optimizer, ISA and partition count;
// falls back to two calls where the pair cannot run (reference kernels, deferred updates); and
// a DeepFM trained with it equals one trained without.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <random>

#include "embedding_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/embedding/fused_lookup.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

using testing::DeterministicRuntime;
using testing::SmallOptions;
using testing::TempDir;
using testing::WriteSmallConfig;

at::Tensor LongTensor(const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong); }

// One storage pair: `first` (dim) with tables 30 / 7 trainable rows and 9 frozen, and
// `companion` (companion_dim) with twins of the first and the frozen table.
struct StoragePair {
  StoragePair(int dim, int companion_dim, const SparseOptimizer* optimizer)
      : first(dim, optimizer), companion(companion_dim, optimizer) {
    tables = {first.AddTable("a", 30, true), first.AddTable("b", 7, true), first.AddTable("frozen", 9, false)};
    companion_tables = {companion.AddTable("a_wide", 30, true), companion.AddTable("frozen_wide", 9, false)};
    first.Allocate();
    companion.Allocate();
  }
  EmbeddingStorage first, companion;
  std::vector<EmbeddingTable*> tables, companion_tables;
};

// The call of the tests: pooled lookups a weighted (riding: a_wide at position 1), b mean, a
// mean and weighted (no rider: a table may be read by other lookups too), frozen mean (riding:
// frozen_wide at 0), b weighted; and one sequence lookup of b (own steps).
struct Call {
  std::vector<LookupTensors> pooled, sequences, companion_lookups;
  CompanionLookups companion;
};

Call MakeCall(std::mt19937& rng, StoragePair& pair, int64_t bags) {
  struct Spec {
    int table;
    bool mean, weighted;
    int rider;  // companion table, -1: none
  };
  const std::vector<Spec> specs = {{0, false, true, 0}, {1, true, false, -1}, {0, true, true, -1},
                                   {2, true, false, 1}, {1, false, true, -1}};
  Call call;
  call.companion.storage = &pair.companion;
  call.companion.count = 2;
  call.companion_lookups.resize(2);
  const int positions[] = {1, 0};
  for (const Spec& spec : specs) {
    const int64_t rows = pair.tables[spec.table]->rows();
    RandomLookup l = MakeLookup(rng, spec.table, rows, bags, spec.mean, spec.weighted);
    LookupTensors t{LongTensor(l.values), LongTensor(l.offsets), pair.tables[spec.table], spec.mean,
                    spec.weighted ? torch::tensor(l.weights, torch::kFloat) : at::Tensor()};
    call.pooled.push_back(t);
    if (spec.rider >= 0) {
      call.companion.tables.push_back(pair.companion_tables[spec.rider]);
      call.companion.positions.push_back(positions[spec.rider]);
      LookupTensors c = t;
      c.table = pair.companion_tables[spec.rider];
      call.companion_lookups[positions[spec.rider]] = c;
    } else {
      call.companion.tables.push_back(nullptr);
      call.companion.positions.push_back(-1);
    }
  }
  RandomLookup steps = MakeLookup(rng, 1, 7, bags / 2 + 3, false);
  call.sequences.push_back({LongTensor(steps.values), LongTensor(steps.offsets), pair.tables[1], false});
  return call;
}

// The same sums in the same order: equal but where the compiler fused a multiply-add in one
// context and not in the other (seen at fixed-width dims on AVX2: a few ulps of a row's summed
// gradient, and so of Adagrad's sum of squares), the tolerance of the reference-twin tests.
void ExpectSame(const at::Tensor& a, const at::Tensor& b, const std::string& what) {
  EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-6)) << what << ": " << (a - b).abs().max();
}

// The pair against two calls, step after step, for every optimizer, first dim (fixed-width and
// runtime ones), companion dim, ISA, and one or three partitions.
TEST(PairedLookup, RidingEqualsTwoSeparateCalls) {
  const int threads = at::get_num_threads();
  at::set_num_threads(3);
  testing::ForEachCpuIsa([] {
    std::mt19937 rng(5);
    for (const auto& spec : AllSpecs()) {
      for (auto [dim, companion_dim] : {std::pair<int, int>{16, 4}, {8, 1}, {19, 7}, {32, 16}, {4, 8}}) {
        SCOPED_TRACE(::testing::Message() << spec.Name() << " dim " << dim << " companion " << companion_dim
                                          << " wd " << spec.weight_decay);
        torch::manual_seed(dim + companion_dim);
        SparseOptimizer optimizer(spec);
        StoragePair riding(dim, companion_dim, &optimizer), separate(dim, companion_dim, &optimizer);
        separate.first.tensor().copy_(riding.first.tensor());
        separate.companion.tensor().copy_(riding.companion.tensor());
        const at::Tensor trained = riding.companion_tables[0]->weight().clone();
        const at::Tensor frozen = riding.companion_tables[1]->weight().clone();
        for (int64_t step = 1; step <= 4; ++step) {
          const int64_t bags = step % 2 ? 37 : 2500;  // 2500: enough ids for three partitions
          SCOPED_TRACE(step);
          std::mt19937 same(static_cast<unsigned>(rng()));
          std::mt19937 copy = same;
          Call a = MakeCall(same, riding, bags), b = MakeCall(copy, separate, bags);
          std::vector<at::Tensor> ra = StorageLookup(&riding.first, a.pooled, a.sequences, bags, true, nullptr, &a.companion);
          std::vector<at::Tensor> rb = StorageLookup(&separate.first, b.pooled, b.sequences, bags, true);
          rb.push_back(StoragePooledLookup(&separate.companion, b.companion_lookups, bags, true));
          ASSERT_EQ(ra.size(), rb.size());
          for (size_t i = 0; i < ra.size(); ++i) ExpectSame(ra[i], rb[i], "output " + std::to_string(i));
          std::vector<at::Tensor> grads;
          for (const at::Tensor& out : ra) grads.push_back(torch::randn(out.sizes()));
          torch::autograd::backward(ra, grads);
          torch::autograd::backward(rb, grads);
          optimizer.FinishStep();
          ExpectSame(riding.first.tensor(), separate.first.tensor(), "first");
          ExpectSame(riding.companion.tensor(), separate.companion.tensor(), "companion");
          // Each step compared from equal rows: a last-bit difference must not grow.
          separate.first.tensor().copy_(riding.first.tensor());
          separate.companion.tensor().copy_(riding.companion.tensor());
        }
        // The frozen companion table never moved; the trained one did.
        EXPECT_TRUE(torch::equal(frozen, riding.companion_tables[1]->weight()));
        EXPECT_FALSE(torch::equal(trained, riding.companion_tables[0]->weight()));
      }
    }
  });
  at::set_num_threads(threads);
}

// Where the pair cannot run as one pass it runs as two calls: the reference kernels, deferred
// updates (gradient accumulation), and outputs without a gradient; inference is a forward.
TEST(PairedLookup, FallsBackToTwoCallsWhereThePairCannotRun) {
  SparseOptimizerSpec spec;
  spec.kind = SparseOptimizerSpec::Kind::kAdagrad;
  spec.lr = 0.1f;
  for (const char* mode : {"reference", "defer", "companion_unused", "first_unused", "inference"}) {
    SCOPED_TRACE(mode);
    const std::string m = mode;
    if (m == "reference") setenv("TZREC_EMBEDDING_REFERENCE", "1", 1);
    SparseOptimizer optimizer(spec);
    StoragePair riding(16, 4, &optimizer), separate(16, 4, &optimizer);
    separate.first.tensor().copy_(riding.first.tensor());
    separate.companion.tensor().copy_(riding.companion.tensor());
    std::mt19937 rng(3), copy(3);
    const int64_t bags = 2500;
    Call a = MakeCall(rng, riding, bags), b = MakeCall(copy, separate, bags);
    const bool training = m != "inference";
    if (m == "defer") optimizer.set_defer_updates(true);
    std::vector<at::Tensor> ra = StorageLookup(&riding.first, a.pooled, a.sequences, bags, training, nullptr, &a.companion);
    std::vector<at::Tensor> rb = StorageLookup(&separate.first, b.pooled, b.sequences, bags, training);
    rb.push_back(StoragePooledLookup(&separate.companion, b.companion_lookups, bags, training));
    for (size_t i = 0; i < ra.size(); ++i) ExpectSame(ra[i], rb[i], "output " + std::to_string(i));
    if (training) {
      std::vector<at::Tensor> used_a, used_b, grads;
      for (size_t i = 0; i < ra.size(); ++i) {
        if (m == "companion_unused" && i + 1 == ra.size()) continue;
        if (m == "first_unused" && i == 0) continue;
        used_a.push_back(ra[i]);
        used_b.push_back(rb[i]);
        grads.push_back(torch::randn(ra[i].sizes()));
      }
      torch::autograd::backward(used_a, grads);
      torch::autograd::backward(used_b, grads);
      if (m == "defer") {
        optimizer.set_defer_updates(false);
        EXPECT_FALSE(riding.companion.deferred_gradients().empty());  // kept by its own update
        for (EmbeddingStorage* s : {&riding.first, &riding.companion, &separate.first, &separate.companion}) {
          ApplyDeferredRowGradients(s);
        }
      }
    }
    ExpectSame(riding.first.tensor(), separate.first.tensor(), "first");
    ExpectSame(riding.companion.tensor(), separate.companion.tensor(), "companion");
    unsetenv("TZREC_EMBEDDING_REFERENCE");
  }
}

// DeepFM's WIDE tables ride with its DEEP ones (the collection pairs them, saying so at DEBUG
// level); the trained model equals one trained with TZREC_PAIRED_LOOKUPS=0, table rows and
// optimizer state included (WIDE rows of dim 2 run the runtime-dim loops: bit for bit here).
TEST(PairedLookup, DeepFMTrainsTheSameModelWithAndWithoutRiding) {
  TempDir dir;
  std::string config = WriteSmallConfig(dir);
  std::map<std::string, std::map<std::string, at::Tensor>> states;
  for (const char* paired : {"1", "0"}) {
    setenv("TZREC_PAIRED_LOOKUPS", paired, 1);
    DeterministicRuntime();
    auto options = SmallOptions(dir, config, dir.File(std::string("paired") + paired));
    // Wide rows of dim 2 beside deep ones of dim 4: two storages (equal dims share one).
    options.edit_config_json =
        R"({"train_config.num_steps": 12, "data_config.shuffle": false, "model_config.deepfm.wide_embedding_dim": 2})";
    const LogLevel level = GetLogLevel();
    SetLogLevel(LogLevel::kDebug);
    ::testing::internal::CaptureStderr();
    TrainAndEvaluate(options);
    const std::string log = ::testing::internal::GetCapturedStderr();
    SetLogLevel(level);
    const bool rides = log.find("lookups of dim 2 ride with those of dim 4") != std::string::npos;
    EXPECT_EQ(rides, std::string(paired) == "1") << log.substr(0, 4000);
    states[paired] = LoadCheckpointTensors(ListCheckpoints(dir.File(std::string("paired") + paired)).back().path);
  }
  unsetenv("TZREC_PAIRED_LOOKUPS");
  ASSERT_EQ(states["1"].size(), states["0"].size());
  int tables = 0;
  for (const auto& [name, tensor] : states["1"]) {
    ASSERT_TRUE(states["0"].count(name)) << name;
    EXPECT_TRUE(torch::equal(tensor, states["0"].at(name))) << name;
    tables += name.find("_wide") != std::string::npos ? 1 : 0;
  }
  EXPECT_GT(tables, 0);
}

}  // namespace
}  // namespace tzrec
