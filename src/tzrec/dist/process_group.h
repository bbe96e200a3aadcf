// The distributed job a process belongs to, and the collectives training needs.
//
// ReadDistEnv reads torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT) or Open MPI's (OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK /
// _LOCAL_SIZE, so `mpirun` can start ranks), and PROCESS_GROUP_TIMEOUT_SECONDS. Without
// them the job has one rank and no process group is created. ProcessGroup::Create does the
// c10d TCPStore rendezvous (rank 0 hosts the store) and builds a ProcessGroupGloo (CPU); when
// every rank runs on this host (LOCAL_WORLD_SIZE == WORLD_SIZE) the collectives themselves go
// through shared memory (shm_transport.h) unless TZREC_SHM_COLLECTIVES=0.
// Every collective has the timeout: a rank that died or hangs makes the others fail with an
// error instead of waiting forever, and the error names that rank (per-rank heartbeats in the
// store; a background thread per rank beats once a second).
//
// Thread safety: collectives are issued by the training thread only, in the same order on
// every rank.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tzrec/common/collectives.h"
#include "tzrec/embedding/table_shard.h"

namespace tzrec {

struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::seconds timeout{1800};
  bool distributed() const { return world_size > 1; }
};

// Reads the job from the environment; bad values are errors naming the variable.
DistEnv ReadDistEnv();

class ProcessGroup {
 public:
  // Rendezvous with the other ranks (blocks until all have joined or the timeout passes).
  static std::unique_ptr<ProcessGroup> Create(const DistEnv& env);
  ~ProcessGroup();

  int rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const DistEnv& env() const { return env_; }

  // In-place sum over ranks of each tensor (contiguous CPU tensors).
  void AllReduceSum(std::vector<at::Tensor>& tensors);
  // Every rank's `input` (same shape on all ranks), concatenated along dim 0 in rank order.
  at::Tensor AllGather(const at::Tensor& input);
  // Rows of `input` split by `send_counts` (one count per rank, along dim 0) go to each rank;
  // returns what the ranks sent here, in rank order (`recv_counts` per rank).
  at::Tensor AllToAll(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                      const std::vector<int64_t>& recv_counts);
  // Counts exchange for AllToAll: returns how many rows each rank will send here.
  std::vector<int64_t> ExchangeCounts(const std::vector<int64_t>& send_counts);
  // Rank `root`'s tensors copied into every rank's (same shapes everywhere).
  void Broadcast(std::vector<at::Tensor>& tensors, int root = 0);
  // Every rank's string, in rank order.
  std::vector<std::string> AllGatherStrings(const std::string& value);
  void Barrier();
  // Fails on every rank, naming the first differing rank, when `value` differs between ranks
  // (e.g. a fingerprint of the pipeline config).
  void CheckSameOnAllRanks(const std::string& what, const std::string& value);
  // Wall time spent inside collectives so far (transfer plus waiting for slower ranks), for
  // the step-time breakdown.
  double collective_milliseconds() const;

 private:
  explicit ProcessGroup(DistEnv env);
  // Every rank on one host: agree on shared-memory collectives (or log why not and keep Gloo).
  void SetUpSharedMemory();
  // Waits for a collective, turning c10d/Gloo errors into tzrec::Error naming the rank that
  // stopped answering (from the heartbeats, see process_group.cc).
  void Wait(const char* what, const std::function<void()>& run);
  // Which peers stopped beating or lag behind in collectives ("" when none can be named).
  std::string DiagnosePeers() const;

  struct Impl;  // the c10d objects (their headers stay out of this one)
  DistEnv env_;
  std::unique_ptr<Impl> impl_;
};

// The collectives model-parallel embedding tables use, over a ProcessGroup.
class ProcessGroupShardComm : public ShardComm {
 public:
  explicit ProcessGroupShardComm(ProcessGroup* pg) : pg_(pg) {}
  int rank() const override { return pg_->rank(); }
  int world_size() const override { return pg_->world_size(); }
  std::vector<int64_t> ExchangeCounts(const std::vector<int64_t>& send_counts) override {
    return pg_->ExchangeCounts(send_counts);
  }
  at::Tensor AllToAll(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                      const std::vector<int64_t>& recv_counts) override {
    return pg_->AllToAll(input, send_counts, recv_counts);
  }
  at::Tensor AllGather(const at::Tensor& input) override { return pg_->AllGather(input); }

 private:
  ProcessGroup* pg_;
};

// The Collectives (common/collectives.h) of metrics and data positions, over a ProcessGroup.
class ProcessGroupCollectives : public Collectives {
 public:
  explicit ProcessGroupCollectives(ProcessGroup* pg) : pg_(pg) {}
  int rank() const override { return pg_->rank(); }
  int world_size() const override { return pg_->world_size(); }
  void AllReduceSum(std::vector<double>* values) override;
  std::vector<std::string> AllGatherBytes(const std::string& bytes) override {
    return pg_->AllGatherStrings(bytes);
  }

 private:
  ProcessGroup* pg_;
};

}  // namespace tzrec
