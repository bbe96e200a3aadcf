// Linear layer (+ optional fused ReLU) on oneDNN's sgemm, as a LibTorch autograd function.
//
// Why: ATen 1.13 sends fp32 Linear to the system BLAS; on these machines oneDNN's JIT sgemm
// runs 2-2.5x faster than OpenBLAS (351 vs 142-152 GFLOP/s on 2 threads, bench notes), and
// the MLP GEMMs dominate a DeepFM step. Forward computes y = act(x W^T + b) with the bias and
// ReLU applied in one pass; backward reuses y for the ReLU mask and runs the two gradient
// GEMMs on oneDNN too. Falls back to plain ATen ops for anything but contiguous fp32 CPU
// tensors. Checked against torch::nn::Linear and by finite differences in tests.
#pragma once

#include <ATen/core/Tensor.h>

namespace tzrec {

// x [B, in], weight [out, in], bias [out] or undefined. Returns [B, out].
at::Tensor FastLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      bool relu);

// Whether FastLinear uses oneDNN (TZREC_FAST_LINEAR=0 turns it off, for comparisons).
bool FastLinearEnabled();

}  // namespace tzrec
