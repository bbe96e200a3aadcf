// OpenBLAS's kernel set: the choice is tested for every CPU class without that CPU, and the
// restart end to end on this machine by pretending OpenBLAS picked its generic kernels. The
// OpenMP spin count: when it is set, and the restart that sets it.
#include <gtest/gtest.h>

#include <string>

#include "train_test_util.h"
#include "tzrec/kernels/blas_core.h"

namespace tzrec {
namespace {

CpuBlasFeatures Cpu(bool amd, int level) {
  CpuBlasFeatures cpu;
  cpu.amd = amd;
  cpu.avx = level >= 1;
  cpu.avx2_fma = level >= 2;
  cpu.avx512 = level >= 3;
  return cpu;
}

TEST(BlasCore, BestCorePerCpuClass) {
  EXPECT_EQ(BestBlasCoreFor(Cpu(false, 3)), "SkylakeX");
  EXPECT_EQ(BestBlasCoreFor(Cpu(true, 3)), "SkylakeX");
  EXPECT_EQ(BestBlasCoreFor(Cpu(false, 2)), "Haswell");
  EXPECT_EQ(BestBlasCoreFor(Cpu(true, 2)), "Zen");
  EXPECT_EQ(BestBlasCoreFor(Cpu(false, 1)), "SandyBridge");
  EXPECT_EQ(BestBlasCoreFor(Cpu(false, 0)), "");
  EXPECT_EQ(BlasCoreLevel("Prescott"), 0);
  EXPECT_EQ(BlasCoreLevel("SAPPHIRERAPIDS"), 3);
  EXPECT_EQ(BlasCoreLevel("Zen"), 2);
  EXPECT_EQ(BlasCoreLevel("SomeFutureCore"), -1);
}

TEST(BlasCore, RestartsOnlyFromAFallbackTheUserDidNotChoose) {
  // Sapphire Rapids under OpenBLAS 0.3.21: Prescott -> SkylakeX.
  EXPECT_EQ(ChooseBlasCore(Cpu(false, 3), "Prescott", "", false), "SkylakeX");
  EXPECT_EQ(ChooseBlasCore(Cpu(false, 2), "Core2", "", false), "Haswell");
  EXPECT_EQ(ChooseBlasCore(Cpu(true, 3), "Haswell", "", false), "SkylakeX");
  // Already right, or better than our table knows, or not OpenBLAS at all.
  EXPECT_EQ(ChooseBlasCore(Cpu(false, 3), "SkylakeX", "", false), "");
  EXPECT_EQ(ChooseBlasCore(Cpu(false, 3), "Cooperlake", "", false), "");
  EXPECT_EQ(ChooseBlasCore(Cpu(true, 2), "Zen", "", false), "");
  EXPECT_EQ(ChooseBlasCore(Cpu(false, 3), "GraniteRapids", "", false), "");
  EXPECT_EQ(ChooseBlasCore(Cpu(false, 3), "", "", false), "");
  // A generic CPU has nothing better.
  EXPECT_EQ(ChooseBlasCore(Cpu(false, 0), "Prescott", "", false), "");
  // The user's OPENBLAS_CORETYPE stands unless forced.
  EXPECT_EQ(ChooseBlasCore(Cpu(false, 3), "Prescott", "Prescott", false), "");
  EXPECT_EQ(ChooseBlasCore(Cpu(false, 3), "Prescott", "Prescott", true), "SkylakeX");
}

// The binary restarts itself once with a fast core and says so; without the restart it warns.
TEST(BlasCore, TheBinaryReplacesAGenericCoreAndLogsIt) {
  const std::string best = BestBlasCoreFor(DetectCpuBlasFeatures());
  if (RunningOpenBlasCore().empty() || best.empty()) {
    GTEST_SKIP() << "BLAS is not OpenBLAS or the CPU has no kernels beyond the generic ones";
  }
  const std::string command = std::string(TZREC_BINARY) +
                              " train_eval --pipeline_config_path=/nonexistent/pipeline.config";
  int code = 0;
  std::string out = testing::Shell("env -u TZREC_BLAS_REPLACED_CORE OPENBLAS_CORETYPE=Prescott "
                                   "TZREC_BLAS_AUTOFIX=force " + command, &code);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("OpenBLAS core " + best +
                     " (chosen by tzrec: OpenBLAS picked its generic 'Prescott' kernels"),
            std::string::npos) << out;
  EXPECT_EQ(out.find("WARN"), std::string::npos) << out;
  EXPECT_NE(out.find("/nonexistent/pipeline.config"), std::string::npos) << out;

