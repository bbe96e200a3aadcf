// Linear layer (+ optional fused ReLU) on oneDNN's sgemm, as a LibTorch autograd function.
//
// Why: ATen 1.13 sends fp32 Linear to the system BLAS; on these machines oneDNN's JIT sgemm
// runs 2-2.5x faster than OpenBLAS (351 vs 142-152 GFLOP/s on 2 threads, bench notes), and
// the MLP GEMMs dominate a DeepFM step. Forward computes y = act(x W^T + b) with the bias and
// ReLU applied in one pass; backward reuses y for the ReLU mask and runs the two gradient
// GEMMs on oneDNN too. Falls back to plain ATen ops for anything but contiguous fp32 CPU
// tensors. Checked against torch::nn::Linear and by finite differences in tests.
//
// Mixed precision (train_config.mixed_precision: BF16): while a thread's GemmPrecision is
// kBFloat16, the three GEMMs take bfloat16 inputs (x, W and the output gradient rounded to
// nearest even) and accumulate and write fp32 on oneDNN's AVX512-BF16 kernels, about twice
// the fp32 rate; the weights, bias, ReLU and every gradient stay fp32. The precision is read
// in forward and kept for that call's backward, so a backward run elsewhere matches it.
// Thread-safety: FastLinear may run on several threads at once; the precision is per thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace tzrec {

enum class GemmPrecision { kFloat32, kBFloat16 };

// The precision FastLinear uses on this thread (kFloat32 unless a ScopedGemmPrecision is live).
GemmPrecision CurrentGemmPrecision();

// Sets this thread's GEMM precision for its lifetime (a model's forward and backward).
class ScopedGemmPrecision {
 public:
  explicit ScopedGemmPrecision(GemmPrecision precision);
  ~ScopedGemmPrecision();
  ScopedGemmPrecision(const ScopedGemmPrecision&) = delete;
  ScopedGemmPrecision& operator=(const ScopedGemmPrecision&) = delete;

 private:
  GemmPrecision previous_;
};

// Whether oneDNN runs BF16 GEMMs natively on this CPU (AVX512-BF16 or AMX); without it they
// would be emulated, slower than fp32.
bool NativeBf16GemmAvailable();

// The GEMM precision of a config's mixed_precision value ("" / "BF16" / "FP16"; anything else
// is an error naming `field`). BF16 without native support, and FP16 (oneDNN 2.6 has no CPU
// FP16 GEMM), run in fp32 with one warning line per process saying so.
GemmPrecision GemmPrecisionFor(const std::string& mixed_precision, const std::string& field);

// x [B, in], weight [out, in], bias [out] or undefined. Returns [B, out].
at::Tensor FastLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      bool relu);

// Layers x -> FastLinear(weights[0], biases[0], relu[0]) -> ... -> the last one's output [B,
// out], fp32. In BF16 the chain is one autograd function whose hidden activations stay
// bfloat16: each hidden layer's GEMM writes its output rounded to bfloat16 (after its bias and
// ReLU), which is what the next layer's GEMM takes and what the backward's ReLU mask reads,
// instead of writing fp32 that the next layer rounds again - the same values, a pass and half
// the activation memory less per hidden layer. (The one difference: a positive output below
// bfloat16's smallest subnormal, ~1e-40, masks its gradient.) Anything else runs the layers
// one FastLinear each. Every bias must be defined for the chain.
at::Tensor FastLinearChain(const at::Tensor& x, const std::vector<at::Tensor>& weights,
                           const std::vector<at::Tensor>& biases, const std::vector<bool>& relu);

// Wall milliseconds spent in FastLinear's GEMM calls (BF16's include their fused bias and
// ReLU) since the process started, summed over calling threads; the trainer reports its
// per-step share.
double FastLinearGemmMilliseconds();

// Whether FastLinear uses oneDNN (TZREC_FAST_LINEAR=0 turns it off, for comparisons).
bool FastLinearEnabled();

}  // namespace tzrec
