// Mixed precision: the BF16 rounding kernels against c10::BFloat16, FastLinear's BF16 GEMMs
// against fp32 math on the rounded inputs, the config values, and GradScaler's schedule.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "test_util.h"
#include "tzrec/kernels/cpu_kernels.h"
#include "tzrec/modules/fast_linear.h"
#include "tzrec/optim/grad_scaler.h"

namespace tzrec {
namespace {

uint16_t ReferenceBf16Bits(float value) { return c10::BFloat16(value).x; }

// Every ISA's conversion equals c10's round-to-nearest-even, ties and specials included.
TEST(Bf16Kernels, RoundToNearestEvenLikeC10) {
  std::vector<float> values = {0.0f, -0.0f, 1.0f, -1.5f, 3.14159f, 1e-40f, -1e-42f, 65504.0f,
                               3.0e38f, -3.4e38f, std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()};
  // Exact ties (low half 0x8000) round to the even neighbour; one ulp off them does not.
  for (uint32_t bits : {0x3f808000u, 0x3f818000u, 0x3f808001u, 0x3f807fffu, 0x7f7f8000u}) {
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    values.push_back(f);
  }
  torch::manual_seed(3);
  at::Tensor random = torch::randn({1000}) * 1000;
  for (int64_t i = 0; i < random.numel(); ++i) values.push_back(random[i].item<float>());
  testing::ForEachCpuIsa([&] {
    const CpuKernels& k = ActiveCpuKernels();
    std::vector<uint16_t> out(values.size());
    k.float_to_bf16(values.data(), out.data(), static_cast<int64_t>(values.size()));
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::isnan(values[i])) {
        EXPECT_TRUE(std::isnan(static_cast<float>(c10::BFloat16(out[i], c10::BFloat16::from_bits())))) << i;
      } else {
        EXPECT_EQ(out[i], ReferenceBf16Bits(values[i])) << i << " " << values[i];
      }
    }
    // relu_mask_bf16 over 3 rows: the masked gradient rounded, and its column sums added to
    // what the sums held (y null: no mask).
    const int64_t cols = static_cast<int64_t>(values.size()) / 3;
    std::vector<float> y(values.size());
    for (size_t i = 0; i < y.size(); ++i) y[i] = (i % 3 == 0) ? -1.0f : (i % 3 == 1 ? 0.0f : 2.0f);
    for (bool masked : {true, false}) {
      std::vector<float> sums(cols, 1.0f);
      k.relu_mask_bf16(masked ? y.data() : nullptr, values.data(), out.data(), 3, cols, sums.data());
      for (int64_t j = 0; j < cols; ++j) {
        float expected_sum = 1.0f;
        for (int64_t r = 0; r < 3; ++r) {
          const size_t i = r * cols + j;
          const float expected = masked && y[i] <= 0.0f ? 0.0f : values[i];
          expected_sum += expected;
          if (!std::isnan(expected)) EXPECT_EQ(out[i], ReferenceBf16Bits(expected)) << i;
        }
        if (!std::isnan(expected_sum)) EXPECT_FLOAT_EQ(sums[j], expected_sum) << j;
      }
    }
    // relu_mask_bf16_of_bf16: the same pass with y given as bfloat16 (NaN y passes, as in fp32).
    std::vector<uint16_t> y_bf16(y.size());
    for (size_t i = 0; i < y.size(); ++i) y_bf16[i] = ReferenceBf16Bits(i % 7 == 6 ? NAN : y[i]);
    std::vector<float> y_of_bf16(y.size());
    for (size_t i = 0; i < y.size(); ++i) y_of_bf16[i] = i % 7 == 6 ? NAN : y[i];
    std::vector<float> sums(cols, 1.0f), expected_sums(cols, 1.0f);
    std::vector<uint16_t> expected(values.size());
    k.relu_mask_bf16(y_of_bf16.data(), values.data(), expected.data(), 3, cols, expected_sums.data());
    k.relu_mask_bf16_of_bf16(y_bf16.data(), values.data(), out.data(), 3, cols, sums.data());
    for (int64_t i = 0; i < 3 * cols; ++i) ASSERT_EQ(out[i], expected[i]) << i;
    for (int64_t j = 0; j < cols; ++j) {
      if (!std::isnan(expected_sums[j])) EXPECT_EQ(sums[j], expected_sums[j]) << j;
    }
  });
}

