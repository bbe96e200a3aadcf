#include "tzrec/tools/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"

namespace tzrec {
namespace {

std::atomic<int> g_forward_signal{0};

void OnSignal(int signal) { g_forward_signal.store(signal); }

struct Rank {
  int global_rank = 0;
  pid_t pid = -1;
  int out_fd = -1;       // read end of the rank's stdout+stderr
  std::string partial;   // output not yet ended by a newline
  bool exited = false;
  int status = 0;
};

std::string SelfExe() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) Fail("launch: cannot find this program's path (/proc/self/exe)");
  path[n] = '\0';
  return path;
}

void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      if (errno == EINTR) continue;
      return;
    }
    done += static_cast<size_t>(n);
  }
}

// Emits the complete lines of `rank`'s output with its prefix (all of it when `flush`).
void EmitLines(Rank* rank, bool flush) {
  const std::string prefix = StrCat("[rank ", rank->global_rank, "] ");
  size_t start = 0;
  while (true) {
    size_t nl = rank->partial.find('\n', start);
    if (nl == std::string::npos) break;
    WriteAll(STDOUT_FILENO, prefix + rank->partial.substr(start, nl - start + 1));
    start = nl + 1;
  }
  rank->partial.erase(0, start);
  if (flush && !rank->partial.empty()) {
    WriteAll(STDOUT_FILENO, prefix + rank->partial + "\n");
    rank->partial.clear();
  }
}

std::string DescribeStatus(int status) {
  if (WIFEXITED(status)) return StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return StrCat("signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  return "unknown status";
}

bool Failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

}  // namespace

