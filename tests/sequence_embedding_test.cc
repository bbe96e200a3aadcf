// Sequence (unpooled) lookups in the fused embedding engine: lookups with a layout of their own
// (one bag per step) against the same ids laid out as pooled bags, fused against the reference
// twin for every optimizer and instruction set, through autograd by finite differences, and
// padding of jagged sequences.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>

#include "test_util.h"
#include "tzrec/embedding/embedding_group.h"
#include "tzrec/embedding/embedding_storage.h"
#include "tzrec/embedding/fused_lookup.h"

namespace tzrec {
namespace {

// Ids of `bags` bags (steps): lengths 0..3 (empty steps, multi-value steps), few distinct ids
// (repeats within and across lookups), optional weights.
struct Ids {
  std::vector<int64_t> values, offsets{0};
  std::vector<float> weights;
  int table = 0;
  bool mean = false;
};

Ids MakeIds(std::mt19937& rng, int table, int64_t rows, int64_t bags, bool mean, bool weighted) {
  Ids ids;
  ids.table = table;
  ids.mean = mean;
  std::uniform_int_distribution<int> length(0, 3);
  std::uniform_int_distribution<int64_t> id(0, std::min<int64_t>(rows, 10) - 1);
  std::uniform_real_distribution<float> weight(-1.0f, 2.0f);
  for (int64_t b = 0; b < bags; ++b) {
    const int n = b == 0 ? 1 : length(rng);  // a length-1 step first, then anything
    for (int i = 0; i < n; ++i) {
      ids.values.push_back(id(rng));
      if (weighted) ids.weights.push_back(weight(rng));
    }
    ids.offsets.push_back(static_cast<int64_t>(ids.values.size()));
  }
  return ids;
}

LookupArgs ArgsOf(const Ids& ids, const EmbeddingTable* table) {
  LookupArgs a;
  a.values = ids.values.data();
  a.offsets = ids.offsets.data();
  a.first_row = table->first_row();
  a.table_rows = table->rows();
  a.mean = ids.mean;
  a.trainable = table->trainable();
  a.weights = ids.weights.empty() ? nullptr : ids.weights.data();
  return a;
}

std::vector<SparseOptimizerSpec> Specs() {
  using Kind = SparseOptimizerSpec::Kind;
  std::vector<SparseOptimizerSpec> specs;
  SparseOptimizerSpec s;
  s.lr = 0.05f;
  for (Kind kind : {Kind::kSgd, Kind::kAdagrad, Kind::kRowwiseAdagrad, Kind::kAdam}) {
    s.kind = kind;
    s.initial_accumulator = kind == Kind::kAdagrad ? 0.1f : 0.0f;
    specs.push_back(s);
  }
  s.kind = Kind::kAdagrad;
  s.gradient_clipping = true;
  s.max_gradient = 0.05f;
  specs.push_back(s);
  return specs;
}

// Lookups with their own bag counts (pooled lookups of B bags, sequence lookups of S_j steps,
// one of them into the same table as a pooled lookup) update the storage exactly as the same
// ids laid out as one call of max(B, S_j) bags (shorter lookups padded with empty bags), for
// the fused kernels on every ISA and for the reference twin: a row shared by a pooled and a
// sequence lookup gets one update with the sum of its gradients.
TEST(SequenceLookup, OwnLayoutEqualsPaddedSharedLayout) {
  const int threads = at::get_num_threads();
  at::set_num_threads(3);
  testing::ForEachCpuIsa([] {
    std::mt19937 rng(5);
    for (const auto& spec : Specs()) {
      for (int dim : {1, 4, 16, 19}) {
        SCOPED_TRACE(::testing::Message() << spec.Name() << " dim " << dim);
        for (const PooledLookupKernels* kernels : {&FusedKernels(), &ReferenceKernels()}) {
          torch::manual_seed(dim);
          SparseOptimizer optimizer(spec);
          EmbeddingStorage own(dim, &optimizer), padded(dim, &optimizer);
          std::vector<EmbeddingTable*> own_tables, padded_tables;
          for (int64_t rows : {20, 8}) {
            own_tables.push_back(own.AddTable("t", rows, true));
            padded_tables.push_back(padded.AddTable("t", rows, true));
          }
          own.Allocate();
          padded.Allocate();
          padded.tensor().copy_(own.tensor());
          for (int64_t step = 1; step <= 3; ++step) {
            // Big enough on the second step that the fused backward splits into partitions.
            const int64_t bags = step == 2 ? 3000 : 13;
            std::vector<Ids> pooled = {MakeIds(rng, 0, 20, bags, false, false),
                                       MakeIds(rng, 1, 8, bags, true, true)};
            std::vector<Ids> sequences = {MakeIds(rng, 0, 20, bags * 3 + 1, false, false),
                                          MakeIds(rng, 1, 8, 5, true, false),
                                          MakeIds(rng, 0, 20, 0, false, false),  // no steps
                                          MakeIds(rng, 1, 8, bags * 2, false, true)};
            const int64_t widest = bags * 3 + 1;
            // Own layout: pooled grads [bags, 2*dim], each sequence its own [S_j, dim].
            at::Tensor pooled_grad = torch::randn({bags, 2 * dim});
            std::vector<at::Tensor> sequence_grads;
            std::vector<LookupArgs> own_args;
            for (const Ids& ids : pooled) own_args.push_back(ArgsOf(ids, own_tables[ids.table]));
            for (const Ids& ids : sequences) {
              const int64_t steps = static_cast<int64_t>(ids.offsets.size()) - 1;
              sequence_grads.push_back(torch::randn({steps, dim}));
              LookupArgs a = ArgsOf(ids, own_tables[ids.table]);
              a.own_bags = steps;
              a.own_grad = sequence_grads.back().data_ptr<float>();
              a.own_grad_stride = dim;
              own_args.push_back(a);
            }
            kernels->backward_update(&own, own_args, bags, pooled_grad.data_ptr<float>(), step);
            // The same as one shared layout of `widest` bags.
            const int64_t lookups = static_cast<int64_t>(pooled.size() + sequences.size());
            at::Tensor shared_grad = torch::zeros({widest, lookups * dim});
            std::vector<Ids> all = pooled;
            all.insert(all.end(), sequences.begin(), sequences.end());
            shared_grad.narrow(0, 0, bags).narrow(1, 0, 2 * dim).copy_(pooled_grad);
            for (size_t j = 0; j < sequences.size(); ++j) {
              const int64_t steps = sequence_grads[j].size(0);
              if (steps > 0) {
                shared_grad.narrow(0, 0, steps).narrow(1, (2 + j) * dim, dim).copy_(sequence_grads[j]);
              }
            }
            std::vector<LookupArgs> shared_args;
            for (Ids& ids : all) {
              while (static_cast<int64_t>(ids.offsets.size()) < widest + 1) ids.offsets.push_back(ids.offsets.back());
              shared_args.push_back(ArgsOf(ids, padded_tables[ids.table]));
            }
            kernels->backward_update(&padded, shared_args, widest, shared_grad.data_ptr<float>(), step);
            ASSERT_TRUE(torch::allclose(own.tensor(), padded.tensor(), 1e-5, 1e-5))
                << (own.tensor() - padded.tensor()).abs().max();
          }
        }
      }
    }
  });
  at::set_num_threads(threads);
}

// The fused kernels equal the reference twin through StorageLookup's autograd node (pooled and
// sequence lookups of one storage, forward outputs and updated rows), every optimizer.
TEST(SequenceLookup, FusedMatchesReferenceThroughAutograd) {
  std::mt19937 rng(3);
  for (const auto& spec : Specs()) {
    for (int dim : {4, 16, 19}) {
      SCOPED_TRACE(::testing::Message() << spec.Name() << " dim " << dim);
      std::vector<at::Tensor> finals;
      std::vector<std::vector<at::Tensor>> outputs;
      std::mt19937 draw = rng;
      for (const char* reference : {"0", "1"}) {
        setenv("TZREC_EMBEDDING_REFERENCE", reference, 1);
        draw = rng;
        torch::manual_seed(1);
        SparseOptimizer optimizer(spec);
        EmbeddingStorage storage(dim, &optimizer);
        EmbeddingTable* a = storage.AddTable("a", 30, true);
        EmbeddingTable* b = storage.AddTable("b", 9, true);
        storage.Allocate();
        std::vector<at::Tensor> last;
        for (int step = 0; step < 3; ++step) {
          const int64_t bags = 40;
          Ids q = MakeIds(draw, 0, 30, bags, false, false);
          Ids s1 = MakeIds(draw, 0, 30, 97, false, false);
          Ids s2 = MakeIds(draw, 1, 9, 97, true, true);
          auto tensors = [](const Ids& ids, const EmbeddingTable* t) {
            return LookupTensors{torch::tensor(ids.values, torch::kLong), torch::tensor(ids.offsets, torch::kLong), t,
                                 ids.mean,
                                 ids.weights.empty() ? at::Tensor() : torch::tensor(ids.weights, torch::kFloat)};
          };
          auto out = StorageLookup(&storage, {tensors(q, a)}, {tensors(s1, a), tensors(s2, b)}, bags, true);
          EXPECT_EQ(out.size(), 3u);
          EXPECT_EQ(out[1].sizes(), (std::vector<int64_t>{97, dim}));
          torch::manual_seed(step + 10);
          at::Tensor loss = (out[0] * torch::randn_like(out[0])).sum() + (out[1] * torch::randn_like(out[1])).sum();
          if (step != 1) loss = loss + (out[2] * torch::randn_like(out[2])).sum();  // step 1: s2 unused
          loss.backward();
          optimizer.FinishStep();
          last = {out[0].detach().clone(), out[1].detach().clone(), out[2].detach().clone()};
        }
        finals.push_back(storage.tensor().clone());
        outputs.push_back(last);
      }
      unsetenv("TZREC_EMBEDDING_REFERENCE");
      rng = draw;
      for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::allclose(outputs[0][i], outputs[1][i], 1e-5, 1e-5));
      EXPECT_TRUE(torch::allclose(finals[0], finals[1], 1e-5, 1e-5)) << (finals[0] - finals[1]).abs().max();
    }
  }
}

// SGD with lr 1 moves each row by exactly its gradient: pooled and sequence lookups into one
// table, through autograd, against central differences of the loss.
TEST(SequenceLookup, AutogradGradientMatchesFiniteDifferences) {
  std::mt19937 rng(17);
  SparseOptimizerSpec spec;
  spec.kind = SparseOptimizerSpec::Kind::kSgd;
  spec.lr = 1.0f;
  SparseOptimizer optimizer(spec);
  EmbeddingStorage storage(3, &optimizer);
  EmbeddingTable* table = storage.AddTable("t", 7, true);
  storage.Allocate();
  const int64_t bags = 6;
  Ids q = MakeIds(rng, 0, 7, bags, false, false), s = MakeIds(rng, 0, 7, 11, true, true);
  std::vector<LookupTensors> pooled = {{torch::tensor(q.values, torch::kLong), torch::tensor(q.offsets, torch::kLong), table, false}};
  std::vector<LookupTensors> sequences = {{torch::tensor(s.values, torch::kLong), torch::tensor(s.offsets, torch::kLong),
                                           table, true, torch::tensor(s.weights, torch::kFloat)}};
  at::Tensor up_pooled = torch::randn({bags, 3}), up_sequence = torch::randn({11, 3});
  auto loss = [&]() {
    auto out = StorageLookup(&storage, pooled, sequences, bags, false);
    return (out[0].to(torch::kDouble) * up_pooled.to(torch::kDouble)).sum().item<double>() +
           (out[1].to(torch::kDouble) * up_sequence.to(torch::kDouble)).sum().item<double>();
  };
  at::Tensor before = storage.tensor().clone();
  std::vector<double> numeric(before.numel());
  const float eps = 1e-2f;
  for (int64_t i = 0; i < before.numel(); ++i) {
    float* x = storage.data() + i;
    const float saved = *x;
    *x = saved + eps;
    const double plus = loss();
    *x = saved - eps;
    const double minus = loss();
    *x = saved;
    numeric[i] = (plus - minus) / (2 * eps);
  }
  auto out = StorageLookup(&storage, pooled, sequences, bags, true);
  ((out[0] * up_pooled).sum() + (out[1] * up_sequence).sum()).backward();
  at::Tensor moved = (before - storage.tensor()).contiguous();
  for (int64_t i = 0; i < before.numel(); ++i) EXPECT_NEAR(moved.data_ptr<float>()[i], numeric[i], 2e-3) << i;
}

TEST(SequenceLookup, PadJaggedPlacesStepsAndPassesGradientsBack) {
  at::Tensor values = torch::arange(12, torch::kFloat).view({6, 2}).requires_grad_(true);
  at::Tensor lengths = torch::tensor({2, 0, 3, 1}, torch::kInt);
  at::Tensor padded = PadJagged(values, lengths);
  ASSERT_EQ(padded.sizes(), (std::vector<int64_t>{4, 3, 2}));
  EXPECT_TRUE(torch::equal(padded[0][1], values[1].detach()));
  EXPECT_TRUE(torch::equal(padded[1], torch::zeros({3, 2})));
  EXPECT_TRUE(torch::equal(padded[2][2], values[4].detach()));
  EXPECT_TRUE(torch::equal(padded[3][0], values[5].detach()));
  EXPECT_TRUE(torch::equal(padded[3][1], torch::zeros({2})));
  at::Tensor up = torch::randn({4, 3, 2});
  (padded * up).sum().backward();
  EXPECT_TRUE(torch::equal(values.grad()[3], up[2][1]));
  EXPECT_TRUE(torch::equal(values.grad()[5], up[3][0]));
  // A wider target length, and no steps at all.
  EXPECT_EQ(PadJagged(values.detach(), lengths, 5).size(1), 5);
  EXPECT_EQ(PadJagged(torch::zeros({0, 2}), torch::zeros({3}, torch::kInt)).sizes(), (std::vector<int64_t>{3, 0, 2}));
  EXPECT_THROW(PadJagged(values.detach(), torch::tensor({2, 2}, torch::kInt)), std::exception);
}

}  // namespace
}  // namespace tzrec
