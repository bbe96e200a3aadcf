#include "tzrec/kernels/cpu_kernels.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "tzrec/common/error.h"

namespace tzrec {
namespace kernels_baseline { const CpuKernels& Table(); }
namespace kernels_avx2 { const CpuKernels& Table(); }
namespace kernels_avx512 { const CpuKernels& Table(); }

namespace {

bool CpuCanRun(const char* isa) {
  __builtin_cpu_init();
  if (std::strcmp(isa, "baseline") == 0) return true;
  if (std::strcmp(isa, "avx2") == 0) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  if (std::strcmp(isa, "avx512") == 0) {
    // The -march=x86-64-v4 set.
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma");
  }
  return false;
}

const CpuKernels* Lookup(const char* isa) {
  if (!CpuCanRun(isa)) return nullptr;
  if (std::strcmp(isa, "baseline") == 0) return &kernels_baseline::Table();
  if (std::strcmp(isa, "avx2") == 0) return &kernels_avx2::Table();
  if (std::strcmp(isa, "avx512") == 0) return &kernels_avx512::Table();
  return nullptr;
}

const CpuKernels* Initial() {
  if (const char* forced = std::getenv("TZREC_CPU_ISA"); forced && *forced) {
    const CpuKernels* kernels = Lookup(forced);
    if (!kernels) {
      Fail("TZREC_CPU_ISA=", forced,
           ": unknown or not supported by this CPU (baseline, avx2, avx512)");
    }
    return kernels;
  }
  for (const char* isa : {"avx512", "avx2"}) {
    if (const CpuKernels* kernels = Lookup(isa)) return kernels;
  }
  return &kernels_baseline::Table();
}

std::atomic<const CpuKernels*>& Active() {
  static std::atomic<const CpuKernels*> active{Initial()};
  return active;
}

}  // namespace

int64_t InteractionScratch(int n, int dim) {
  const int64_t padded = (n + 15) / 16 * 16;
  const int64_t transpose = padded * dim;
  const int64_t symmetric = static_cast<int64_t>(n) * n;
  return transpose > symmetric ? transpose : symmetric;
}

const CpuKernels& ActiveCpuKernels() { return *Active().load(std::memory_order_relaxed); }

const CpuKernels* CpuKernelsFor(const char* isa) { return Lookup(isa); }

bool SetActiveCpuKernels(const char* isa) {
  const CpuKernels* kernels = Lookup(isa);
  if (!kernels) return false;
  Active().store(kernels);
  return true;
}

int64_t FirstNonFinite(const float* values, int64_t n) {
  constexpr uint32_t kExponent = 0x7f800000u;  // all ones: inf or NaN
  constexpr int64_t kBlock = 4096;
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = begin + kBlock < n ? begin + kBlock : n;
    uint32_t any = 0;
    for (int64_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, values + i, sizeof(bits));
      any |= static_cast<uint32_t>((bits & kExponent) == kExponent);
    }
    if (!any) continue;
    for (int64_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, values + i, sizeof(bits));
      if ((bits & kExponent) == kExponent) return i;
    }
  }
  return -1;
}

}  // namespace tzrec
