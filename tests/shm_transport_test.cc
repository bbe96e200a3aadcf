// Shared-memory collectives (dist/shm_transport.h) between forked processes, checked against
// values every rank can compute for itself: uneven all-to-alls (empty pieces included),
// all-gathers, sums in four types, broadcasts from every root, segments that must grow, a
// dead peer, and no segment left behind in /dev/shm.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tzrec/dist/shm_transport.h"

namespace tzrec {
namespace {

std::string UniqueToken() { return "test" + std::to_string(getpid()) + "x" + std::to_string(std::rand()); }

// The three-step rendezvous ProcessGroup does over Gloo, here by waiting for the peers' names.
std::unique_ptr<ShmTransport> Join(const std::string& token, int rank, int world, std::chrono::milliseconds timeout) {
  auto shm = std::make_unique<ShmTransport>(token, rank, world, timeout);
  for (int attempt = 0;; ++attempt) {
    try {
      shm->Connect();
      break;
    } catch (const std::runtime_error&) {
      if (attempt > 500) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  shm->Barrier();
  shm->UnlinkControlName();
  return shm;
}

// Runs `body(rank)` in `world` forked processes; returns their exit codes (0: passed).
std::vector<int> RunRanks(int world, const std::function<int(int)>& body) {
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      int code = 1;
      try {
        code = body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 2;
      }
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status));
  }
  return codes;
}

int SegmentsLeft(const std::string& token) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    n += entry.path().filename().string().find(token) != std::string::npos ? 1 : 0;
  }
  return n;
}

// The byte rank `from` sends to rank `to` at position i of round `round`.
uint8_t Byte(int round, int from, int to, int64_t i) { return static_cast<uint8_t>(round * 31 + from * 7 + to * 3 + i); }

// Bytes rank `from` sends rank `to` in `round`: some pieces empty, some large enough that the
// segments must grow several times.
int64_t PieceBytes(int round, int from, int to) {
  std::mt19937_64 rng(static_cast<uint64_t>(round * 1000 + from * 10 + to));
  const int64_t sizes[] = {0, 1, 13, 4096, 100000, 3000000};
  return sizes[rng() % 6] + static_cast<int64_t>(rng() % 5);
}

