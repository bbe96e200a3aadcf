// Collectives: the few cross-rank operations that code below the distributed layer needs
// (metrics combining over ranks, train metrics, data positions), without LibTorch or c10d.
//
// dist/ implements it over the process group; LocalCollectives is the one-process identity.
// Every rank must call the same operations in the same order. Not thread-safe: used by the
// training thread only.
#pragma once

#include <string>
#include <vector>

namespace tzrec {

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Element-wise sum over ranks, in place (same length on every rank).
  virtual void AllReduceSum(std::vector<double>* values) = 0;
  // Every rank's bytes, in rank order.
  virtual std::vector<std::string> AllGatherBytes(const std::string& bytes) = 0;
};

// One process: sums and gathers of itself.
class LocalCollectives : public Collectives {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void AllReduceSum(std::vector<double>*) override {}
  std::vector<std::string> AllGatherBytes(const std::string& bytes) override { return {bytes}; }
};

}  // namespace tzrec