  out = testing::Shell("env -u TZREC_BLAS_REPLACED_CORE OPENBLAS_CORETYPE=Prescott " + command,
                       &code);
  EXPECT_NE(out.find("OpenBLAS runs its 'Prescott' kernels although this CPU can run its faster '" +
                     best + "' ones"),
            std::string::npos) << out;
  EXPECT_NE(out.find("OpenBLAS core Prescott (OPENBLAS_CORETYPE=Prescott)"), std::string::npos)
      << out;
}

TEST(OmpSpin, ShortOnlyForDatasetCommandsWithIdleThreadsTheUserLeftAlone) {
  EXPECT_EQ(ChooseOmpSpinCount("train_eval", "", 2, "", ""), "10000");
  EXPECT_EQ(ChooseOmpSpinCount("eval", "4", 1, "", ""), "10000");
  // Not reading datasets (serving latency wants threads awake), one thread, or the user chose.
  EXPECT_EQ(ChooseOmpSpinCount("serve", "", 8, "", ""), "");
  EXPECT_EQ(ChooseOmpSpinCount("export", "", 8, "", ""), "");
  EXPECT_EQ(ChooseOmpSpinCount("train_eval", "1", 8, "", ""), "");
  EXPECT_EQ(ChooseOmpSpinCount("train_eval", "", 1, "", ""), "");
  EXPECT_EQ(ChooseOmpSpinCount("train_eval", "", 8, "300000", ""), "");
  EXPECT_EQ(ChooseOmpSpinCount("train_eval", "", 8, "", "PASSIVE"), "");
}

// train_eval restarts once with the short spin and says so in its runtime line; the user's
// GOMP_SPINCOUNT stands; one thread leaves libgomp as it is.
TEST(OmpSpin, TrainingRunsWithTheShortSpinUnlessTheUserChose) {
  const std::string command = std::string(TZREC_BINARY) +
                              " train_eval --pipeline_config_path=/nonexistent/pipeline.config";
  const std::string clean = "env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY -u TZREC_OMP_SPINCOUNT_SET "
                            "-u TZREC_OMP_SPIN_AUTOFIX ";
  int code = 0;
  std::string out = testing::Shell(clean + "OMP_NUM_THREADS=2 " + command, &code);
  EXPECT_NE(code, 0) << out;
  EXPECT_NE(out.find("; OpenMP spin count 10000 (set by tzrec"), std::string::npos) << out;
  EXPECT_NE(out.find("/nonexistent/pipeline.config"), std::string::npos) << out;
  out = testing::Shell(clean + "GOMP_SPINCOUNT=77 OMP_NUM_THREADS=2 " + command, &code);
  EXPECT_NE(out.find("; OpenMP spin count 77 (GOMP_SPINCOUNT)"), std::string::npos) << out;
  for (const std::string& off : {std::string("OMP_NUM_THREADS=1 "), std::string("TZREC_OMP_SPIN_AUTOFIX=0 OMP_NUM_THREADS=2 ")}) {
    out = testing::Shell(clean + off + command, &code);
    EXPECT_NE(out.find("runtime: "), std::string::npos) << out;
    EXPECT_EQ(out.find("OpenMP spin count"), std::string::npos) << off << out;
  }
}

}  // namespace
}  // namespace tzrec
