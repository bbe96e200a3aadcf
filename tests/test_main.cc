// GoogleTest entry point: one binary for the whole suite (each LibTorch process costs ~1 s).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "tzrec/kernels/blas_core.h"
#include "tzrec/train/runtime.h"

int main(int argc, char** argv) {
  // The same start-up as the tzrec binary: the suite runs the kernels users get.
  tzrec::EnsureFastRuntimeEnvironment(argv);
  ::testing::InitGoogleTest(&argc, argv);
  // LibTorch seeds its default generator from the OS, so weights drawn without a seed differ
  // from process to process; a fixed seed makes every test repeatable (a small tower left all
  // dead by one draw in 60 failed a gradient test now and then). TORCH_MANUAL_SEED, read by
  // InitRuntime, still overrides it to try other draws.
  at::manual_seed(20261205);
  tzrec::InitRuntime();
  return RUN_ALL_TESTS();
}
