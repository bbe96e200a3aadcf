// The CpuKernels loops compiled for the baseline instruction set (flags in CMakeLists.txt).
#define TZREC_KERNEL_NAMESPACE kernels_baseline
#define TZREC_KERNEL_ISA "baseline"
#include "tzrec/kernels/cpu_kernels_impl.inc"