TEST(ShmTransport, CollectivesMatchWhatEveryRankCanCompute) {
  constexpr int kWorld = 3;
  const std::string token = UniqueToken();
  std::vector<int> codes = RunRanks(kWorld, [&](int rank) {
    auto shm = Join(token, rank, kWorld, std::chrono::seconds(60));
    for (int round = 0; round < 40; ++round) {
      // All-to-all of uneven pieces.
      std::vector<int64_t> send_bytes(kWorld), recv_bytes(kWorld);
      std::vector<uint8_t> send;
      for (int d = 0; d < kWorld; ++d) {
        send_bytes[d] = PieceBytes(round, rank, d);
        recv_bytes[d] = PieceBytes(round, d, rank);
        for (int64_t i = 0; i < send_bytes[d]; ++i) send.push_back(Byte(round, rank, d, i));
      }
      int64_t total = 0;
      for (int64_t n : recv_bytes) total += n;
      std::vector<uint8_t> recv(static_cast<size_t>(total) + 1);
      shm->AllToAll(send.data(), send_bytes, recv.data(), recv_bytes);
      int64_t at = 0;
      for (int r = 0; r < kWorld; ++r) {
        for (int64_t i = 0; i < recv_bytes[r]; ++i) {
          if (recv[at++] != Byte(round, r, rank, i)) {
            std::fprintf(stderr, "round %d: alltoall byte %lld from rank %d differs\n", round, (long long)i, r);
            return 3;
          }
        }
      }
      // All-gather.
      const int64_t gather = 1 + round * 997;
      std::vector<uint8_t> mine(gather), all(gather * kWorld);
      for (int64_t i = 0; i < gather; ++i) mine[i] = Byte(round, rank, 0, i);
      shm->AllGather(mine.data(), gather, all.data());
      for (int r = 0; r < kWorld; ++r) {
        for (int64_t i = 0; i < gather; ++i) {
          if (all[r * gather + i] != Byte(round, r, 0, i)) return 4;
        }
      }
      // Sums in rank order, bit-identical to adding the ranks' values one after another.
      const int64_t n = 5 + round * 5003;
      std::vector<float> f(n), f_expected(n, 0.0f);
      std::vector<double> g(n), g_expected(n, 0.0);
      std::vector<int64_t> l(n), l_expected(n, 0);
      std::vector<int32_t> k(n), k_expected(n, 0);
      auto value = [&](int r, int64_t i) { return std::sin(0.1 * static_cast<double>(i + 1) * (r + 1) + round); };
      for (int64_t i = 0; i < n; ++i) {
        f[i] = static_cast<float>(value(rank, i));
        g[i] = value(rank, i);
        l[i] = (i + 1) * (rank + 1) * (int64_t{1} << 33);
        k[i] = static_cast<int32_t>(i * (rank + 2));
        for (int r = 0; r < kWorld; ++r) {
          f_expected[i] = r == 0 ? static_cast<float>(value(r, i)) : f_expected[i] + static_cast<float>(value(r, i));
          g_expected[i] = r == 0 ? value(r, i) : g_expected[i] + value(r, i);
          l_expected[i] += (i + 1) * (r + 1) * (int64_t{1} << 33);
          k_expected[i] += static_cast<int32_t>(i * (r + 2));
        }
      }
      shm->AllReduceSum(f.data(), n, ShmTransport::Type::kFloat32);
      shm->AllReduceSum(g.data(), n, ShmTransport::Type::kFloat64);
      shm->AllReduceSum(l.data(), n, ShmTransport::Type::kInt64);
      shm->AllReduceSum(k.data(), n, ShmTransport::Type::kInt32);
      if (f != f_expected || g != g_expected || l != l_expected || k != k_expected) {
        std::fprintf(stderr, "round %d: sums differ\n", round);
        return 5;
      }
      // Broadcast from each root in turn.
      const int root = round % kWorld;
      std::vector<uint8_t> b(7 + round * 3001);
      for (size_t i = 0; i < b.size(); ++i) b[i] = rank == root ? Byte(round, root, 9, i) : 0;
      shm->Broadcast(b.data(), static_cast<int64_t>(b.size()), root);
      for (size_t i = 0; i < b.size(); ++i) {
        if (b[i] != Byte(round, root, 9, i)) return 6;
      }
      shm->Barrier();
    }
    return 0;
  });
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r;
  EXPECT_EQ(SegmentsLeft(token), 0);
}

TEST(ShmTransport, ADeadPeerIsReportedWithoutWaitingForTheTimeout) {
  const std::string token = UniqueToken();
  std::vector<int> codes = RunRanks(2, [&](int rank) {
    auto shm = Join(token, rank, 2, std::chrono::seconds(120));
    int64_t value = 1;
    shm->AllReduceSum(&value, 1, ShmTransport::Type::kInt64);  // both ranks are up
    if (rank == 1) _exit(0);  // gone without a word
    const auto start = std::chrono::steady_clock::now();
    try {
      shm->AllReduceSum(&value, 1, ShmTransport::Type::kInt64);
    } catch (const std::runtime_error& e) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const bool named = std::string(e.what()).find("rank 1") != std::string::npos &&
                         std::string(e.what()).find("has exited") != std::string::npos;
      std::fprintf(stderr, "rank 0 after %.2f s: %s\n", seconds, e.what());
      return named && seconds < 20.0 ? 0 : 7;
    }
    return 8;  // the sum cannot succeed without rank 1
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(SegmentsLeft(token), 0);  // names go as soon as every rank has mapped them
}

TEST(ShmTransport, ASilentPeerTimesOut) {
  const std::string token = UniqueToken();
  std::vector<int> codes = RunRanks(2, [&](int rank) {
    auto shm = Join(token, rank, 2, std::chrono::seconds(1));
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(4));  // alive, not joining
      return 0;
    }
    int64_t value = 1;
    try {
      shm->AllReduceSum(&value, 1, ShmTransport::Type::kInt64);
    } catch (const std::runtime_error& e) {
      return std::string(e.what()).find("did not answer within 1 s") != std::string::npos ? 0 : 9;
    }
    return 10;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

}  // namespace
}  // namespace tzrec
