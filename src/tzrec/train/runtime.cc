#include "tzrec/train/runtime.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/Generator.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>

#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/kernels/blas_core.h"
#include "tzrec/kernels/cpu_kernels.h"

namespace tzrec {
namespace {

bool EnvInt(const char* name, int64_t* out) {
  const char* value = std::getenv(name);
  return value && ParseInt64(value, out);
}

void CheckBlas() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libblas.so") != std::string::npos) {
      if (line.find("openblas") == std::string::npos && line.find("mkl") == std::string::npos) {
        LOG_WARNING << "LibTorch is using the reference BLAS (" << line.substr(line.rfind(' ') + 1)
                    << "), which trains 20-30x slower; run scripts/install_deps.sh to select "
                    << "OpenBLAS (openmp variant)";
      }
      return;
    }
  }
}

}  // namespace

void InitRuntime() {
  if (const char* level = std::getenv("LOG_LEVEL")) SetLogLevel(ParseLogLevel(level));
  int64_t seed;
  if (EnvInt("TORCH_MANUAL_SEED", &seed)) {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(static_cast<uint64_t>(seed));
  }
  if (const char* det = std::getenv("USE_DETERMINISTIC_ALGORITHMS")) {
    if (std::string(det) == "1" || std::string(det) == "true") {
      at::globalContext().setDeterministicAlgorithms(true, false);
    }
  }
  int64_t threads = 0;
  if (!EnvInt("OMP_NUM_THREADS", &threads) || threads <= 0) {
    threads = std::max(1u, std::thread::hardware_concurrency());
  }
  at::set_num_threads(static_cast<int>(threads));
  CheckBlas();
  static std::once_flag logged;
  std::call_once(logged, [threads] {
    const std::string running = RunningOpenBlasCore();
    const std::string best =
        running.empty() ? "" : FasterBlasCoreFor(DetectCpuBlasFeatures(), running);
    if (!best.empty()) {
      LOG_WARNING << "OpenBLAS runs its '" << running << "' kernels although this CPU can run "
                  << "its faster '" << best << "' ones (GEMMs about 2x faster per level; "
                  << "its generic kernels are 3-5x slower); unset OPENBLAS_CORETYPE or set it to "
                  << best;
    }
    const std::string spin = OmpSpinSummary();
    LOG_INFO << "runtime: " << BlasCoreSummary() << "; tzrec kernels "
             << ActiveCpuKernels().isa << "; " << threads << " intra-op threads"
             << (spin.empty() ? "" : "; " + spin);
    const int used = ParallelForThreadsUsed(threads);
    if (used < threads) {
      LOG_WARNING << "tzrec's parallel loops run on " << used << " of " << threads
                  << " intra-op threads (built without OpenMP?)";
    }
  });
}

int ParallelForThreadsUsed(int64_t items) {
  std::mutex mutex;
  std::set<int> threads;
  at::parallel_for(0, items, 1, [&](int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(mutex);
    threads.insert(at::get_thread_num());
  });
  return static_cast<int>(threads.size());
}

uint64_t DataSeed() {
  int64_t seed;
  if (EnvInt("NUMPY_MANUAL_SEED", &seed) || EnvInt("PYTHON_RANDOM_SEED", &seed) ||
      EnvInt("TORCH_MANUAL_SEED", &seed)) {
    return static_cast<uint64_t>(seed);
  }
  return std::random_device()();
}

}  // namespace tzrec
