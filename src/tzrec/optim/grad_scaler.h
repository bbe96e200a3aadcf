// train_config.grad_scaler: dynamic loss scaling, as torch.amp.GradScaler does it.
//
// The loss is multiplied by scale() before backward, so small half-precision gradients do not
// flush to zero; the gradients are divided by it again before any optimizer sees them. A step
// whose gradients (dense and table rows) came out non-finite is skipped whole and the scale
// backs off; after growth_interval finite steps in a row it grows. The trainer drives it; the
// state (scale, finite-step streak) is saved with checkpoints so a continued run scales as
// the uninterrupted one. Not thread-safe (one per trainer).
#pragma once

#include <cstdint>

#include "tzrec/protos/train.pb.h"

namespace tzrec {

class GradScaler {
 public:
  // Checks the config's values (positive scale, growth > 1, backoff in (0, 1), interval > 0),
  // failing with the field's name.
  explicit GradScaler(const protos::GradScaler& config);

  float scale() const { return scale_; }
  int64_t growth_tracker() const { return growth_tracker_; }
  // After a step: `finite` whether all its unscaled gradients were finite (then it was applied).
  void Update(bool finite);
  // A checkpoint's state; fails naming `what` for a non-positive or non-finite scale.
  void SetState(float scale, int64_t growth_tracker, const std::string& what);

 private:
  float scale_;
  float growth_factor_;
  float backoff_factor_;
  int64_t growth_interval_;
  int64_t growth_tracker_ = 0;
};

}  // namespace tzrec