at::Tensor RoundedToBf16(const at::Tensor& t) { return t.to(at::kBFloat16).to(at::kFloat); }

// BF16 FastLinear = fp32 (double here) math on bf16-rounded x, W and output gradient, with fp32
// bias, ReLU mask and bias gradient; the precision of the forward holds for its backward even
// when the backward runs outside the scope.
TEST(FastLinear, Bf16GemmsEqualFp32MathOnRoundedInputs) {
  if (!NativeBf16GemmAvailable()) {
    std::printf("[ bf16     ] no AVX512-BF16 here: BF16 GEMMs not tested\n");
    GTEST_SKIP();
  }
  torch::manual_seed(9);
  for (bool relu : {false, true}) {
    for (int64_t batch : {1, 7, 130}) {
      SCOPED_TRACE(::testing::Message() << "relu " << relu << " B " << batch);
      at::Tensor x = torch::randn({batch, 37}).requires_grad_(true);
      at::Tensor w = torch::randn({19, 37}).requires_grad_(true);
      at::Tensor b = torch::randn({19}).requires_grad_(true);
      at::Tensor upstream = torch::randn({batch, 19});
      at::Tensor y;
      {
        ScopedGemmPrecision precision(GemmPrecision::kBFloat16);
        EXPECT_EQ(CurrentGemmPrecision(), GemmPrecision::kBFloat16);
        y = FastLinear(x, w, b, relu);
      }
      EXPECT_EQ(CurrentGemmPrecision(), GemmPrecision::kFloat32);
      (y * upstream).sum().backward();  // outside the scope: still BF16

      const at::Tensor xr = RoundedToBf16(x.detach()).to(at::kDouble);
      const at::Tensor wr = RoundedToBf16(w.detach()).to(at::kDouble);
      at::Tensor z = at::matmul(xr, wr.t()) + b.detach().to(at::kDouble);
      at::Tensor expected_y = relu ? at::relu(z) : z;
      at::Tensor dz = upstream.to(at::kDouble);
      if (relu) dz = dz * (z > 0).to(at::kDouble);
      const at::Tensor dzr = RoundedToBf16(dz.to(at::kFloat)).to(at::kDouble);
      EXPECT_TRUE(torch::allclose(y.to(at::kDouble), expected_y, 1e-5, 1e-5));
      EXPECT_TRUE(torch::allclose(x.grad().to(at::kDouble), at::matmul(dzr, wr), 1e-5, 1e-5));
      EXPECT_TRUE(torch::allclose(w.grad().to(at::kDouble), at::matmul(dzr.t(), xr), 1e-5, 1e-4));
      EXPECT_TRUE(torch::allclose(b.grad().to(at::kDouble), dz.sum(0), 1e-5, 1e-5));
      // And it is not fp32: the rounding shows against an fp32 layer.
      at::Tensor fp32 = FastLinear(x.detach(), w.detach(), b.detach(), relu);
      if (batch > 1) EXPECT_GT((fp32 - y.detach()).abs().max().item<float>(), 1e-4f);
    }
  }
}

