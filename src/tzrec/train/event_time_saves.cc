#include "tzrec/train/event_time_saves.h"

#include <algorithm>
#include <cmath>

#include "tzrec/common/error.h"

namespace tzrec {

EventTimeSaves::EventTimeSaves(const protos::TrainConfig& train)
    : interval_(train.save_checkpoints_timestamp_interval()),
      targets_(train.save_checkpoints_timestamps().begin(), train.save_checkpoints_timestamps().end()),
      quorum_(train.save_checkpoints_timestamp_quorum()) {
  if (enabled() && !(quorum_ > 0.0 && quorum_ <= 1.0)) {
    Fail("train_config.save_checkpoints_timestamp_quorum must be in (0, 1], got ", quorum_);
  }
}

double EventTimeSaves::Reconcile(std::vector<double> rank_times) const {
  if (rank_times.empty()) return -1.0;
  std::sort(rank_times.begin(), rank_times.end());
  const int m = static_cast<int>(rank_times.size());
  // The epsilon keeps e.g. 0.1 x 10 from rounding up to 2 ranks.
  const int k = std::clamp(static_cast<int>(std::ceil(quorum_ * m - 1e-9)), 1, m);
  return rank_times[static_cast<size_t>(m - k)];
}

bool EventTimeSaves::ShouldSave(double event_time) {
  if (!enabled() || event_time < 0) return false;
  if (reference_ < 0) {
    reference_ = event_time;  // the first time seen is where the intervals start from
    return false;
  }
  if (interval_ > 0 && std::floor(event_time / static_cast<double>(interval_)) >
                           std::floor(reference_ / static_cast<double>(interval_))) {
    return true;
  }
  for (int64_t target : targets_) {
    if (reference_ < static_cast<double>(target) && static_cast<double>(target) <= event_time) return true;
  }
  return false;
}

}  // namespace tzrec
