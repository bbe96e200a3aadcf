#include "tzrec/optim/learning_rate.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tzrec/common/error.h"
#include "tzrec/config/oneof.h"
#include "tzrec/protos/optimizer.pb.h"

namespace tzrec {
namespace {

// TorchEasyRec's schedules are torch LRSchedulers stepped once per training step (or, with
// by_epoch, once per epoch) after a first step at construction: the rate of step (epoch) t is
// computed from step_count = t. A group whose base rate is 0 stays 0.
class Schedule : public LearningRateSchedule {
 public:
  explicit Schedule(bool by_epoch) : by_epoch_(by_epoch) {}
  double Rate(double base_lr, int64_t step, int64_t epoch) const final {
    if (base_lr == 0.0) return 0.0;
    return RateAt(base_lr, static_cast<double>(std::max<int64_t>(0, by_epoch_ ? epoch : step)));
  }

 protected:
  virtual double RateAt(double base_lr, double count) const = 0;

 private:
  bool by_epoch_;
};

// The linear warmup the schedules share: from warmup_learning_rate towards base_lr over
// warmup_size steps. False (rate untouched) once `count` is past it.
bool Warmup(double base_lr, double count, double warmup_lr, int64_t warmup_size, double* rate) {
  if (count >= static_cast<double>(warmup_size)) return false;
  *rate = (base_lr - warmup_lr) * (count / static_cast<double>(warmup_size)) + warmup_lr;
  return true;
}

class ConstantLearningRate : public LearningRateSchedule {
 public:
  double Rate(double base_lr, int64_t, int64_t) const override { return base_lr; }
};

// max(base * factor^p, min) with p = (t - warmup) / decay_size, floored when staircase.
class ExponentialDecay : public Schedule {
 public:
  ExponentialDecay(const protos::ExponentialDecayLR& c, const std::string& where)
      : Schedule(c.by_epoch()), c_(c) {
    if (c.decay_size() == 0) Fail(where, ".decay_size: must be > 0");
  }
  double RateAt(double base_lr, double t) const override {
    double rate;
    if (Warmup(base_lr, t, c_.warmup_learning_rate(), c_.warmup_size(), &rate)) return rate;
    double p = (t - c_.warmup_size()) / static_cast<double>(c_.decay_size());
    if (c_.staircase()) p = std::floor(p);
    return std::max(base_lr * std::pow(static_cast<double>(c_.decay_factor()), p),
                    static_cast<double>(c_.min_learning_rate()));
  }

 private:
  protos::ExponentialDecayLR c_;
};

// learning_rates[i - 1] where i = bisect_left(schedule_sizes, t) > 0; before that base_lr, or
// with warmup a line from base_lr to learning_rates[0] over schedule_sizes[0].
class ManualStep : public Schedule {
 public:
  ManualStep(const protos::ManualStepLR& c, const std::string& where)
      : Schedule(c.by_epoch()), sizes_(c.schedule_sizes().begin(), c.schedule_sizes().end()),
        rates_(c.learning_rates().begin(), c.learning_rates().end()), warmup_(c.warmup()) {
    if (sizes_.empty() || sizes_.size() != rates_.size()) {
      Fail(where, ": schedule_sizes and learning_rates need the same number (at least one) of entries; got ",
           sizes_.size(), " and ", rates_.size());
    }
    for (size_t i = 1; i < sizes_.size(); ++i) {
      if (sizes_[i] <= sizes_[i - 1]) Fail(where, ".schedule_sizes: must increase (", sizes_[i - 1], ", ", sizes_[i], ")");
    }
    if (warmup_ && sizes_[0] == 0) Fail(where, ".schedule_sizes[0]: must be > 0 with warmup");
  }
  double RateAt(double base_lr, double t) const override {
    const size_t i = static_cast<size_t>(
        std::lower_bound(sizes_.begin(), sizes_.end(), t, [](uint32_t size, double v) { return size < v; }) -
        sizes_.begin());
    if (i > 0) return rates_[i - 1];
    if (warmup_) return (rates_[0] - base_lr) * (t / static_cast<double>(sizes_[0])) + base_lr;
    return base_lr;
  }

 private:
  std::vector<uint32_t> sizes_;
  std::vector<double> rates_;
  bool warmup_;
};

double Cosine(double base_lr, double min_lr, double t, double period) {
  const double scale = 0.5 * (1.0 + std::cos(M_PI * t / period));
  return min_lr + (base_lr - min_lr) * scale;
}

// min + (base - min)(1 + cos(pi * min(t - warmup, T_max) / T_max)) / 2.
class CosineAnnealing : public Schedule {
 public:
  CosineAnnealing(const protos::CosineAnnealingLR& c, const std::string& where)
      : Schedule(c.by_epoch()), c_(c) {
    if (c.t_max() == 0) Fail(where, ".T_max: must be > 0");
  }
  double RateAt(double base_lr, double t) const override {
    double rate;
    if (Warmup(base_lr, t, c_.warmup_learning_rate(), c_.warmup_size(), &rate)) return rate;
    const double elapsed = std::min(t - c_.warmup_size(), static_cast<double>(c_.t_max()));
    return Cosine(base_lr, c_.min_learning_rate(), elapsed, c_.t_max());
  }

