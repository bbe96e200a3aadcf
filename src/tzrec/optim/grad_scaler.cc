#include "tzrec/optim/grad_scaler.h"

#include <cmath>
#include <string>

#include "tzrec/common/error.h"

namespace tzrec {

GradScaler::GradScaler(const protos::GradScaler& config)
    : scale_(config.init_scale()),
      growth_factor_(config.growth_factor()),
      backoff_factor_(config.backoff_factor()),
      growth_interval_(config.growth_interval()) {
  if (!(std::isfinite(scale_) && scale_ > 0)) {
    Fail("train_config.grad_scaler.init_scale: ", config.init_scale(), " must be a positive number");
  }
  if (!(std::isfinite(growth_factor_) && growth_factor_ > 1)) {
    Fail("train_config.grad_scaler.growth_factor: ", config.growth_factor(), " must be > 1");
  }
  if (!(backoff_factor_ > 0 && backoff_factor_ < 1)) {
    Fail("train_config.grad_scaler.backoff_factor: ", config.backoff_factor(), " must be in (0, 1)");
  }
  if (growth_interval_ <= 0) Fail("train_config.grad_scaler.growth_interval: must be > 0");
}

void GradScaler::Update(bool finite) {
  // torch's _amp_update_scale_: back off and restart the streak on an overflow; grow after
  // growth_interval clean steps, unless growing would overflow the scale itself.
  if (!finite) {
    scale_ *= backoff_factor_;
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == growth_interval_) {
    const float grown = scale_ * growth_factor_;
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
}

void GradScaler::SetState(float scale, int64_t growth_tracker, const std::string& what) {
  if (!(std::isfinite(scale) && scale > 0) || growth_tracker < 0) {
    Fail(what, ": grad scaler state (scale ", scale, ", growth tracker ", growth_tracker,
         ") is invalid");
  }
  scale_ = scale;
  growth_tracker_ = growth_tracker;
}

}  // namespace tzrec
