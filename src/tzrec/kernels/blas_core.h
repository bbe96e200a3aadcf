// Choosing OpenBLAS's kernel set and OpenMP's idle spinning for the running process.
//
// Debian's OpenBLAS 0.3.21 picks its kernels by CPU model when it loads and falls back to the
// SSE3-era `Prescott` set on CPUs newer than it knows (Sapphire Rapids and later Xeons): GEMMs
// then run 4-5x slower with nothing in the log. The core can only be chosen before the library
// initialises, through OPENBLAS_CORETYPE, so the process restarts itself once with it set
// (EnsureFastRuntimeEnvironment). The same restart sets libgomp's spin count for training and
// evaluation (ChooseOmpSpinCount), which libgomp, too, reads only when it loads. Everything
// here is plain functions over cpuid and the environment; the decisions (ChooseBlasCore,
// ChooseOmpSpinCount) are pure, so they are tested without the CPU they are about.
// Thread-safety: call EnsureFastRuntimeEnvironment first thing in main, before any thread starts.
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

// The GOMP_SPINCOUNT tzrec gives `command`, or "" to leave libgomp's default. By default an
// idle OpenMP thread spins ~300000 rounds (milliseconds) before it sleeps, so between the
// parallel regions of a training step it keeps its core busy, and the data readers (idle
// priority, so as not to stall a GEMM) only run while the trainer waits for them. A short
// spin lets them parse the next batch during the step's serial parts: Criteo DLRM at 2
// threads, +17% samples/s, DeepFM unchanged (bench/train_throughput.sh's configs). Only for
// the commands that read datasets (train_eval, eval), with more than one intra-op thread
// (`omp_num_threads` as OMP_NUM_THREADS is set, "" = one per CPU of `cpus`), and when the user
// set neither GOMP_SPINCOUNT nor OMP_WAIT_POLICY.
std::string ChooseOmpSpinCount(const std::string& command, const std::string& omp_num_threads,
                               unsigned cpus, const std::string& user_spincount,
                               const std::string& user_wait_policy);

// Restarts the process (execv of /proc/self/exe with the same argv) once when it should run
// with another environment: OPENBLAS_CORETYPE when OpenBLAS runs a fallback core for this CPU
// (TZREC_BLAS_AUTOFIX=0 turns this off, =force applies it even when the user set
// OPENBLAS_CORETYPE), GOMP_SPINCOUNT as ChooseOmpSpinCount says (TZREC_OMP_SPIN_AUTOFIX=0
// turns it off). Returns only when no restart was needed or it failed (then a warning is
// logged).
void EnsureFastRuntimeEnvironment(char** argv);

// One line for the start-up log: the BLAS core and how it was chosen.
std::string BlasCoreSummary();
// The same for OpenMP's spin count: "" when libgomp runs with its default.
std::string OmpSpinSummary();

}  // namespace tzrec
