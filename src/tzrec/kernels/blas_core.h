// Choosing OpenBLAS's kernel set for the running CPU.
//
// Debian's OpenBLAS 0.3.21 picks its kernels by CPU model when it loads and falls back to the
// SSE3-era `Prescott` set on CPUs newer than it knows (Sapphire Rapids and later Xeons): GEMMs
// then run 4-5x slower with nothing in the log. The core can only be chosen before the library
// initialises, through OPENBLAS_CORETYPE, so the process restarts itself once with it set
// (EnsureFastBlasCore). Everything here is plain functions over cpuid and the environment; the
// decision (ChooseBlasCore) is pure, so it is tested without the CPU it is about.
// Thread-safety: call EnsureFastBlasCore first thing in main, before any thread starts.
#pragma once

#include <string>

namespace tzrec {

// What the CPU offers, as far as OpenBLAS's kernel sets care.
struct CpuBlasFeatures {
  bool amd = false;
  bool avx = false;
  bool avx2_fma = false;
  bool avx512 = false;  // F, BW, DQ, VL, CD, usable by the OS (the -march=x86-64-v4 set)
};
CpuBlasFeatures DetectCpuBlasFeatures();

// The OpenBLAS core that suits `cpu` best among those Debian's build carries
// ("SkylakeX", "Zen", "Haswell", "SandyBridge"), or "" when no better than the generic one.
std::string BestBlasCoreFor(const CpuBlasFeatures& cpu);

// 0 = generic SSE-era kernels ... 3 = AVX-512 kernels; -1 for a name it does not know.
int BlasCoreLevel(const std::string& core_name);

// The better core `cpu` supports when `running_core` is a lower level, else "" (also for an
// unknown core name: a core newer than this table).
std::string FasterBlasCoreFor(const CpuBlasFeatures& cpu, const std::string& running_core);

// The core to restart with, or "" to keep the running one: only when the running core is a
// lower level than the CPU supports. `user_coretype` is OPENBLAS_CORETYPE as the user set it
// (respected unless `force`).
std::string ChooseBlasCore(const CpuBlasFeatures& cpu, const std::string& running_core,
                           const std::string& user_coretype, bool force);

// The running OpenBLAS core ("Haswell", ...), or "" when the BLAS in the process is not OpenBLAS.
std::string RunningOpenBlasCore();

// Restarts the process (execv of /proc/self/exe with the same argv) with OPENBLAS_CORETYPE set
// when OpenBLAS runs a fallback core for this CPU. TZREC_BLAS_AUTOFIX=0 turns this off,
// =force applies it even when the user set OPENBLAS_CORETYPE. Returns only when no restart
// was needed or it failed (then a warning is logged).
void EnsureFastBlasCore(char** argv);

// One line for the start-up log: the BLAS core and how it was chosen.
std::string BlasCoreSummary();

}  // namespace tzrec