 private:
  protos::CosineAnnealingLR c_;
};

// Cosine periods of T_0, T_0 * T_mult, T_0 * T_mult^2, ... after the warmup, each restarting
// at base_lr.
class CosineAnnealingWarmRestarts : public Schedule {
 public:
  CosineAnnealingWarmRestarts(const protos::CosineAnnealingWarmRestartsLR& c, const std::string& where)
      : Schedule(c.by_epoch()), c_(c) {
    if (c.t_0() == 0) Fail(where, ".T_0: must be > 0");
    if (c.t_mult() == 0) Fail(where, ".T_mult: must be >= 1");
  }
  double RateAt(double base_lr, double t) const override {
    double rate;
    if (Warmup(base_lr, t, c_.warmup_learning_rate(), c_.warmup_size(), &rate)) return rate;
    const int64_t elapsed = static_cast<int64_t>(t) - c_.warmup_size();
    const int64_t t0 = c_.t_0(), mult = c_.t_mult();
    int64_t current, period;
    if (mult == 1) {
      current = elapsed % t0;
      period = t0;
    } else {
      // The period number n as TorchEasyRec computes it (log in floating point, floored).
      const double n = std::floor(std::log(static_cast<double>(elapsed) / static_cast<double>(t0) *
                                               static_cast<double>(mult - 1) + 1.0) /
                                  std::log(static_cast<double>(mult)));
      int64_t mult_n = 1;
      for (int64_t k = 0; k < static_cast<int64_t>(n); ++k) mult_n *= mult;
      period = t0 * mult_n;
      current = elapsed - t0 * (mult_n - 1) / (mult - 1);
    }
    return Cosine(base_lr, c_.min_learning_rate(), static_cast<double>(current), static_cast<double>(period));
  }

 private:
  protos::CosineAnnealingWarmRestartsLR c_;
};

template <typename Config, typename ScheduleType>
LearningRateFactory Make() {
  return [](const google::protobuf::Message& config, const std::string& where) -> std::unique_ptr<LearningRateSchedule> {
    return std::make_unique<ScheduleType>(static_cast<const Config&>(config), where);
  };
}

}  // namespace

Registry<LearningRateFactory>& LearningRateRegistry() {
  static Registry<LearningRateFactory> registry(
      "learning rate schedule", {ConfigSlot{"tzrec.protos.SparseOptimizer", "learning_rate"},
                                 ConfigSlot{"tzrec.protos.DenseOptimizer", "learning_rate"},
                                 ConfigSlot{"tzrec.protos.PartOptimizer", "learning_rate"}});
  return registry;
}

TZREC_REGISTER(LearningRateRegistry(), "constant_learning_rate",
               [](const google::protobuf::Message&, const std::string&) -> std::unique_ptr<LearningRateSchedule> {
                 return std::make_unique<ConstantLearningRate>();
               });
TZREC_REGISTER(LearningRateRegistry(), "exponential_decay_learning_rate",
               (Make<protos::ExponentialDecayLR, ExponentialDecay>()), "decay_size", "decay_factor", "staircase",
               "warmup_learning_rate", "warmup_size", "min_learning_rate", "by_epoch");
TZREC_REGISTER(LearningRateRegistry(), "manual_step_learning_rate", (Make<protos::ManualStepLR, ManualStep>()),
               "schedule_sizes", "learning_rates", "warmup", "by_epoch");
TZREC_REGISTER(LearningRateRegistry(), "cosine_annealing_learning_rate",
               (Make<protos::CosineAnnealingLR, CosineAnnealing>()), "T_max", "min_learning_rate",
               "warmup_learning_rate", "warmup_size", "by_epoch");
TZREC_REGISTER(LearningRateRegistry(), "cosine_annealing_warm_restarts_learning_rate",
               (Make<protos::CosineAnnealingWarmRestartsLR, CosineAnnealingWarmRestarts>()), "T_0", "T_mult",
               "min_learning_rate", "warmup_learning_rate", "warmup_size", "by_epoch");

std::unique_ptr<LearningRateSchedule> CreateLearningRateSchedule(const google::protobuf::Message& optimizer,
                                                                 const std::string& where) {
  const auto* which = RegisteredOneofMember(optimizer, "learning_rate", LearningRateRegistry(), where,
                                            /*required=*/false);
  if (!which) return std::make_unique<ConstantLearningRate>();
  return LearningRateRegistry().Get(which->name())(optimizer.GetReflection()->GetMessage(optimizer, which),
                                                   where + "." + which->name());
}

}  // namespace tzrec
