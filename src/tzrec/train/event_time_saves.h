// Checkpoints on event time (no LibTorch): TorchEasyRec's save_checkpoints_timestamp_interval
// (a save whenever the consumed data's event time crosses a multiple of the interval, in
// seconds since the Unix epoch), save_checkpoints_timestamps (a save when it crosses each of
// these absolute times) and save_checkpoints_timestamp_quorum (the event time of a step is the
// latest that at least this fraction of the ranks have reached, so one rank with a stray
// timestamp neither triggers nor holds back a save).
//
// Event times come from stream rows (Kafka message timestamps, RowPositions::event_time); a
// step's time is its batch's latest. The first time seen only sets the reference; each save
// moves it, and checkpoints keep it (DataloaderState's __data_ts_watermark__) so a resumed run
// saves at the same boundaries.
//
// Thread safety: one instance per training loop, used by its thread.
#pragma once

#include <cstdint>
#include <vector>

#include "tzrec/protos/train.pb.h"

namespace tzrec {

class EventTimeSaves {
 public:
  // Fails naming the field for a quorum outside (0, 1] when a trigger is set.
  explicit EventTimeSaves(const protos::TrainConfig& train);

  bool enabled() const { return interval_ > 0 || !targets_.empty(); }
  // `watermark` from the checkpoint a run continues (negative: none).
  void Restore(double watermark) { reference_ = watermark; }
  // The step's event time from every rank's (-1: a rank without one): the largest time at
  // least ceil(quorum x ranks) of them have reached; negative when too few have one.
  double Reconcile(std::vector<double> rank_times) const;
  // Whether reaching `event_time` (from Reconcile) calls for a save.
  bool ShouldSave(double event_time);
  // A checkpoint was saved at `event_time`: the reference moves there.
  void Saved(double event_time) {
    if (event_time >= 0) reference_ = event_time;
  }

 private:
  int64_t interval_;
  std::vector<int64_t> targets_;
  double quorum_;
  double reference_ = -1.0;
};

}  // namespace tzrec