int LaunchMain(const std::vector<std::string>& args) {
  // Everything after "--" (or from the first non-flag word) is the rank's command line.
  std::vector<std::string> own, command;
  bool in_command = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (in_command) {
      command.push_back(args[i]);
    } else if (args[i] == "--") {
      in_command = true;
    } else if (!StartsWith(args[i], "-") && (own.empty() || own.back().find('=') != std::string::npos ||
                                             !StartsWith(own.back(), "--"))) {
      in_command = true;
      command.push_back(args[i]);
    } else {
      own.push_back(args[i]);
    }
  }
  Flags flags("launch",
              "Runs `tzrec <command>` as the local ranks of a distributed job (torchrun's "
              "environment). Usage: tzrec launch --nproc_per_node N [...] -- <command> [flags]",
              {{"nproc_per_node", "ranks on this node", false, "1"},
               {"nnodes", "number of nodes", false, "1"},
               {"node_rank", "this node's index in [0, nnodes)", false, "0"},
               {"master_addr", "address of node 0 (rank 0 hosts the rendezvous store)", false,
                "127.0.0.1"},
               {"master_port", "port of the rendezvous store", false, "29500"},
               {"stop_grace_seconds", "wait this long after SIGTERM before SIGKILL", false, "10"}});
  if (!flags.Parse(own)) return 0;
  const int64_t nproc = flags.GetInt("nproc_per_node");
  const int64_t nnodes = flags.GetInt("nnodes");
  const int64_t node_rank = flags.GetInt("node_rank");
  const int64_t grace = flags.GetInt("stop_grace_seconds");
  if (nproc < 1) Fail("launch: --nproc_per_node must be >= 1");
  if (nnodes < 1 || node_rank < 0 || node_rank >= nnodes) {
    Fail("launch: --node_rank must be in [0, --nnodes)");
  }
  if (command.empty()) Fail("launch: no command given (e.g. tzrec launch --nproc_per_node 2 -- train_eval ...)");
  if (command[0] == "launch") Fail("launch: the command cannot be launch itself");
  const std::string exe = SelfExe();
  const int64_t world = nproc * nnodes;
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string threads = omp ? std::string(omp) : std::to_string(std::max<int64_t>(1, cores / nproc));
  LOG_INFO << "launch: " << nproc << " local ranks (world size " << world << ", node " << node_rank
           << "), master " << flags.Get("master_addr") << ":" << flags.Get("master_port")
           << ", OMP_NUM_THREADS=" << threads;

  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<Rank> ranks(static_cast<size_t>(nproc));
  for (int64_t local = 0; local < nproc; ++local) {
    Rank& rank = ranks[local];
    rank.global_rank = static_cast<int>(node_rank * nproc + local);
    int fds[2];
    if (pipe(fds) != 0) Fail("launch: pipe failed: ", std::strerror(errno));
    pid_t pid = fork();
    if (pid < 0) Fail("launch: fork failed: ", std::strerror(errno));
    if (pid == 0) {
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      setenv("RANK", std::to_string(rank.global_rank).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("GROUP_RANK", std::to_string(node_rank).c_str(), 1);
      setenv("MASTER_ADDR", flags.Get("master_addr").c_str(), 1);
      setenv("MASTER_PORT", flags.Get("master_port").c_str(), 1);
      setenv("OMP_NUM_THREADS", threads.c_str(), 1);
      std::vector<std::string> argv_strings = {exe};
      argv_strings.insert(argv_strings.end(), command.begin(), command.end());
      std::vector<char*> argv;
      for (auto& s : argv_strings) argv.push_back(s.data());
      argv.push_back(nullptr);
      execv(exe.c_str(), argv.data());
      std::fprintf(stderr, "launch: exec %s failed: %s\n", exe.c_str(), std::strerror(errno));
      _exit(127);
    }
    close(fds[1]);
    rank.pid = pid;
    rank.out_fd = fds[0];
  }

  int first_failure = -1;  // index into ranks
  auto stop_started = std::chrono::steady_clock::time_point{};
  bool killed = false;
  auto signal_all = [&](int sig) {
    for (auto& rank : ranks) {
      if (!rank.exited) kill(rank.pid, sig);
    }
  };
  size_t running = ranks.size();
  while (running > 0 || std::any_of(ranks.begin(), ranks.end(), [](const Rank& r) { return r.out_fd >= 0; })) {
    if (int sig = g_forward_signal.exchange(0)) {
      signal_all(sig);
      if (stop_started == std::chrono::steady_clock::time_point{}) stop_started = std::chrono::steady_clock::now();
    }
    std::vector<pollfd> fds;
    std::vector<size_t> owners;
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i].out_fd >= 0) {
        fds.push_back({ranks[i].out_fd, POLLIN, 0});
        owners.push_back(i);
      }
    }
    if (!fds.empty()) {
      int ready = poll(fds.data(), fds.size(), 100);
      if (ready > 0) {
        for (size_t k = 0; k < fds.size(); ++k) {
          if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          Rank& rank = ranks[owners[k]];
          char buffer[65536];
          ssize_t n = read(rank.out_fd, buffer, sizeof(buffer));
          if (n > 0) {
            rank.partial.append(buffer, static_cast<size_t>(n));
            EmitLines(&rank, false);
          } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
            EmitLines(&rank, true);
            close(rank.out_fd);
            rank.out_fd = -1;
          }
        }
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (size_t i = 0; i < ranks.size(); ++i) {
      Rank& rank = ranks[i];
      if (rank.exited) continue;
      int status = 0;
      pid_t done = waitpid(rank.pid, &status, WNOHANG);
      if (done != rank.pid) continue;
      rank.exited = true;
      rank.status = status;
      --running;
      if (Failed(status) && first_failure < 0 && !killed) {
        first_failure = static_cast<int>(i);
        std::fprintf(stderr, "launch: rank %d (pid %d) failed with %s; stopping the other ranks\n",
                     rank.global_rank, rank.pid, DescribeStatus(status).c_str());
        signal_all(SIGTERM);
        stop_started = std::chrono::steady_clock::now();
      }
    }
    if (stop_started != std::chrono::steady_clock::time_point{} && !killed && running > 0 &&
        std::chrono::steady_clock::now() - stop_started > std::chrono::seconds(grace)) {
      signal_all(SIGKILL);
      killed = true;
    }
  }
  if (first_failure >= 0) {
    const Rank& rank = ranks[first_failure];
    std::fprintf(stderr, "launch: job failed: rank %d exited with %s\n", rank.global_rank,
                 DescribeStatus(rank.status).c_str());
    if (WIFEXITED(rank.status)) return WEXITSTATUS(rank.status);
    return 128 + WTERMSIG(rank.status);
  }
  for (const Rank& rank : ranks) {
    if (Failed(rank.status)) return WIFEXITED(rank.status) ? WEXITSTATUS(rank.status) : 128 + WTERMSIG(rank.status);
  }
  return 0;
}

}  // namespace tzrec
