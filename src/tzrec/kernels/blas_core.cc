#include "tzrec/kernels/blas_core.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "tzrec/common/logging.h"

namespace tzrec {
namespace {

// Set on the restarted process, so it neither loops nor forgets what it replaced.
constexpr char kReplacedCoreEnv[] = "TZREC_BLAS_REPLACED_CORE";
constexpr char kSetSpinCountEnv[] = "TZREC_OMP_SPINCOUNT_SET";
// Short enough that an idle OpenMP thread sleeps within a fraction of a millisecond, long
// enough to bridge the gaps between a step's back-to-back parallel regions (3000 and 10000
// measured alike; libgomp itself uses 1000 when it has more threads than CPUs).
constexpr char kTrainingSpinCount[] = "10000";

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

CpuBlasFeatures DetectCpuBlasFeatures() {
  __builtin_cpu_init();
  CpuBlasFeatures cpu;
  cpu.amd = __builtin_cpu_is("amd");
  cpu.avx = __builtin_cpu_supports("avx");
  cpu.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  cpu.avx512 = cpu.avx2_fma && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512cd");
  return cpu;
}

std::string BestBlasCoreFor(const CpuBlasFeatures& cpu) {
  // OpenBLAS's AVX-512 sgemm (SkylakeX) also serves AMD Zen 4; Zen and Haswell share the AVX2
  // kernels, named by vendor so that OpenBLAS's own block sizes for each apply.
  if (cpu.avx512) return "SkylakeX";
  if (cpu.avx2_fma) return cpu.amd ? "Zen" : "Haswell";
  if (cpu.avx) return "SandyBridge";
  return "";
}

int BlasCoreLevel(const std::string& core_name) {
  const std::string name = Lower(core_name);
  for (const char* n : {"skylakex", "cooperlake", "sapphirerapids"}) {
    if (name == n) return 3;
  }
  for (const char* n : {"haswell", "zen"}) {
    if (name == n) return 2;
  }
  for (const char* n : {"sandybridge", "bulldozer", "piledriver", "steamroller", "excavator"}) {
    if (name == n) return 1;
  }
  for (const char* n : {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "nano",
                        "opteron", "opteron_sse3", "barcelona", "bobcat", "katmai", "coppermine",
                        "northwood", "banias", "athlon", "unknown"}) {
    if (name == n) return 0;
  }
  return -1;
}

std::string FasterBlasCoreFor(const CpuBlasFeatures& cpu, const std::string& running_core) {
  const std::string best = BestBlasCoreFor(cpu);
  if (best.empty()) return "";
  const int running = BlasCoreLevel(running_core);
  if (running < 0) return "";  // a core newer than this table: OpenBLAS knows better
  return running < BlasCoreLevel(best) ? best : "";
}

std::string ChooseBlasCore(const CpuBlasFeatures& cpu, const std::string& running_core,
                           const std::string& user_coretype, bool force) {
  if (running_core.empty()) return "";               // not OpenBLAS
  if (!user_coretype.empty() && !force) return "";   // the user chose
  return FasterBlasCoreFor(cpu, running_core);
}

std::string RunningOpenBlasCore() {
  using CorenameFn = char* (*)();
  auto fn = reinterpret_cast<CorenameFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (!fn) return "";
  const char* name = fn();
  return name ? name : "";
}

std::string ChooseOmpSpinCount(const std::string& command, const std::string& omp_num_threads,
                               unsigned cpus, const std::string& user_spincount,
                               const std::string& user_wait_policy) {
  if (command != "train_eval" && command != "eval") return "";
  if (!user_spincount.empty() || !user_wait_policy.empty()) return "";  // the user chose
  const long threads = omp_num_threads.empty() ? static_cast<long>(cpus) : std::atol(omp_num_threads.c_str());
  if (threads <= 1) return "";  // no idle OpenMP thread to spin
  return kTrainingSpinCount;
}

void EnsureFastRuntimeEnvironment(char** argv) {
  // At most once each: a restarted process (or one a restarted parent started) has the marker
  // of a replaced core, and GOMP_SPINCOUNT set.
  const std::string blas_mode = Lower(Env("TZREC_BLAS_AUTOFIX"));
  std::string core;
  const std::string running = RunningOpenBlasCore();
  if (blas_mode != "0" && blas_mode != "false" && blas_mode != "off" && Env(kReplacedCoreEnv).empty()) {
    core = ChooseBlasCore(DetectCpuBlasFeatures(), running, Env("OPENBLAS_CORETYPE"), blas_mode == "force");
  }
  const std::string spin_mode = Lower(Env("TZREC_OMP_SPIN_AUTOFIX"));
  std::string spin;
  if (spin_mode != "0" && spin_mode != "false" && spin_mode != "off" && argv[0] && argv[1]) {
    spin = ChooseOmpSpinCount(argv[1], Env("OMP_NUM_THREADS"), std::thread::hardware_concurrency(),
                              Env("GOMP_SPINCOUNT"), Env("OMP_WAIT_POLICY"));
  }
  if (core.empty() && spin.empty()) return;
  const std::string user_coretype = Env("OPENBLAS_CORETYPE");
  if (!core.empty()) {
    setenv(kReplacedCoreEnv, running.c_str(), 1);
    setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  }
  if (!spin.empty()) {
    setenv(kSetSpinCountEnv, "1", 1);
    setenv("GOMP_SPINCOUNT", spin.c_str(), 1);
  }
  execv("/proc/self/exe", argv);
  const int error = errno;
  if (!spin.empty()) {
    unsetenv(kSetSpinCountEnv);
    unsetenv("GOMP_SPINCOUNT");
  }
  if (!core.empty()) {
    unsetenv(kReplacedCoreEnv);
    if (user_coretype.empty()) {
      unsetenv("OPENBLAS_CORETYPE");
    } else {
      setenv("OPENBLAS_CORETYPE", user_coretype.c_str(), 1);
    }
    LOG_WARNING << "OpenBLAS runs its generic '" << running << "' kernels on this CPU; restarting "
                << "with OPENBLAS_CORETYPE=" << core << " failed (" << std::strerror(error)
                << "): GEMMs will be several times slower. Set OPENBLAS_CORETYPE=" << core
                << " before starting tzrec";
  } else {
    LOG_WARNING << "restarting with GOMP_SPINCOUNT=" << spin << " failed (" << std::strerror(error)
                << "); data readers may wait for CPU while OpenMP threads spin";
  }
}

std::string BlasCoreSummary() {
  const std::string running = RunningOpenBlasCore();
  if (running.empty()) return "BLAS is not OpenBLAS";
  std::string summary = "OpenBLAS core " + running;
  const std::string replaced = Env(kReplacedCoreEnv);
  if (!replaced.empty()) {
    summary += " (chosen by tzrec: OpenBLAS picked its generic '" + replaced +
               "' kernels for this CPU)";
  } else if (!Env("OPENBLAS_CORETYPE").empty()) {
    summary += " (OPENBLAS_CORETYPE=" + Env("OPENBLAS_CORETYPE") + ")";
  }
  return summary;
}

std::string OmpSpinSummary() {
  const std::string spin = Env("GOMP_SPINCOUNT");
  if (!Env(kSetSpinCountEnv).empty()) {
    return "OpenMP spin count " + spin + " (set by tzrec: idle OpenMP threads sleep soon, so data "
           "readers get the cores between parallel regions; set GOMP_SPINCOUNT to choose)";
  }
  if (!spin.empty()) return "OpenMP spin count " + spin + " (GOMP_SPINCOUNT)";
  if (!Env("OMP_WAIT_POLICY").empty()) return "OMP_WAIT_POLICY=" + Env("OMP_WAIT_POLICY");
  return "";
}

}  // namespace tzrec
