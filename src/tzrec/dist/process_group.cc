#include "tzrec/dist/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/dist/shm_transport.h"

namespace tzrec {
namespace {

// First of the variables that is set, as an int in [lo, hi]; `fallback` when none is.
int EnvInt(std::initializer_list<const char*> names, int fallback, int lo, int hi) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    if (!value || !*value) continue;
    int64_t parsed;
    if (!ParseInt64(value, &parsed) || parsed < lo || parsed > hi) {
      Fail("environment variable ", name, "='", value, "' must be an integer in [", lo, ", ", hi, "]");
    }
    return static_cast<int>(parsed);
  }
  return fallback;
}

// TZREC_SHM_COLLECTIVES=0 keeps Gloo's TCP transport even when every rank is on this host.
bool ShmCollectivesWanted(const DistEnv& env) {
  const char* flag = std::getenv("TZREC_SHM_COLLECTIVES");
  if (flag && std::string(flag) == "0") return false;
  if (flag && *flag && std::string(flag) != "1") {
    Fail("environment variable TZREC_SHM_COLLECTIVES='", flag, "' must be 0 or 1");
  }
  return env.world_size > 1 && env.local_world_size == env.world_size;
}

// ShmTransport's type of a tensor's elements, or false when it has none.
bool ShmType(at::ScalarType type, ShmTransport::Type* out) {
  switch (type) {
    case at::kFloat: *out = ShmTransport::Type::kFloat32; return true;
    case at::kDouble: *out = ShmTransport::Type::kFloat64; return true;
    case at::kLong: *out = ShmTransport::Type::kInt64; return true;
    case at::kInt: *out = ShmTransport::Type::kInt32; return true;
    default: return false;
  }
}

// c10d's messages carry a C++ backtrace after the first line.
std::string FirstLineOf(const std::string& text) { return text.substr(0, text.find('\n')); }

}  // namespace

