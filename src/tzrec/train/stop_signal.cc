#include "tzrec/train/stop_signal.h"

#include <cstring>

namespace tzrec {
namespace {

std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the flag is set from a signal handler");

void OnStop(int) {
  g_stop.store(true);
  signal(SIGTERM, SIG_DFL);  // a second SIGTERM is not ignored
}

}  // namespace

StopSignal::StopSignal() {
  g_stop.store(false);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnStop;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &previous_);
}

StopSignal::~StopSignal() { sigaction(SIGTERM, &previous_, nullptr); }

const std::atomic<bool>& StopSignal::flag() { return g_stop; }

}  // namespace tzrec
