#include "tzrec/dist/shm_transport.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <utility>

namespace tzrec {
namespace {

std::string Errno(const char* what, const std::string& name) {
  return std::string(what) + " " + name + ": " + std::strerror(errno);
}

// Creates (exclusively) a shared-memory object of `bytes`, with its pages reserved so that a
// full /dev/shm is an error here rather than a SIGBUS on first touch, and maps it.
void* CreateSegment(const std::string& name, int64_t bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw std::runtime_error(Errno("shm_open", name));
  const int reserved = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (reserved != 0) {
    close(fd);
    shm_unlink(name.c_str());
    throw std::runtime_error("cannot reserve " + std::to_string(bytes) + " bytes of shared memory for " + name +
                             " (" + std::strerror(reserved) +
                             "; is /dev/shm too small? TZREC_SHM_COLLECTIVES=0 uses Gloo over TCP instead)");
  }
  void* at = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (at == MAP_FAILED) {
    shm_unlink(name.c_str());
    throw std::runtime_error(Errno("mmap", name));
  }
  return at;
}

void* OpenSegment(const std::string& name, int64_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) throw std::runtime_error(Errno("shm_open", name));
  void* at = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (at == MAP_FAILED) throw std::runtime_error(Errno("mmap", name));
  return at;
}

// The command name and state letter of process `pid` from /proc ("" when there is none).
std::pair<std::string, char> ProcessStat(int64_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return {"", 0};
  // "pid (comm) S ...": the state follows the last ')' (comm may hold spaces and parentheses).
  const size_t open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 >= line.size()) return {"", 0};
  return {line.substr(open + 1, close - open - 1), line[close + 2]};
}

// False once process `pid` has exited (gone, or a zombie its parent has not reaped yet).
// Unlike a TCP peer, a dead process says nothing to shared memory, so waits check this.
bool ProcessAlive(int64_t pid) {
  const char state = ProcessStat(pid).second;
  return state != 0 && state != 'Z' && state != 'X';
}

// Sequence numbers wrap at 2^32; a difference below 2^31 means "at or after".
bool Reached(uint32_t value, uint32_t target) { return static_cast<int32_t>(value - target) >= 0; }

void Wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// memcpy, except that an empty piece may come from a segment not created yet (null).
void CopyBytes(void* to, const void* from, int64_t bytes) {
  if (bytes > 0) std::memcpy(to, from, static_cast<size_t>(bytes));
}

template <typename T>
void AddInto(T* __restrict out, const T* __restrict in, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += in[i];
}

template <typename T>
void SumInRankOrder(const std::vector<const char*>& parts, void* out, int64_t count) {
  T* o = static_cast<T*>(out);
  CopyBytes(o, parts[0], count * static_cast<int64_t>(sizeof(T)));
  for (size_t r = 1; r < parts.size(); ++r) AddInto(o, reinterpret_cast<const T*>(parts[r]), count);
}

size_t TypeSize(ShmTransport::Type type) {
  switch (type) {
    case ShmTransport::Type::kFloat32: return 4;
    case ShmTransport::Type::kFloat64: return 8;
    case ShmTransport::Type::kInt64: return 8;
    case ShmTransport::Type::kInt32: return 4;
  }
  return 1;
}

}  // namespace

// One rank's control block. `seq` and `done` are futex words, each on its own cache line: the
// last collective this rank published, and the last one it finished reading.
struct ShmTransport::Control {
  alignas(64) std::atomic<uint32_t> seq;
  alignas(64) std::atomic<uint32_t> done;
  alignas(64) int64_t pid;  // of the rank's process, to tell a dead peer from a slow one
  uint64_t data_generation;  // 0: no data segment yet
  int64_t data_capacity;
  int64_t piece_offset[kMaxRanks];  // AllToAll: where the piece for each rank starts
  int64_t piece_bytes[kMaxRanks];
  // Futex words: the generation of each rank's data segment this rank has mapped.
  std::atomic<uint32_t> mapped_generation[kMaxRanks];
};

struct ShmTransport::Peer {
  Control* control = nullptr;
  char* data = nullptr;  // mapping of `generation`
  uint64_t generation = 0;
  int64_t capacity = 0;
  ~Peer() {
    if (data) munmap(data, static_cast<size_t>(capacity));
    if (control) munmap(control, sizeof(Control));
  }
};

namespace {
std::string ControlName(const std::string& token, int rank) { return "/tzrec-" + token + "-" + std::to_string(rank) + "-c"; }
std::string DataName(const std::string& token, int rank, uint64_t generation) {
  return "/tzrec-" + token + "-" + std::to_string(rank) + "-d" + std::to_string(generation);
}
}  // namespace

