// Collectives between the ranks of one host through POSIX shared memory, used by ProcessGroup
// in place of Gloo's TCP loopback when every rank of the job runs on the same machine (what
// `tzrec launch --nproc_per_node N` starts). Gloo moved a sharded step's ~7 MB through the
// kernel's socket buffers with a round trip of latency per collective (~16 ms per DeepFM step
// on 2 ranks); here a message is one copy into the sender's segment and one copy out.
//
// Each rank owns a small control block (sequence words that processes wait on with futexes,
// and the layout of its current message) and a data segment that grows by replacing it with a
// larger generation. A rank writes its message into its own segment, publishes the collective's
// number, reads what it needs from the others' segments once they have published the same
// number, then marks the collective done; a rank overwrites its segment only after every rank
// is done with the previous collective. A segment's name is unlinked as soon as every rank has
// it mapped (within the collective that created it), so a killed job leaves nothing behind
// in /dev/shm unless it dies in the middle of the rendezvous or of a segment's growth.
//
// Sums (AllReduceSum) add the ranks' values in rank order on every rank, so all ranks hold the
// bit-identical result. A peer that stops answering makes a waiting rank throw
// std::runtime_error after `timeout` (ProcessGroup turns it into an error naming the peer).
//
// Thread safety: one thread issues the collectives, in the same order on every rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tzrec {

class ShmTransport {
 public:
  enum class Type { kFloat32, kFloat64, kInt64, kInt32 };
  static constexpr int kMaxRanks = 256;

  // First step of the rendezvous: creates this rank's control block, named from `token` (the
  // same on every rank of a job, unique among jobs). Throws std::runtime_error when shared
  // memory is not usable here.
  ShmTransport(const std::string& token, int rank, int world_size, std::chrono::milliseconds timeout);
  ~ShmTransport();
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  // Second step, once every rank has constructed its transport: maps the peers' control
  // blocks. Third step, once every rank has connected: removes this rank's control block name.
  void Connect();
  void UnlinkControlName();

  int rank() const { return rank_; }
  int world_size() const { return world_; }

  // Rank r's `send_bytes[d]` bytes (consecutive in `send`, in rank order) go to rank d;
  // `recv` receives `recv_bytes[r]` from each rank r, in rank order.
  void AllToAll(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                const std::vector<int64_t>& recv_bytes);
  // Every rank's `bytes` bytes, concatenated in rank order into `recv` (world * bytes).
  void AllGather(const void* send, int64_t bytes, void* recv);
  // In-place element-wise sum over ranks of `count` values of `type`.
  void AllReduceSum(void* data, int64_t count, Type type);
  // Rank `root`'s `bytes` bytes into every rank's `data`.
  void Broadcast(void* data, int64_t bytes, int root);
  void Barrier();

 private:
  struct Control;
  struct Peer;
  // The message of this collective: waits until every rank is done with the previous one,
  // then returns this rank's data segment with room for `bytes`.
  char* BeginWrite(int64_t bytes);
  void Publish();
  // Waits for rank r's message of this collective; returns its data and its control block.
  const char* Await(int r);
  void Finish();
  void UnlinkPending();
  void WaitAtLeast(const void* word, uint32_t target, int rank_waited_for, const char* what);

  std::string token_;
  int rank_;
  int world_;
  std::chrono::milliseconds timeout_;
  uint32_t collective_ = 0;  // number of the current collective (1, 2, ...)
  std::vector<std::unique_ptr<Peer>> peers_;  // [world]; peers_[rank_] is this rank
  std::string pending_unlink_;  // the name of a segment created in this collective
};

}  // namespace tzrec
