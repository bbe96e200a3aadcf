// The CpuKernels loops compiled for the avx512 instruction set (flags in CMakeLists.txt).
#define TZREC_KERNEL_NAMESPACE kernels_avx512
#define TZREC_KERNEL_ISA "avx512"
#include "tzrec/kernels/cpu_kernels_impl.inc"
