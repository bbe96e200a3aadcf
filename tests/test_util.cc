#include "test_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tzrec/kernels/cpu_kernels.h"

namespace tzrec {
namespace testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/tzrec_test_XXXXXX";
  char* made = mkdtemp(pattern.data());
  if (!made) throw std::runtime_error("mkdtemp failed");
  path_ = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void WriteFile(const std::string& path, const std::string& content) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out << content;
}

std::string SourceDir() { return TZREC_SOURCE_DIR; }

std::string ReferenceConfig(const std::string& name) {
  return SourceDir() + "/tests/data/reference_configs/" + name;
}

void ForEachCpuIsa(const std::function<void()>& body) {
  const std::string original = ActiveCpuKernels().isa;
  int ran = 0;
  for (const char* isa : {"baseline", "avx2", "avx512"}) {
    if (!SetActiveCpuKernels(isa)) {
      std::printf("[ cpu isa  ] %s not supported by this CPU, not tested here\n", isa);
      continue;
    }
    SCOPED_TRACE(std::string("cpu kernels ") + isa);
    body();
    ++ran;
  }
  SetActiveCpuKernels(original.c_str());
  EXPECT_GE(ran, 1);
}

}  // namespace testing
}  // namespace tzrec
