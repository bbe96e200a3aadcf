#include "tzrec/kernels/blas_core.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tzrec/common/logging.h"

namespace tzrec {
namespace {

// Set on the restarted process, so it neither loops nor forgets what it replaced.
constexpr char kReplacedCoreEnv[] = "TZREC_BLAS_REPLACED_CORE";

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

void EnsureFastBlasCore(char** argv) {
  const std::string mode = Lower(Env("TZREC_BLAS_AUTOFIX"));
  if (mode == "0" || mode == "false" || mode == "off") return;
  if (!Env(kReplacedCoreEnv).empty()) return;  // already restarted once
  const std::string running = RunningOpenBlasCore();
  const std::string core =
      ChooseBlasCore(DetectCpuBlasFeatures(), running, Env("OPENBLAS_CORETYPE"), mode == "force");
  if (core.empty()) return;
  setenv(kReplacedCoreEnv, running.c_str(), 1);
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  execv("/proc/self/exe", argv);
  const int error = errno;
  unsetenv(kReplacedCoreEnv);
  setenv("OPENBLAS_CORETYPE", running.c_str(), 1);
  LOG_WARNING << "OpenBLAS runs its generic '" << running << "' kernels on this CPU; restarting "
              << "with OPENBLAS_CORETYPE=" << core << " failed (" << std::strerror(error)
              << "): GEMMs will be several times slower. Set OPENBLAS_CORETYPE=" << core
              << " before starting tzrec";
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

}  // namespace tzrec
