// Process initialisation shared by every subcommand (TorchEasyRec's package init).
//
// LOG_LEVEL sets the log level; TORCH_MANUAL_SEED seeds LibTorch (NUMPY_MANUAL_SEED and
// PYTHON_RANDOM_SEED seed our data-side generators when set); USE_DETERMINISTIC_ALGORITHMS=1
// turns on deterministic kernels; OMP_NUM_THREADS (default: all cores) sets the intra-op
// thread count, which LibTorch otherwise leaves at 1 on these machines. Warns when the BLAS
// in use is the slow reference implementation or OpenBLAS runs slower kernels than the CPU
// allows, and logs once the BLAS core, our kernels' ISA and the thread count.
#pragma once

#include <cstdint>

namespace tzrec {

void InitRuntime();
// Seed for data shuffling and other non-torch randomness.
uint64_t DataSeed();

}  // namespace tzrec