ShmTransport::ShmTransport(const std::string& token, int rank, int world_size, std::chrono::milliseconds timeout)
    : token_(token), rank_(rank), world_(world_size), timeout_(timeout) {
  if (world_size < 1 || world_size > kMaxRanks) {
    throw std::runtime_error("shared-memory collectives support up to " + std::to_string(kMaxRanks) + " ranks");
  }
  peers_.resize(world_);
  for (auto& p : peers_) p = std::make_unique<Peer>();
  void* at = CreateSegment(ControlName(token_, rank_), sizeof(Control));
  Control* control = new (at) Control();
  control->seq.store(0);
  control->done.store(0);
  control->pid = getpid();
  control->data_generation = 0;
  control->data_capacity = 0;
  for (int r = 0; r < kMaxRanks; ++r) control->mapped_generation[r].store(0);
  peers_[rank_]->control = control;
}

ShmTransport::~ShmTransport() {
  UnlinkPending();
  if (peers_.size() > static_cast<size_t>(rank_) && peers_[rank_]->control) {
    shm_unlink(ControlName(token_, rank_).c_str());  // normally gone already; harmless then
  }
}

void ShmTransport::Connect() {
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    peers_[r]->control = static_cast<Control*>(OpenSegment(ControlName(token_, r), sizeof(Control)));
    // Waits tell a dead peer by its pid, so the peers must be visible as themselves here (not
    // so when ranks share /dev/shm from different PID namespaces, e.g. containers).
    const int64_t pid = peers_[r]->control->pid;
    if (ProcessStat(pid).first != ProcessStat(getpid()).first) {
      throw std::runtime_error("rank " + std::to_string(r) + "'s process (pid " + std::to_string(pid) +
                               ") is not visible from this one (another PID namespace?)");
    }
  }
}

void ShmTransport::UnlinkPending() {
  if (pending_unlink_.empty()) return;
  shm_unlink(pending_unlink_.c_str());
  pending_unlink_.clear();
}

void ShmTransport::UnlinkControlName() { shm_unlink(ControlName(token_, rank_).c_str()); }

void ShmTransport::WaitAtLeast(const void* word_ptr, uint32_t target, int rank_waited_for, const char* what) {
  auto* word = const_cast<std::atomic<uint32_t>*>(static_cast<const std::atomic<uint32_t>*>(word_ptr));
  // A short spin first: on a busy peer the answer is usually microseconds away, and a futex
  // sleep costs a context switch each way.
  for (int i = 0; i < 2000; ++i) {
    if (Reached(word->load(std::memory_order_acquire), target)) return;
    __builtin_ia32_pause();
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (true) {
    const uint32_t value = word->load(std::memory_order_acquire);
    if (Reached(value, target)) return;
    const auto now = std::chrono::steady_clock::now();
    if (!ProcessAlive(peers_[rank_waited_for]->control->pid)) {
      UnlinkPending();  // this collective will not finish: the name must not outlive us
      throw std::runtime_error("shared-memory " + std::string(what) + ": rank " + std::to_string(rank_waited_for) +
                               " (pid " + std::to_string(peers_[rank_waited_for]->control->pid) + ") has exited");
    }
    if (now >= deadline) {
      UnlinkPending();
      throw std::runtime_error("shared-memory " + std::string(what) + ": rank " + std::to_string(rank_waited_for) +
                               " did not answer within " + std::to_string(timeout_.count() / 1000) + " s");
    }
    // Sleep until the word changes from `value` (or 100 ms, to notice the deadline).
    timespec slice{0, 100 * 1000 * 1000};
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, value, &slice, nullptr, 0);
  }
}

char* ShmTransport::BeginWrite(int64_t bytes) {
  // Our segment is free once every rank is done with the previous collective.
  for (int r = 0; r < world_; ++r) {
    if (r != rank_) WaitAtLeast(&peers_[r]->control->done, collective_ - 1, r, "collective");
  }
  Peer& me = *peers_[rank_];
  if (bytes > me.capacity) {
    const int64_t capacity = std::max<int64_t>({bytes + bytes / 2, int64_t{1} << 20, me.capacity * 2});
    const uint64_t generation = me.generation + 1;
    const std::string name = DataName(token_, rank_, generation);
    char* data = static_cast<char*>(CreateSegment(name, capacity));
    if (me.data) munmap(me.data, static_cast<size_t>(me.capacity));
    me.data = data;
    me.capacity = capacity;
    me.generation = generation;
    me.control->data_generation = generation;
    me.control->data_capacity = capacity;
    pending_unlink_ = name;
  }
  return me.data;
}

void ShmTransport::Publish() {
  Control* control = peers_[rank_]->control;
  control->seq.store(collective_, std::memory_order_release);
  Wake(&control->seq);
}

