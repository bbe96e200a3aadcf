// SIGTERM during training (no LibTorch): a stopped online job saves a last checkpoint instead
// of losing the steps since the previous one. While a StopSignal lives, SIGTERM only sets a
// flag, which the training loop and the data streams it waits on (ParsedBatchStream's
// interrupt) poll; a second SIGTERM ends the process at once (the default action is back).
//
// Thread safety: one instance at a time per process; requested() from any thread.
#pragma once

#include <signal.h>

#include <atomic>

namespace tzrec {

class StopSignal {
 public:
  StopSignal();   // installs the handler
  ~StopSignal();  // restores the previous one
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  bool requested() const { return flag().load(); }
  static const std::atomic<bool>& flag();

 private:
  struct sigaction previous_ {};
};

}  // namespace tzrec
