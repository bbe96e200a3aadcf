// FastLinear (oneDNN sgemm) against ATen's Linear, and its gradient by finite differences.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "tzrec/modules/fast_linear.h"
#include "test_util.h"

namespace tzrec {
namespace {

// Inference on rows that share most inputs (a rank request: one user, many items) computes the
// shared columns once; the result is ATen's linear (in double) up to rounding, whichever
// columns are shared, with and without bias / ReLU, and with a NaN in a shared column.
TEST(FastLinear, RowsSharingMostInputsMatchTheFullProductInInference) {
  torch::manual_seed(11);
  c10::NoGradGuard no_grad;
  const int64_t in = 60, out = 23;
  for (int64_t batch : {4, 100}) {
    for (int64_t varying : {0, 1, 7, 29, 31, 60}) {  // 31 and 60 varying: the plain GEMM path
      for (bool relu : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "B " << batch << " varying " << varying << " relu " << relu);
        at::Tensor x = torch::randn({1, in}).repeat({batch, 1});
        at::Tensor columns = torch::randperm(in).narrow(0, 0, varying);
        if (varying > 0) x.index_copy_(1, columns, torch::randn({batch, varying}));
        at::Tensor w = torch::randn({out, in}).requires_grad_(true);  // a parameter, as in a model
        at::Tensor b = torch::randn({out});
        at::Tensor y = FastLinear(x, w, b, relu);
        at::Tensor expected = torch::linear(x.to(torch::kDouble), w.to(torch::kDouble), b.to(torch::kDouble));
        if (relu) expected = torch::relu(expected);
        EXPECT_LT((y.to(torch::kDouble) - expected).abs().max().item<double>(), 1e-4);
        EXPECT_FALSE(y.requires_grad());
      }
    }
  }
  // A NaN in every row of a column makes that column varying: the NaN reaches every output,
  // as in the full product.
  at::Tensor x = torch::randn({1, in}).repeat({8, 1});
  x.select(1, 3).fill_(std::numeric_limits<float>::quiet_NaN());
  at::Tensor y = FastLinear(x, torch::randn({out, in}), torch::randn({out}), false);
  EXPECT_TRUE(torch::isnan(y).all().item<bool>());
}

TEST(FastLinear, MatchesAtenLinearForwardAndBackward) {
  testing::ForEachCpuIsa([] {
  torch::manual_seed(5);
  for (bool relu : {false, true}) {
    for (bool with_bias : {false, true}) {
      for (int64_t batch : {1, 7, 130, 600}) {  // 600: chunks of 256 rows, the last one short
        SCOPED_TRACE(::testing::Message() << "relu " << relu << " bias " << with_bias << " B " << batch);
        at::Tensor x = torch::randn({batch, 37}).requires_grad_(true);
        at::Tensor w = torch::randn({19, 37}).requires_grad_(true);
        at::Tensor b = with_bias ? torch::randn({19}).requires_grad_(true) : at::Tensor();
        at::Tensor upstream = torch::randn({batch, 19});
        at::Tensor y = FastLinear(x, w, b, relu);
        (y * upstream).sum().backward();
        at::Tensor x2 = x.detach().clone().requires_grad_(true);
        at::Tensor w2 = w.detach().clone().requires_grad_(true);
        at::Tensor b2 = with_bias ? b.detach().clone().requires_grad_(true) : at::Tensor();
        at::Tensor y2 = torch::linear(x2, w2, b2);
        if (relu) y2 = torch::relu(y2);
        (y2 * upstream).sum().backward();
        EXPECT_TRUE(torch::allclose(y, y2, 1e-4, 1e-5));
        EXPECT_TRUE(torch::allclose(x.grad(), x2.grad(), 1e-4, 1e-5));
        // W's and b's gradients sum over the batch in different orders: float rounding grows
        // with the batch (a sum near 0 of 600 unit-sized products is off by ~1e-5 absolute).
        const double sum_atol = 1e-5 * std::max<double>(1.0, static_cast<double>(batch) / 50.0);
        EXPECT_TRUE(torch::allclose(w.grad(), w2.grad(), 1e-4, sum_atol));
        if (with_bias) EXPECT_TRUE(torch::allclose(b.grad(), b2.grad(), 1e-4, sum_atol));
      }
    }
  }
  });
}

// A poisoned input must stay visible downstream: NaN and +-inf go through bias and ReLU (and
// the ReLU's gradient mask) exactly as through ATen's linear + relu.
TEST(FastLinear, PropagatesNonFiniteValuesLikeAten) {
  testing::ForEachCpuIsa([] {
    torch::manual_seed(7);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    for (bool relu : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "relu " << relu);
      at::Tensor x = torch::randn({9, 5});
      x[1][2] = nan;
      x[4][0] = inf;
      x[6][3] = -inf;
      at::Tensor w = torch::randn({3, 5});
      at::Tensor b = torch::randn({3});
      b[1] = nan;  // a poisoned bias reaches every row
      at::Tensor upstream = torch::randn({9, 3});
      auto run = [&](bool fast) {
        at::Tensor xx = x.clone().requires_grad_(true);
        at::Tensor ww = w.clone().requires_grad_(true);
        at::Tensor y = fast ? FastLinear(xx, ww, b, relu) : torch::linear(xx, ww, b);
        if (!fast && relu) y = torch::relu(y);
        (y * upstream).sum().backward();
        return std::vector<at::Tensor>{y.detach(), xx.grad(), ww.grad()};
      };
      auto fast = run(true);
      auto aten = run(false);
      EXPECT_GT(torch::isnan(fast[0]).sum().item<int64_t>(), 0);
      for (size_t i = 0; i < fast.size(); ++i) {
        SCOPED_TRACE(i);
        EXPECT_TRUE(torch::equal(torch::isnan(fast[i]), torch::isnan(aten[i])));
        EXPECT_TRUE(torch::equal(torch::isinf(fast[i]), torch::isinf(aten[i])));
        EXPECT_TRUE(torch::allclose(fast[i], aten[i], 1e-4, 1e-5, /*equal_nan=*/true));
      }
    }
  });
}

