// Process initialisation shared by every subcommand (TorchEasyRec's package init).
//
// LOG_LEVEL sets the log level; TORCH_MANUAL_SEED seeds LibTorch (NUMPY_MANUAL_SEED and
// PYTHON_RANDOM_SEED seed our data-side generators when set); USE_DETERMINISTIC_ALGORITHMS=1
// turns on deterministic kernels; OMP_NUM_THREADS (default: all cores) sets the intra-op
// thread count, which LibTorch otherwise leaves at 1 on these machines. Warns when the BLAS
// in use is the slow reference implementation or OpenBLAS runs slower kernels than the CPU
// allows, and logs once the BLAS core, our kernels' ISA and the thread count (with a warning
// when our own parallel loops would not use them all).
#pragma once

#include <cstdint>

namespace tzrec {

void InitRuntime();
// Seed for data shuffling and other non-torch randomness.
uint64_t DataSeed();
// The number of distinct intra-op threads an at::parallel_for over `items` one-item ranges,
// compiled in this library, runs its ranges on: at::get_num_threads() (capped at `items`)
// when our code is built with OpenMP, 1 when its parallel loops silently run serially.
int ParallelForThreadsUsed(int64_t items);

}  // namespace tzrec