DistEnv ReadDistEnv() {
  DistEnv env;
  env.world_size = EnvInt({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"}, 1, 1, 1 << 20);
  env.rank = EnvInt({"RANK", "OMPI_COMM_WORLD_RANK"}, 0, 0, env.world_size - 1);
  env.local_world_size = EnvInt({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}, 1, 1, 1 << 20);
  env.local_rank = EnvInt({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"}, 0, 0, env.local_world_size - 1);
  if (const char* addr = std::getenv("MASTER_ADDR"); addr && *addr) env.master_addr = addr;
  env.master_port = EnvInt({"MASTER_PORT"}, 29500, 1, 65535);
  env.timeout = std::chrono::seconds(EnvInt({"PROCESS_GROUP_TIMEOUT_SECONDS"}, 1800, 1, 1 << 30));
  return env;
}

// Heartbeats: every rank's background thread writes "<beats> <collectives entered>" under
// "tzrec_beat/<rank>" in the store once a second (through its own store connection). When a
// collective fails, the reporting rank reads them twice a few seconds apart: a rank whose
// beat count stands still has stopped (SIGSTOP, a hung kernel, a lost machine); one that beats
// but entered fewer collectives is alive but stuck before this collective. So the error names
// the rank that stopped answering, not the one that noticed. Counts, not clocks: machines'
// clocks need not agree.
constexpr std::chrono::milliseconds kBeatInterval{1000};
constexpr int kStaleBeats = 3;

std::string BeatKey(int rank) { return "tzrec_beat/" + std::to_string(rank); }

c10::intrusive_ptr<c10d::TCPStore> StoreClient(const DistEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(env.master_port);
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
}

struct ProcessGroup::Impl {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
  // Every rank on this host: collectives through shared memory (null: Gloo over TCP).
  std::unique_ptr<ShmTransport> shm;
  std::atomic<int64_t> collectives{0};
  std::atomic<int64_t> collective_nanos{0};
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::condition_variable wake;
  std::thread heartbeat;

  void StartHeartbeat(const DistEnv& env) {
    heartbeat = std::thread([this, env] {
      try {
        auto client = StoreClient(env, std::chrono::milliseconds(10000));
        int64_t beats = 0;
        std::unique_lock<std::mutex> lock(mutex);
        while (!stop) {
          const std::string value = StrCat(++beats, " ", collectives.load());
          client->set(BeatKey(env.rank), std::vector<uint8_t>(value.begin(), value.end()));
          wake.wait_for(lock, kBeatInterval, [this] { return stop.load(); });
        }
      } catch (const std::exception&) {
        // The store went away (rank 0 ended): nothing left to report to.
      }
    });
  }
  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stop = true;
    }
    wake.notify_all();
    if (heartbeat.joinable()) heartbeat.join();
  }
};

ProcessGroup::ProcessGroup(DistEnv env) : env_(std::move(env)), impl_(std::make_unique<Impl>()) {}
ProcessGroup::~ProcessGroup() = default;

std::string ProcessGroup::DiagnosePeers() const {
  const int64_t mine = impl_->collectives.load();
  auto read_all = [&](c10d::TCPStore& client) {
    std::vector<std::pair<int64_t, int64_t>> out(env_.world_size, {-1, -1});
    for (int r = 0; r < env_.world_size; ++r) {
      if (!client.check({BeatKey(r)})) continue;
      std::vector<uint8_t> bytes = client.get(BeatKey(r));
      std::istringstream in(std::string(bytes.begin(), bytes.end()));
      in >> out[r].first >> out[r].second;
    }
    return out;
  };
  try {
    auto client = StoreClient(env_, std::chrono::milliseconds(5000));
    auto before = read_all(*client);
    std::this_thread::sleep_for(kBeatInterval * kStaleBeats);
    auto after = read_all(*client);
    std::string found;
    for (int r = 0; r < env_.world_size; ++r) {
      if (r == env_.rank) continue;
      std::string what;
      if (after[r].first < 0) {
        what = StrCat("rank ", r, " never sent a heartbeat");
      } else if (after[r].first == before[r].first) {
        what = StrCat("rank ", r, " stopped answering (no heartbeat for ", kStaleBeats,
                      " s: stopped, hung or its machine is gone)");
      } else if (after[r].second < mine) {
        what = StrCat("rank ", r, " is alive but has not reached this collective (it entered ",
                      after[r].second, " collectives, this rank ", mine, ")");
      }
      if (!what.empty()) found += (found.empty() ? "" : "; ") + what;
    }
    return found;
  } catch (const std::exception&) {
    return env_.rank == 0 ? std::string()
                          : "rank 0 stopped answering (the store it hosts does not respond)";
  }
}

std::unique_ptr<ProcessGroup> ProcessGroup::Create(const DistEnv& env) {
  std::unique_ptr<ProcessGroup> pg(new ProcessGroup(env));
  try {
    c10d::TCPStoreOptions options;
    options.port = static_cast<uint16_t>(env.master_port);
    options.isServer = env.rank == 0;
    options.numWorkers = env.world_size;
    options.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(env.timeout);
    auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, options);
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("tzrec", store);
    auto gloo_options = c10d::ProcessGroupGloo::Options::create();
    gloo_options->timeout = std::chrono::duration_cast<std::chrono::milliseconds>(env.timeout);
    gloo_options->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(env.rank == 0 || env.master_addr == "127.0.0.1" ||
                                                                env.master_addr == "localhost"
                                                            ? "127.0.0.1"
                                                            : env.master_addr));
    auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, env.rank, env.world_size,
                                                             gloo_options);
    pg->impl_->store = prefixed;
    pg->impl_->group = group;
    pg->impl_->StartHeartbeat(env);
    if (ShmCollectivesWanted(env)) pg->SetUpSharedMemory();
  } catch (const std::exception& e) {
    Fail("rank ", env.rank, ": cannot join the process group at ", env.master_addr, ":",
         env.master_port, " (world size ", env.world_size, ", timeout ", env.timeout.count(),
         " s): ", e.what());
  }
  LOG_INFO << "rank " << env.rank << " of " << env.world_size << " joined the process group at "
           << env.master_addr << ":" << env.master_port << "; collectives "
           << (pg->impl_->shm ? "through shared memory (every rank on this host)" : "over Gloo (TCP)");
  return pg;
}

