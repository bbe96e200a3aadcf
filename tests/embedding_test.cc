// The fused embedding engine against its reference twin (every kernel and optimizer, with
// duplicate ids, empty bags, mean pooling and frozen tables), against LibTorch's own
// autograd/optimizers, and its gradient by finite differences.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <random>

#include "embedding_test_util.h"
#include "test_util.h"
#include "tzrec/embedding/embedding_storage.h"
#include "tzrec/embedding/fused_lookup.h"

namespace tzrec {
namespace {

// The twin tests' tables, the same in both storages (allocated): 30 and 7 trainable rows, 9 frozen.
void AddTwinTables(EmbeddingStorage* fused, EmbeddingStorage* reference, std::vector<EmbeddingTable*>* fused_tables,
                   std::vector<EmbeddingTable*>* reference_tables) {
  for (auto [rows, trainable] : {std::pair<int64_t, bool>{30, true}, {7, true}, {9, false}}) {
    fused_tables->push_back(fused->AddTable("t", rows, trainable));
    reference_tables->push_back(reference->AddTable("t", rows, trainable));
  }
  fused->Allocate();
  reference->Allocate();
}

// Every fused kernel equals the reference twin, step after step, for every optimizer.
TEST(FusedEmbedding, MatchesReferenceTwinForEveryOptimizer) {
  const int threads = at::get_num_threads();
  at::set_num_threads(3);  // an odd partition count, whatever the machine
  testing::ForEachCpuIsa([] {
  std::mt19937 rng(7);
  for (const auto& spec : AllSpecs()) {
    for (int dim : {1, 4, 8, 16, 19, 32}) {
      SCOPED_TRACE(::testing::Message() << spec.Name() << " dim " << dim << " clip "
                                        << spec.gradient_clipping << " wd mode "
                                        << static_cast<int>(spec.weight_decay_mode));
      torch::manual_seed(dim);
      SparseOptimizer optimizer(spec);
      EmbeddingStorage fused(dim, &optimizer), reference(dim, &optimizer);
      std::vector<EmbeddingTable*> fused_tables, reference_tables;
      AddTwinTables(&fused, &reference, &fused_tables, &reference_tables);
      reference.tensor().copy_(fused.tensor());
      // 2500 bags: enough ids that the backward splits rows into partitions (one per thread).
      for (int64_t iteration = 1; iteration <= 4; ++iteration) {
        const int64_t bags = iteration % 2 ? 37 : 2500;
        std::vector<RandomLookup> lookups = {
            MakeLookup(rng, 0, 30, bags, false), MakeLookup(rng, 1, 7, bags, true),
            MakeLookup(rng, 0, 30, bags, true),  // the same table twice: gradients must add up
            MakeLookup(rng, 2, 9, bags, false),   // frozen
            MakeLookup(rng, 1, 7, bags, false, /*weighted=*/true),
            MakeLookup(rng, 0, 30, bags, true, /*weighted=*/true)};
        const int64_t width = static_cast<int64_t>(lookups.size()) * dim;
        at::Tensor out_fused = torch::empty({bags, width}), out_reference = torch::empty({bags, width});
        FusedKernels().forward(fused.data(), fused.row_width(), dim, Args(lookups, fused_tables),
                               bags, out_fused.data_ptr<float>());
        ReferenceKernels().forward(reference.data(), reference.row_width(), dim,
                                   Args(lookups, reference_tables), bags,
                                   out_reference.data_ptr<float>());
        // FMA contraction in the AVX builds rounds weighted sums differently: a few ulps of ~10.
        EXPECT_TRUE(torch::allclose(out_fused, out_reference, 1e-5, 1e-5))
            << (out_fused - out_reference).abs().max();
        at::Tensor grad = torch::randn({bags, width});
        FusedKernels().backward_update(&fused, Args(lookups, fused_tables), bags,
                                       grad.data_ptr<float>(), iteration);
        ReferenceKernels().backward_update(&reference, Args(lookups, reference_tables), bags,
                                           grad.data_ptr<float>(), iteration);
        EXPECT_TRUE(torch::allclose(fused.tensor(), reference.tensor(), 1e-5, 1e-5))
            << (fused.tensor() - reference.tensor()).abs().max();
      }
      // The frozen table never moved.
      EXPECT_TRUE(torch::equal(fused_tables[2]->weight(), reference_tables[2]->weight()));
    }
  }
  });
  at::set_num_threads(threads);
}

// FP16 and BF16 rows (2-byte weights, fp32 state): the fused kernels equal the reference
// twin, which rounds through c10::Half's / c10::BFloat16's neighbours instead of bit
// arithmetic, for every optimizer and ISA, at fixed-width dims and runtime ones (odd ones pad
// their last value), with some rows in half's subnormal range. fp32 math in another order
// (FMA, association) may move a value across its random rounding threshold: such elements
// differ by one step, and are rare (each step starts from equal storages).
void ExpectHalfRowsMatchTheReferenceTwin(RowFormat format) {
  const int threads = at::get_num_threads();
  at::set_num_threads(3);
  const bool bf16 = format == RowFormat::kBFloat16;
  const auto fused_forward = bf16 ? FusedKernels().forward_bf16 : FusedKernels().forward_fp16;
  const auto reference_forward = bf16 ? ReferenceKernels().forward_bf16 : ReferenceKernels().forward_fp16;
  // One step at |x| is at most |x| * 2^-mantissa bits (plus the subnormal spacing).
  const double relative_step = std::ldexp(1.0, bf16 ? -7 : -10), smallest_step = std::ldexp(1.0, bf16 ? -133 : -24);
  testing::ForEachCpuIsa([&] {
    std::mt19937 rng(17);
    for (const auto& spec : AllSpecs()) {
      for (int dim : {3, 8, 16, 19, 32, 70}) {
        SCOPED_TRACE(::testing::Message() << spec.Name() << " dim " << dim << " wd mode "
                                          << static_cast<int>(spec.weight_decay_mode));
        torch::manual_seed(dim);
        SparseOptimizer optimizer(spec);
        EmbeddingStorage fused(dim, &optimizer, format), reference(dim, &optimizer, format);
        ASSERT_EQ(fused.row_width(), (dim + 1) / 2 + spec.StateWidth(dim));
        std::vector<EmbeddingTable*> fused_tables, reference_tables;
        AddTwinTables(&fused, &reference, &fused_tables, &reference_tables);
        // Rows 0-3 of table 0 in half's subnormal range (below 2^-14).
        fused_tables[0]->stored().narrow(0, 0, 4).copy_(fused_tables[0]->weight().narrow(0, 0, 4) * 1e-4f);
        reference.tensor().copy_(fused.tensor());
        const at::Tensor trained = fused_tables[0]->weight(), frozen = fused_tables[2]->weight();
        for (int64_t iteration = 1; iteration <= 4; ++iteration) {
          const int64_t bags = iteration % 2 ? 37 : 2500;
          std::vector<RandomLookup> lookups = {
              MakeLookup(rng, 0, 30, bags, false), MakeLookup(rng, 1, 7, bags, true),
              MakeLookup(rng, 0, 30, bags, true), MakeLookup(rng, 2, 9, bags, false),
              MakeLookup(rng, 1, 7, bags, false, /*weighted=*/true)};
          const int64_t width = static_cast<int64_t>(lookups.size()) * dim;
          at::Tensor out_fused = torch::empty({bags, width}), out_reference = torch::empty({bags, width});
          // Both forwards read the fused storage (the two storages may differ by rounding).
          fused_forward(fused.data(), fused.row_width(), dim, Args(lookups, fused_tables), bags,
                        out_fused.data_ptr<float>());
          reference_forward(fused.data(), fused.row_width(), dim, Args(lookups, fused_tables), bags,
                            out_reference.data_ptr<float>());
          EXPECT_TRUE(torch::allclose(out_fused, out_reference, 1e-5, 1e-5)) << (out_fused - out_reference).abs().max();
          at::Tensor grad = torch::randn({bags, width}) * 0.1;
          FusedKernels().backward_update(&fused, Args(lookups, fused_tables), bags, grad.data_ptr<float>(), iteration);
          ReferenceKernels().backward_update(&reference, Args(lookups, reference_tables), bags,
                                             grad.data_ptr<float>(), iteration);
          for (size_t t = 0; t < fused_tables.size(); ++t) {
            const at::Tensor a = fused_tables[t]->weight(), b = reference_tables[t]->weight();
            const at::Tensor step = torch::maximum(a.abs(), b.abs()) * relative_step + smallest_step;
            const at::Tensor differ = (a - b).abs();
            EXPECT_TRUE((differ <= step * 1.001).all().item<bool>()) << t << " " << differ.max();
            EXPECT_LE((differ > 0).sum().item<int64_t>(), a.numel() / 50 + 1) << t;
            for (size_t k = 0; k < fused_tables[t]->optimizer_state().size(); ++k) {
              const at::Tensor x = fused_tables[t]->optimizer_state()[k].second;
              const at::Tensor y = reference_tables[t]->optimizer_state()[k].second;
              EXPECT_TRUE(torch::allclose(x, y, 1e-3, 1e-5)) << t << " " << (x - y).abs().max();
            }
          }
          // Each step compared from equal rows: one rounding flip must not grow into several.
          reference.tensor().copy_(fused.tensor());
        }
        // The frozen table never moved; the trained ones did.
        EXPECT_TRUE(torch::equal(frozen, fused_tables[2]->weight()));
        EXPECT_FALSE(torch::equal(trained, fused_tables[0]->weight()));
      }
    }
  });
  at::set_num_threads(threads);
}

TEST(FusedEmbedding, Fp16RowsMatchTheReferenceTwinForEveryOptimizer) {
  ExpectHalfRowsMatchTheReferenceTwin(RowFormat::kFloat16);
}

TEST(FusedEmbedding, Bf16RowsMatchTheReferenceTwinForEveryOptimizer) {
  ExpectHalfRowsMatchTheReferenceTwin(RowFormat::kBFloat16);
}

// Non-finite values go through the fused kernels as through the reference twin: a NaN row
// and an inf id weight poison exactly the same outputs, and an inf gradient the same rows
// and optimizer state, for every optimizer (with and without gradient clipping).
TEST(FusedEmbedding, NonFiniteValuesMatchTheReferenceTwin) {
  testing::ForEachCpuIsa([] {
    std::mt19937 rng(11);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    for (const auto& spec : AllSpecs()) {
      for (int dim : {4, 16, 19}) {
        SCOPED_TRACE(::testing::Message() << spec.Name() << " dim " << dim << " clip "
                                          << spec.gradient_clipping);
        torch::manual_seed(dim);
        SparseOptimizer optimizer(spec);
        EmbeddingStorage fused(dim, &optimizer), reference(dim, &optimizer);
        EmbeddingTable* fused_table = fused.AddTable("t", 20, true);
        EmbeddingTable* reference_table = reference.AddTable("t", 20, true);
        fused.Allocate();
        reference.Allocate();
        fused_table->weight()[3][1] = nan;
        fused_table->weight()[5][0] = inf;
        reference.tensor().copy_(fused.tensor());
        const int64_t bags = 64;
        std::vector<RandomLookup> lookups = {MakeLookup(rng, 0, 20, bags, false),
                                             MakeLookup(rng, 0, 20, bags, true, /*weighted=*/true)};
        lookups[1].weights[2] = inf;
        const int64_t width = static_cast<int64_t>(lookups.size()) * dim;
        at::Tensor out_fused = torch::empty({bags, width}), out_reference = torch::empty({bags, width});
        FusedKernels().forward(fused.data(), fused.row_width(), dim, Args(lookups, {fused_table}), bags,
                               out_fused.data_ptr<float>());
        ReferenceKernels().forward(reference.data(), reference.row_width(), dim,
                                   Args(lookups, {reference_table}), bags, out_reference.data_ptr<float>());
        EXPECT_GT(torch::isnan(out_fused).sum().item<int64_t>(), 0);
        EXPECT_TRUE(torch::equal(torch::isnan(out_fused), torch::isnan(out_reference)));
        EXPECT_TRUE(torch::allclose(out_fused, out_reference, 1e-5, 1e-5, /*equal_nan=*/true));
        at::Tensor grad = torch::randn({bags, width});
        grad[1][0] = inf;
        grad[4][dim - 1] = nan;
        FusedKernels().backward_update(&fused, Args(lookups, {fused_table}), bags,
                                       grad.data_ptr<float>(), 1);
        ReferenceKernels().backward_update(&reference, Args(lookups, {reference_table}), bags,
                                           grad.data_ptr<float>(), 1);
        EXPECT_TRUE(torch::equal(torch::isnan(fused.tensor()), torch::isnan(reference.tensor())));
        EXPECT_TRUE(torch::equal(torch::isinf(fused.tensor()), torch::isinf(reference.tensor())));
        EXPECT_TRUE(torch::allclose(fused.tensor(), reference.tensor(), 1e-5, 1e-5, /*equal_nan=*/true));
      }
    }
  });
}

// Through autograd: SGD with lr 1 moves each row by exactly its gradient, which must equal
// the finite difference of the loss with respect to that weight (the lookup is linear in the
// weights, so float central differences are exact up to rounding).
TEST(FusedEmbedding, AutogradGradientMatchesFiniteDifferences) {
  std::mt19937 rng(9);
  SparseOptimizerSpec spec;
  spec.kind = SparseOptimizerSpec::Kind::kSgd;
  spec.lr = 1.0f;
  SparseOptimizer optimizer(spec);
  EmbeddingStorage storage(3, &optimizer);
  EmbeddingTable* a = storage.AddTable("a", 6, true);
  EmbeddingTable* b = storage.AddTable("b", 5, true);
  storage.Allocate();
  const int64_t bags = 8;
  // `lb` is a weighted feature (per-id weights) with mean pooling.
  auto la = MakeLookup(rng, 0, 6, bags, false), lb = MakeLookup(rng, 1, 5, bags, true, true);
  std::vector<LookupTensors> inputs = {
      {torch::tensor(la.values, torch::kLong), torch::tensor(la.offsets, torch::kLong), a, false},
      {torch::tensor(lb.values, torch::kLong), torch::tensor(lb.offsets, torch::kLong), b, true,
       torch::tensor(lb.weights, torch::kFloat)}};
  at::Tensor upstream = torch::randn({bags, 6});
  auto loss = [&]() {
    torch::NoGradGuard no_grad;
    return (StoragePooledLookup(&storage, inputs, bags, false).to(torch::kDouble) *
            upstream.to(torch::kDouble))
        .sum()
        .item<double>();
  };
  at::Tensor before = storage.tensor().clone();
  std::vector<double> numeric(before.numel());
  const float eps = 1e-2f;
  for (int64_t i = 0; i < before.numel(); ++i) {
    float* x = storage.data() + i;
    const float saved = *x;
    *x = saved + eps;
    double plus = loss();
    *x = saved - eps;
    double minus = loss();
    *x = saved;
    numeric[i] = (plus - minus) / (2 * eps);
  }
  at::Tensor out = StoragePooledLookup(&storage, inputs, bags, true);
  (out * upstream).sum().backward();
  at::Tensor moved = (before - storage.tensor()).contiguous();
  for (int64_t i = 0; i < before.numel(); ++i) {
    EXPECT_NEAR(moved.data_ptr<float>()[i], numeric[i], 2e-3) << i;
  }
  // Eval mode records nothing and changes nothing.
  at::Tensor now = storage.tensor().clone();
  StoragePooledLookup(&storage, inputs, bags, false);
  EXPECT_TRUE(torch::equal(now, storage.tensor()));
}

// Fused Adagrad equals LibTorch's dense Adagrad on the same gradients.
TEST(FusedEmbedding, AdagradMatchesTorchOptimizer) {
  std::mt19937 rng(2);
  SparseOptimizerSpec spec;
  spec.kind = SparseOptimizerSpec::Kind::kAdagrad;
  spec.lr = 0.1f;
  spec.initial_accumulator = 0.01f;
  SparseOptimizer optimizer(spec);
  EmbeddingStorage storage(4, &optimizer);
  EmbeddingTable* table = storage.AddTable("t", 30, true);
  storage.Allocate();
  at::Tensor ref_weight = table->weight().clone().requires_grad_(true);
  torch::optim::Adagrad ref_opt(
      std::vector<at::Tensor>{ref_weight},
      torch::optim::AdagradOptions(0.1).initial_accumulator_value(0.01).eps(1e-8));
  for (int step = 0; step < 3; ++step) {
    auto l = MakeLookup(rng, 0, 30, 40, false);
    at::Tensor values = torch::tensor(l.values, torch::kLong);
    at::Tensor offsets = torch::tensor(l.offsets, torch::kLong);
    at::Tensor upstream = torch::randn({40, 4});
    (StoragePooledLookup(&storage, {{values, offsets, table, false}}, 40, true) * upstream)
        .sum()
        .backward();
    optimizer.FinishStep();
    ref_opt.zero_grad();
    at::Tensor ref_out =
        std::get<0>(torch::embedding_bag(ref_weight, values, offsets.slice(0, 0, 40), false, 0));
    (ref_out * upstream).sum().backward();
    ref_opt.step();
  }
  EXPECT_TRUE(torch::allclose(table->weight(), ref_weight.detach(), 1e-5, 1e-6))
      << (table->weight() - ref_weight).abs().max();
}

// The optimizers FBGEMM runs only on GPUs (lars_sgd, lamb, partial_rowwise_lamb,
// partial_rowwise_adam) and adadelta / rmsprop, on one row over three steps, against their
// definitions (sparse_optimizer.h) computed here in double precision.
TEST(FusedEmbedding, MoreOptimizersFollowTheirDefinitionsOnOneRow) {
  using Kind = SparseOptimizerSpec::Kind;
  const int dim = 4;
  const double grads[3][4] = {{0.5, -1.0, 0.25, 2.0}, {-0.75, 0.5, 1.5, -0.25}, {0.1, 0.2, -0.3, 0.4}};
  for (Kind kind : {Kind::kLarsSgd, Kind::kLamb, Kind::kPartialRowwiseLamb, Kind::kPartialRowwiseAdam,
                    Kind::kAdadelta, Kind::kRmsprop}) {
    SparseOptimizerSpec spec;
    spec.kind = kind;
    spec.lr = 0.1f;
    spec.weight_decay = 0.05f;
    spec.eps = kind == Kind::kAdadelta ? 1e-6f : 1e-8f;
    SCOPED_TRACE(spec.Name());
    SparseOptimizer optimizer(spec);
    EmbeddingStorage storage(dim, &optimizer);
    EmbeddingTable* table = storage.AddTable("t", 3, true);
    storage.Allocate();
    table->weight().copy_(torch::tensor({{0.f, 0.f, 0.f, 0.f}, {0.3f, -0.2f, 0.1f, 0.4f}, {0.f, 0.f, 0.f, 0.f}}));
    std::vector<double> w = {0.3f, -0.2f, 0.1f, 0.4f}, m(dim, 0.0), v(dim, 0.0), u(dim, 0.0);
    double v_row = 0.0;
    const double lr = spec.lr, wd = spec.weight_decay, b1 = spec.beta1, b2 = spec.beta2, eps = spec.eps;
    auto norm = [](const std::vector<double>& x) {
      double sum = 0.0;
      for (double e : x) sum += e * e;
      return std::sqrt(sum);
    };
    for (int t = 1; t <= 3; ++t) {
      const std::vector<double> g(grads[t - 1], grads[t - 1] + dim);
      std::vector<float> grad(g.begin(), g.end());
      const int64_t values[] = {1}, offsets[] = {0, 1};
      LookupArgs args{values, offsets, table->first_row(), table->rows(), false, true, nullptr};
      FusedKernels().backward_update(&storage, {args}, 1, grad.data(), t);
      if (kind == Kind::kLarsSgd) {
        const double rate = lr * spec.eta * norm(w) / (norm(g) + wd * norm(w));
        for (int d = 0; d < dim; ++d) {
          u[d] = spec.momentum * u[d] + rate * (g[d] + wd * w[d]);
          w[d] -= u[d];
        }
      } else if (kind == Kind::kAdadelta) {
        for (int d = 0; d < dim; ++d) {
          const double gd = g[d] + wd * w[d];
          v[d] = spec.rho * v[d] + (1 - spec.rho) * gd * gd;
          const double delta = std::sqrt(u[d] + eps) / std::sqrt(v[d] + eps) * gd;
          u[d] = spec.rho * u[d] + (1 - spec.rho) * delta * delta;
          w[d] -= lr * delta;
        }
      } else if (kind == Kind::kRmsprop) {
        for (int d = 0; d < dim; ++d) {
          const double gd = g[d] + wd * w[d];
          v[d] = spec.alpha * v[d] + (1 - spec.alpha) * gd * gd;
          w[d] -= lr * gd / (std::sqrt(v[d]) + eps);
        }
      } else {
        const bool per_row = kind != Kind::kLamb;
        const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
        double mean_square = 0.0;
        for (double x : g) mean_square += x * x / dim;
        v_row = b2 * v_row + (1 - b2) * mean_square;
        std::vector<double> r(dim);
        for (int d = 0; d < dim; ++d) {
          m[d] = b1 * m[d] + (1 - b1) * g[d];
          v[d] = b2 * v[d] + (1 - b2) * g[d] * g[d];
          r[d] = (m[d] / bc1) / (std::sqrt((per_row ? v_row : v[d]) / bc2) + eps) + wd * w[d];
        }
        const double scale = kind == Kind::kPartialRowwiseAdam ? lr : lr * norm(w) / norm(r);
        for (int d = 0; d < dim; ++d) w[d] -= scale * r[d];
      }
      for (int d = 0; d < dim; ++d) {
        EXPECT_NEAR(table->weight()[1][d].item<double>(), w[d], 2e-6) << "step " << t << " d " << d;
      }
    }
    // Untouched rows never move.
    EXPECT_EQ(table->weight()[0].abs().sum().item<float>(), 0.0f);
  }
}

}  // namespace
}  // namespace tzrec
