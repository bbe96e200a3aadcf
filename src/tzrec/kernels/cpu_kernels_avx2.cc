// The CpuKernels loops compiled for the avx2 instruction set (flags in CMakeLists.txt).
#define TZREC_KERNEL_NAMESPACE kernels_avx2
#define TZREC_KERNEL_ISA "avx2"
#include "tzrec/kernels/cpu_kernels_impl.inc"
