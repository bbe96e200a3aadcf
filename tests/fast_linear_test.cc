// FastLinear (oneDNN sgemm) against ATen's Linear, and its gradient by finite differences.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "tzrec/modules/fast_linear.h"
#include "test_util.h"

namespace tzrec {
namespace {

TEST(FastLinear, MatchesAtenLinearForwardAndBackward) {
  testing::ForEachCpuIsa([] {
  torch::manual_seed(5);
  for (bool relu : {false, true}) {
    for (bool with_bias : {false, true}) {
      for (int64_t batch : {1, 7, 130}) {
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
        EXPECT_TRUE(torch::allclose(w.grad(), w2.grad(), 1e-4, 1e-5));
        if (with_bias) EXPECT_TRUE(torch::allclose(b.grad(), b2.grad(), 1e-4, 1e-5));
      }
    }
  }
  });
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