// The trainer reports FastLinear's GEMM time per step: the counter grows by the GEMMs' time,
// which is within the wall time of the calls that ran them (one calling thread here).
TEST(FastLinear, CountsTheTimeOfItsGemms) {
  torch::manual_seed(8);
  at::Tensor x = torch::randn({512, 256}).requires_grad_(true);
  at::Tensor w = torch::randn({128, 256}).requires_grad_(true);
  at::Tensor b = torch::randn({128}).requires_grad_(true);
  const double before = FastLinearGemmMilliseconds();
  const auto start = std::chrono::steady_clock::now();
  FastLinear(x, w, b, true).sum().backward();
  const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const double spent = FastLinearGemmMilliseconds() - before;
  EXPECT_GT(spent, 0.0);
  EXPECT_LE(spent, wall);
  // Inference (sgemm) counts too.
  torch::NoGradGuard no_grad;
  const double before_inference = FastLinearGemmMilliseconds();
  FastLinear(torch::randn({64, 256}), w.detach(), b.detach(), false);
  EXPECT_GT(FastLinearGemmMilliseconds(), before_inference);
}

// The layer is linear in x, W and b, so float central differences are exact up to rounding.
TEST(FastLinear, GradientMatchesFiniteDifferences) {
  torch::manual_seed(6);
  at::Tensor x = torch::randn({5, 6}).requires_grad_(true);
  at::Tensor w = torch::randn({4, 6}).requires_grad_(true);
  at::Tensor b = torch::randn({4}).requires_grad_(true);
  at::Tensor weights = torch::randn({5, 4});
  (FastLinear(x, w, b, false) * weights).sum().backward();
  auto loss = [&](const at::Tensor& xx, const at::Tensor& ww, const at::Tensor& bb) {
    torch::NoGradGuard no_grad;
    return (FastLinear(xx, ww, bb, false).to(torch::kDouble) * weights.to(torch::kDouble))
        .sum()
        .item<double>();
  };
  const float eps = 1e-2f;
  for (int which = 0; which < 3; ++which) {
    at::Tensor base = (which == 0 ? x : which == 1 ? w : b).detach();
    at::Tensor grad = (which == 0 ? x : which == 1 ? w : b).grad();
    for (int64_t i = 0; i < base.numel(); ++i) {
      at::Tensor plus = base.clone(), minus = base.clone();
      plus.view(-1)[i] += eps;
      minus.view(-1)[i] -= eps;
      double numeric;
      if (which == 0) numeric = (loss(plus, w.detach(), b.detach()) - loss(minus, w.detach(), b.detach())) / (2 * eps);
      else if (which == 1) numeric = (loss(x.detach(), plus, b.detach()) - loss(x.detach(), minus, b.detach())) / (2 * eps);
      else numeric = (loss(x.detach(), w.detach(), plus) - loss(x.detach(), w.detach(), minus)) / (2 * eps);
      EXPECT_NEAR(numeric, grad.view(-1)[i].item<double>(), 2e-3) << which << " " << i;
    }
  }
}

}  // namespace
}  // namespace tzrec