const char* ShmTransport::Await(int r) {
  Peer& peer = *peers_[r];
  WaitAtLeast(&peer.control->seq, collective_, r, "collective");
  const uint64_t generation = peer.control->data_generation;
  if (generation != peer.generation) {
    if (peer.data) munmap(peer.data, static_cast<size_t>(peer.capacity));
    peer.data = nullptr;
    const int64_t capacity = peer.control->data_capacity;
    peer.data = static_cast<char*>(OpenSegment(DataName(token_, r, generation), capacity));
    peer.capacity = capacity;
    peer.generation = generation;
    std::atomic<uint32_t>* mapped = &peers_[rank_]->control->mapped_generation[r];
    mapped->store(static_cast<uint32_t>(generation), std::memory_order_release);
    Wake(mapped);
  }
  return peer.data;
}

void ShmTransport::Finish() {
  if (!pending_unlink_.empty()) {
    // A segment created in this collective: its name goes once every peer has mapped it
    // (they all read it in this very collective), so a killed job leaves nothing behind.
    const uint32_t generation = static_cast<uint32_t>(peers_[rank_]->generation);
    for (int r = 0; r < world_; ++r) {
      if (r != rank_) WaitAtLeast(&peers_[r]->control->mapped_generation[rank_], generation, r, "collective");
    }
    UnlinkPending();
  }
  Control* control = peers_[rank_]->control;
  control->done.store(collective_, std::memory_order_release);
  Wake(&control->done);
}

void ShmTransport::AllToAll(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                            const std::vector<int64_t>& recv_bytes) {
  ++collective_;
  int64_t total = 0;
  for (int64_t n : send_bytes) total += n;
  char* data = BeginWrite(total);
  Control* mine = peers_[rank_]->control;
  int64_t offset = 0;
  for (int d = 0; d < world_; ++d) {
    mine->piece_offset[d] = offset;
    mine->piece_bytes[d] = send_bytes[d];
    offset += send_bytes[d];
  }
  // Our own piece goes straight from `send`; the others' through the segment.
  CopyBytes(data, send, total);
  Publish();
  char* out = static_cast<char*>(recv);
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) {
      CopyBytes(out, static_cast<const char*>(send) + mine->piece_offset[rank_], recv_bytes[r]);
    } else {
      const char* from = Await(r);
      const Control* control = peers_[r]->control;
      if (control->piece_bytes[rank_] != recv_bytes[r]) {
        throw std::runtime_error("alltoall: rank " + std::to_string(r) + " sends " +
                                 std::to_string(control->piece_bytes[rank_]) + " bytes here, " +
                                 std::to_string(recv_bytes[r]) + " expected");
      }
      CopyBytes(out, from + control->piece_offset[rank_], recv_bytes[r]);
    }
    out += recv_bytes[r];
  }
  Finish();
}

void ShmTransport::AllGather(const void* send, int64_t bytes, void* recv) {
  ++collective_;
  char* data = BeginWrite(bytes);
  CopyBytes(data, send, bytes);
  Publish();
  char* out = static_cast<char*>(recv);
  for (int r = 0; r < world_; ++r) {
    const char* from = r == rank_ ? static_cast<const char*>(send) : Await(r);
    CopyBytes(out + r * bytes, from, bytes);
  }
  Finish();
}

void ShmTransport::AllReduceSum(void* values, int64_t count, Type type) {
  ++collective_;
  const int64_t bytes = count * static_cast<int64_t>(TypeSize(type));
  char* data = BeginWrite(bytes);
  CopyBytes(data, values, bytes);
  Publish();
  std::vector<const char*> parts(world_);
  for (int r = 0; r < world_; ++r) parts[r] = r == rank_ ? data : Await(r);
  switch (type) {
    case Type::kFloat32: SumInRankOrder<float>(parts, values, count); break;
    case Type::kFloat64: SumInRankOrder<double>(parts, values, count); break;
    case Type::kInt64: SumInRankOrder<int64_t>(parts, values, count); break;
    case Type::kInt32: SumInRankOrder<int32_t>(parts, values, count); break;
  }
  Finish();
}

void ShmTransport::Broadcast(void* values, int64_t bytes, int root) {
  ++collective_;
  if (rank_ == root) {
    CopyBytes(BeginWrite(bytes), values, bytes);
    Publish();
  } else {
    Publish();
    CopyBytes(values, Await(root), bytes);
  }
  Finish();
}

void ShmTransport::Barrier() {
  ++collective_;
  Publish();
  for (int r = 0; r < world_; ++r) {
    if (r != rank_) WaitAtLeast(&peers_[r]->control->seq, collective_, r, "barrier");
  }
  Finish();
}

}  // namespace tzrec