// A BF16 chain of FastLinear layers (hidden activations kept in bfloat16) gives exactly what
// the layers give one FastLinear each in BF16: output, and the gradients of x, every weight
// and bias, with and without ReLUs; fp32 runs the layers one by one.
TEST(FastLinear, Bf16ChainEqualsItsLayersOneByOne) {
  if (!NativeBf16GemmAvailable()) {
    std::printf("[ bf16     ] no AVX512-BF16 here: BF16 GEMMs not tested\n");
    GTEST_SKIP();
  }
  torch::manual_seed(4);
  const std::vector<int64_t> dims = {37, 40, 19, 8};
  for (bool hidden_relu : {true, false}) {
    for (int64_t batch : {1, 300}) {
      SCOPED_TRACE(::testing::Message() << "relu " << hidden_relu << " B " << batch);
      at::Tensor x = torch::randn({batch, dims[0]});
      std::vector<at::Tensor> weights, biases;
      std::vector<bool> relu;
      for (size_t l = 0; l + 1 < dims.size(); ++l) {
        weights.push_back(torch::randn({dims[l + 1], dims[l]}) * 0.3);
        biases.push_back(torch::randn({dims[l + 1]}) * 0.1);
        relu.push_back(hidden_relu || l + 2 == dims.size());
      }
      at::Tensor upstream = torch::randn({batch, dims.back()});
      // Returns the output and the gradients of x, the weights and the biases.
      auto run = [&](bool chained) {
        at::Tensor xi = x.clone().requires_grad_(true);
        std::vector<at::Tensor> w, b;
        for (size_t l = 0; l < weights.size(); ++l) {
          w.push_back(weights[l].clone().requires_grad_(true));
          b.push_back(biases[l].clone().requires_grad_(true));
        }
        ScopedGemmPrecision precision(GemmPrecision::kBFloat16);
        at::Tensor y;
        if (chained) {
          y = FastLinearChain(xi, w, b, relu);
        } else {
          y = xi;
          for (size_t l = 0; l < w.size(); ++l) y = FastLinear(y, w[l], b[l], relu[l]);
        }
        (y * upstream).sum().backward();
        std::vector<at::Tensor> out = {y.detach(), xi.grad()};
        for (auto& t : w) out.push_back(t.grad());
        for (auto& t : b) out.push_back(t.grad());
        return out;
      };
      const std::vector<at::Tensor> chain = run(true), layers = run(false);
      for (size_t i = 0; i < chain.size(); ++i) EXPECT_TRUE(torch::equal(chain[i], layers[i])) << i;
      EXPECT_EQ(chain[0].scalar_type(), at::kFloat);
    }
  }
}

TEST(MixedPrecision, ConfigValues) {
  EXPECT_EQ(GemmPrecisionFor("", "f"), GemmPrecision::kFloat32);
  EXPECT_EQ(GemmPrecisionFor("BF16", "f"),
            NativeBf16GemmAvailable() ? GemmPrecision::kBFloat16 : GemmPrecision::kFloat32);
  EXPECT_EQ(GemmPrecisionFor("FP16", "f"), GemmPrecision::kFloat32);  // no CPU FP16 GEMM: fp32
  EXPECT_TZREC_ERROR(GemmPrecisionFor("bf16", "train_config.mixed_precision"),
                     "train_config.mixed_precision: unknown value 'bf16'");
}

// torch.amp.GradScaler's update: halve on an overflow (streak restarts), double after
// growth_interval finite steps, never grow into infinity.
TEST(GradScaler, BacksOffOnOverflowAndGrowsAfterTheInterval) {
  protos::GradScaler config;
  config.set_growth_interval(3);
  GradScaler scaler(config);
  EXPECT_EQ(scaler.scale(), 65536.0f);
  scaler.Update(true);
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  scaler.Update(false);
  EXPECT_EQ(scaler.scale(), 32768.0f);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  for (int i = 0; i < 3; ++i) scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  scaler.SetState(3.0e38f, 2, "state");
  scaler.Update(true);
  EXPECT_EQ(scaler.scale(), 3.0e38f);  // 6e38 would be inf: kept
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_TZREC_ERROR(scaler.SetState(-1.0f, 0, "ckpt/train_state.pt"), "ckpt/train_state.pt: grad scaler state");
  config.set_backoff_factor(1.5f);
  EXPECT_TZREC_ERROR(GradScaler{config}, "train_config.grad_scaler.backoff_factor");
  config.set_backoff_factor(0.5f);
  config.set_growth_factor(1.0f);
  EXPECT_TZREC_ERROR(GradScaler{config}, "train_config.grad_scaler.growth_factor");
}

}  // namespace
}  // namespace tzrec
