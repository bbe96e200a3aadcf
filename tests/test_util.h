// Helpers shared by tests: temp directories, file writing, expecting tzrec::Error, a barrier
// for ranks simulated as threads.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "tzrec/common/error.h"

namespace tzrec {
namespace testing {

// A fresh directory under $TMPDIR (or /tmp), removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void WriteFile(const std::string& path, const std::string& content);
std::string SourceDir();
std::string ReferenceConfig(const std::string& name);

// Runs `body` once per CpuKernels variant this CPU can run (baseline, avx2, avx512), each
// made active in turn, so fused kernels are checked in every compiled instruction set.
void ForEachCpuIsa(const std::function<void()>& body);

// `parties` threads meet at Wait(); reusable (each round is a generation). Thread-safe.
class ThreadBarrier {
 public:
  explicit ThreadBarrier(int parties) : parties_(parties) {}
  void Wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    const int64_t mine = generation_;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
    } else {
      changed_.wait(lock, [&] { return generation_ != mine; });
    }
  }

 private:
  const int parties_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  int64_t generation_ = 0;
};

}  // namespace testing
}  // namespace tzrec

// Expects `statement` to throw tzrec::Error whose message contains `substring`.
#define EXPECT_TZREC_ERROR(statement, substring)                                        \
  do {                                                                                  \
    try {                                                                               \
      statement;                                                                        \
      ADD_FAILURE() << "expected tzrec::Error containing '" << (substring) << "'";      \
    } catch (const ::tzrec::Error& e) {                                                 \
      EXPECT_NE(std::string(e.what()).find(substring), std::string::npos) << e.what(); \
    }                                                                                   \
  } while (0)
