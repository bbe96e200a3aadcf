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
#include <sstream>
#include <thread>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"

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
  std::atomic<int64_t> collectives{0};
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
  } catch (const std::exception& e) {
    Fail("rank ", env.rank, ": cannot join the process group at ", env.master_addr, ":",
         env.master_port, " (world size ", env.world_size, ", timeout ", env.timeout.count(),
         " s): ", e.what());
  }
  LOG_INFO << "rank " << env.rank << " of " << env.world_size << " joined the process group at "
           << env.master_addr << ":" << env.master_port;
  return pg;
}

void ProcessGroup::Wait(const char* what, const std::function<void()>& run) {
  impl_->collectives.fetch_add(1);
  try {
    run();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string culprit = DiagnosePeers();
    Fail("rank ", env_.rank, ": ", what, " failed",
         culprit.empty() ? " (a peer rank died, hangs or timed out after " : ": " + culprit + " (timeout ",
         env_.timeout.count(), " s): ", FirstLineOf(e.what()));
  }
}

void ProcessGroup::AllReduceSum(std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return;
  Wait("allreduce", [&] { impl_->group->allreduce(tensors)->wait(); });
}

at::Tensor ProcessGroup::AllGather(const at::Tensor& input) {
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
  Wait("alltoall", [&] { impl_->group->alltoall_base(recv, send, ones, ones)->wait(); });
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
  Wait("alltoall", [&] { impl_->group->alltoall_base(output, in, recv, send)->wait(); });
  return output;
}

void ProcessGroup::Broadcast(std::vector<at::Tensor>& tensors, int root) {
  if (tensors.empty()) return;
  c10d::BroadcastOptions options;
  options.rootRank = root;
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
