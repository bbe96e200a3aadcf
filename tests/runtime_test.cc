// Process runtime: our own at::parallel_for loops (embedding lookups, FM, interaction,
// FastLinear's kernels) really run on the intra-op threads. The template is compiled into our
// code, so without OpenMP flags it silently runs every range on the calling thread.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include "tzrec/train/runtime.h"

namespace tzrec {
namespace {

TEST(RuntimeTest, ParallelForInOurCodeUsesEveryIntraOpThread) {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  EXPECT_EQ(ParallelForThreadsUsed(64), 2);
  EXPECT_EQ(ParallelForThreadsUsed(1), 1);
  at::set_num_threads(1);
  EXPECT_EQ(ParallelForThreadsUsed(64), 1);
  at::set_num_threads(threads);
}

}  // namespace
}  // namespace tzrec
