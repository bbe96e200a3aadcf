// GoogleTest entry point: one binary for the whole suite (each LibTorch process costs ~1 s).
#include <gtest/gtest.h>

#include "tzrec/kernels/blas_core.h"
#include "tzrec/train/runtime.h"

int main(int argc, char** argv) {
  // The same start-up as the tzrec binary: the suite runs the kernels users get.
  tzrec::EnsureFastBlasCore(argv);
  ::testing::InitGoogleTest(&argc, argv);
  tzrec::InitRuntime();
  return RUN_ALL_TESTS();
}