void ProcessGroup::SetUpSharedMemory() {
  // The ranks agree on a name prefix (rank 0's random token) and on whether every rank could
  // create and map the segments; any failure keeps Gloo everywhere, with the reason logged.
  at::Tensor token = at::empty({1}, at::kLong);
  if (env_.rank == 0) {
    std::random_device device;
    token.data_ptr<int64_t>()[0] =
        static_cast<int64_t>((static_cast<uint64_t>(device()) << 32 ^ device() ^ static_cast<uint64_t>(getpid())) >> 1);
  }
  std::vector<at::Tensor> tensors = {token};
  impl_->group->broadcast(tensors)->wait();
  char name[32];
  std::snprintf(name, sizeof(name), "%llx", static_cast<unsigned long long>(token.data_ptr<int64_t>()[0]));
  std::unique_ptr<ShmTransport> shm;
  std::string failure;
  auto agree = [&](const char* stage) {
    at::Tensor failed = at::full({1}, failure.empty() ? 0 : 1, at::kLong);
    std::vector<at::Tensor> flags = {failed};
    impl_->group->allreduce(flags)->wait();
    if (failure.empty() && failed.data_ptr<int64_t>()[0] > 0) failure = StrCat("another rank failed to ", stage);
    return failure.empty();
  };
  try {
    shm = std::make_unique<ShmTransport>(name, env_.rank, env_.world_size,
                                         std::chrono::duration_cast<std::chrono::milliseconds>(env_.timeout));
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (agree("create its shared-memory segment")) {
    try {
      shm->Connect();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  const bool connected = agree("map the shared-memory segments");
  if (shm) shm->UnlinkControlName();  // every rank has mapped it (or gave up)
  if (!connected) {
    LOG_WARNING << "rank " << env_.rank << ": shared-memory collectives unavailable (" << failure
                << "); using Gloo over TCP";
    return;
  }
  impl_->shm = std::move(shm);
}

void ProcessGroup::Wait(const char* what, const std::function<void()>& run) {
  impl_->collectives.fetch_add(1);
  const auto start = std::chrono::steady_clock::now();
  try {
    run();
    impl_->collective_nanos.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count(),
        std::memory_order_relaxed);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string culprit = DiagnosePeers();
    Fail("rank ", env_.rank, ": ", what, " failed",
         culprit.empty() ? " (a peer rank died, hangs or timed out after " : ": " + culprit + " (timeout ",
         env_.timeout.count(), " s): ", FirstLineOf(e.what()));
  }
}

double ProcessGroup::collective_milliseconds() const {
  return static_cast<double>(impl_->collective_nanos.load(std::memory_order_relaxed)) / 1e6;
}

void ProcessGroup::AllReduceSum(std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return;
  ShmTransport::Type type;
  bool by_shm = impl_->shm != nullptr;
  for (const at::Tensor& t : tensors) by_shm = by_shm && t.is_contiguous() && ShmType(t.scalar_type(), &type);
  if (by_shm) {
    Wait("allreduce", [&] {
      for (at::Tensor& t : tensors) {
        ShmType(t.scalar_type(), &type);
        impl_->shm->AllReduceSum(t.data_ptr(), t.numel(), type);
      }
    });
    return;
  }
  Wait("allreduce", [&] { impl_->group->allreduce(tensors)->wait(); });
}

at::Tensor ProcessGroup::AllGather(const at::Tensor& input) {
  if (impl_->shm) {
    const at::Tensor in = input.contiguous();
    std::vector<int64_t> shape = in.sizes().vec();
    if (shape.empty()) shape.push_back(1);
    shape[0] *= env_.world_size;
    at::Tensor out = at::empty(shape, in.options());
    Wait("allgather", [&] { impl_->shm->AllGather(in.data_ptr(), static_cast<int64_t>(in.nbytes()), out.data_ptr()); });
    return out;
  }
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int r = 0; r < env_.world_size; ++r) outputs[0].push_back(at::empty_like(input));
  std::vector<at::Tensor> inputs = {input.contiguous()};
  Wait("allgather", [&] { impl_->group->allgather(outputs, inputs)->wait(); });
  return at::cat(outputs[0], 0);
}

std::vector<int64_t> ProcessGroup::ExchangeCounts(const std::vector<int64_t>& send_counts) {
  TZREC_CHECK(static_cast<int>(send_counts.size()) == env_.world_size);
  at::Tensor send = at::from_blob(const_cast<int64_t*>(send_counts.data()),
                                  {static_cast<int64_t>(send_counts.size())}, at::kLong)
                        .clone();
  at::Tensor recv = at::empty({env_.world_size}, at::kLong);
  std::vector<int64_t> ones(env_.world_size, 1);
  if (impl_->shm) {
    const std::vector<int64_t> bytes(env_.world_size, sizeof(int64_t));
    Wait("alltoall", [&] { impl_->shm->AllToAll(send.data_ptr(), bytes, recv.data_ptr(), bytes); });
  } else {
    Wait("alltoall", [&] { impl_->group->alltoall_base(recv, send, ones, ones)->wait(); });
  }
  return std::vector<int64_t>(recv.data_ptr<int64_t>(), recv.data_ptr<int64_t>() + env_.world_size);
}

at::Tensor ProcessGroup::AllToAll(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                                  const std::vector<int64_t>& recv_counts) {
  int64_t total = 0;
  for (int64_t n : recv_counts) total += n;
  std::vector<int64_t> shape = input.sizes().vec();
  shape[0] = total;
  at::Tensor output = at::empty(shape, input.options());
  at::Tensor in = input.contiguous();
  std::vector<int64_t> send(send_counts.begin(), send_counts.end());
  std::vector<int64_t> recv(recv_counts.begin(), recv_counts.end());
  if (impl_->shm) {
    // Counts are rows along dim 0; the transport moves bytes.
    int64_t sent_rows = 0;
    for (int64_t n : send) sent_rows += n;
    TZREC_CHECK(in.dim() > 0 && sent_rows == in.size(0), "alltoall send counts do not add up to the input's rows");
    int64_t row_elements = 1;
    for (int64_t d = 1; d < in.dim(); ++d) row_elements *= in.size(d);
    const int64_t bytes_per_row = row_elements * static_cast<int64_t>(in.element_size());
    for (int64_t& n : send) n *= bytes_per_row;
    for (int64_t& n : recv) n *= bytes_per_row;
    Wait("alltoall", [&] { impl_->shm->AllToAll(in.data_ptr(), send, output.data_ptr(), recv); });
    return output;
  }
  Wait("alltoall", [&] { impl_->group->alltoall_base(output, in, recv, send)->wait(); });
  return output;
}

void ProcessGroup::Broadcast(std::vector<at::Tensor>& tensors, int root) {
  if (tensors.empty()) return;
  c10d::BroadcastOptions options;
  options.rootRank = root;
  bool by_shm = impl_->shm != nullptr;
  for (const at::Tensor& t : tensors) by_shm = by_shm && t.is_contiguous();
  if (by_shm) {
    Wait("broadcast", [&] {
      for (at::Tensor& t : tensors) impl_->shm->Broadcast(t.data_ptr(), static_cast<int64_t>(t.nbytes()), root);
    });
    return;
  }
  Wait("broadcast", [&] { impl_->group->broadcast(tensors, options)->wait(); });
}

std::vector<std::string> ProcessGroup::AllGatherStrings(const std::string& value) {
  at::Tensor size = at::full({1}, static_cast<int64_t>(value.size()), at::kLong);
  at::Tensor sizes = AllGather(size);
  int64_t longest = 0;
  for (int r = 0; r < env_.world_size; ++r) longest = std::max(longest, sizes[r].item<int64_t>());
  at::Tensor bytes = at::zeros({std::max<int64_t>(longest, 1)}, at::kByte);
  std::copy(value.begin(), value.end(), bytes.data_ptr<uint8_t>());
  at::Tensor all = AllGather(bytes);
  std::vector<std::string> out;
  const int64_t stride = bytes.numel();
  for (int r = 0; r < env_.world_size; ++r) {
    const char* begin = reinterpret_cast<const char*>(all.data_ptr<uint8_t>()) + r * stride;
    out.emplace_back(begin, static_cast<size_t>(sizes[r].item<int64_t>()));
  }
  return out;
}

void ProcessGroup::Barrier() {
  if (impl_->shm) {
    Wait("barrier", [&] { impl_->shm->Barrier(); });
    return;
  }
  Wait("barrier", [&] { impl_->group->barrier()->wait(); });
}

void ProcessGroup::CheckSameOnAllRanks(const std::string& what, const std::string& value) {
  // Compare a 64-bit fingerprint: cheap, and enough to catch a differing config.
  uint64_t hash = 1469598103934665603ULL;
  for (unsigned char c : value) hash = (hash ^ c) * 1099511628211ULL;
  at::Tensor mine = at::empty({1}, at::kLong);
  mine.data_ptr<int64_t>()[0] = static_cast<int64_t>(hash);
  at::Tensor all = AllGather(mine);
  for (int r = 0; r < env_.world_size; ++r) {
    if (all.data_ptr<int64_t>()[r] != all.data_ptr<int64_t>()[0]) {
      Fail("rank ", r, " has a different ", what, " than rank 0; every rank must run the same ",
           what);
    }
  }
}

void ProcessGroupCollectives::AllReduceSum(std::vector<double>* values) {
  if (values->empty()) return;
  std::vector<at::Tensor> tensors = {
      at::from_blob(values->data(), {static_cast<int64_t>(values->size())}, at::kDouble).clone()};
  pg_->AllReduceSum(tensors);
  std::copy(tensors[0].data_ptr<double>(), tensors[0].data_ptr<double>() + values->size(), values->begin());
}

}  // namespace tzrec
