// Helpers for the metric tests: building metrics from config messages, random data, naive
// reference implementations, and simulated ranks (one thread each) joined by an in-process
// Collectives. ThreadCollectives is thread-safe (that is its point); the rest is not.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "tzrec/common/collectives.h"
#include "tzrec/metrics/metric.h"
#include "tzrec/protos/metric.pb.h"

namespace tzrec {
namespace testing {

// Rows of one metric input, owned.
struct Rows {
  std::vector<float> preds;   // [n, pred_width]
  std::vector<float> labels;  // [n, label_width]
  std::vector<int64_t> keys;  // [n] or empty
  int pred_width = 1;
  int label_width = 1;

  int64_t size() const { return static_cast<int64_t>(preds.size() / pred_width); }
  MetricInput Input(int64_t begin, int64_t end) const {
    MetricInput in;
    in.rows = end - begin;
    in.preds = preds.data() + begin * pred_width;
    in.pred_width = pred_width;
    in.labels = labels.data() + begin * label_width;
    in.label_width = label_width;
    in.group_keys = keys.empty() ? nullptr : keys.data() + begin;
    return in;
  }
  MetricInput Input() const { return Input(0, size()); }
  // Rows [begin, end) as their own Rows.
  Rows Slice(int64_t begin, int64_t end) const {
    Rows out;
    out.pred_width = pred_width;
    out.label_width = label_width;
    out.preds.assign(preds.begin() + begin * pred_width, preds.begin() + end * pred_width);
    out.labels.assign(labels.begin() + begin * label_width, labels.begin() + end * label_width);
    if (!keys.empty()) out.keys.assign(keys.begin() + begin, keys.begin() + end);
    return out;
  }
  void Append(const Rows& other, int64_t row) {
    preds.insert(preds.end(), other.preds.begin() + row * pred_width,
                 other.preds.begin() + (row + 1) * pred_width);
    labels.insert(labels.end(), other.labels.begin() + row * label_width,
                  other.labels.begin() + (row + 1) * label_width);
    if (!other.keys.empty()) keys.push_back(other.keys[row]);
  }
};

// Feeds `rows` to `metric` in batches of `batch` rows.
inline void Feed(Metric* metric, const Rows& rows, int64_t batch) {
  for (int64_t begin = 0; begin < rows.size(); begin += batch) {
    metric->Update(rows.Input(begin, std::min(rows.size(), begin + batch)));
  }
}

// A metric from a MetricConfig (or TrainMetricConfig) message through the registry.
inline MetricSpec Build(const protos::MetricConfig& config, int num_class = 1) {
  return BuildMetric(MetricRegistry(), config, num_class, "model_config.metrics[0]");
}
inline MetricSpec BuildTrain(const protos::TrainMetricConfig& config, int num_class = 1) {
  return BuildMetric(TrainMetricRegistry(), config, num_class, "model_config.train_metrics[0]");
}

// torchmetrics' binned binary AUROC computed the long way: a confusion matrix per threshold
// (prob >= threshold is predicted positive), safe-divided rates, trapezoid over the flipped
// curve. `weights` default to 1.
inline double NaiveBinnedAucFromConfmat(const std::vector<std::array<double, 4>>& confmat) {
  // confmat[k] = {tn, fp, fn, tp}
  const size_t t = confmat.size();
  std::vector<double> tpr(t), fpr(t);
  for (size_t k = 0; k < t; ++k) {
    const auto& c = confmat[t - 1 - k];  // flipped: highest threshold first
    tpr[k] = c[3] + c[2] > 0 ? c[3] / (c[3] + c[2]) : 0.0;
    fpr[k] = c[1] + c[0] > 0 ? c[1] / (c[1] + c[0]) : 0.0;
  }
  double area = 0.0;
  for (size_t k = 1; k < t; ++k) area += (fpr[k] - fpr[k - 1]) * (tpr[k] + tpr[k - 1]) / 2.0;
  return area;
}

inline std::vector<std::array<double, 4>> NaiveConfmat(const std::vector<float>& probs,
                                                       const std::vector<float>& labels,
                                                       int thresholds) {
  std::vector<std::array<double, 4>> confmat(thresholds, std::array<double, 4>{0, 0, 0, 0});
  for (int k = 0; k < thresholds; ++k) {
    const float thr = static_cast<float>(static_cast<double>(k) / (thresholds - 1));
    for (size_t i = 0; i < probs.size(); ++i) {
      const int pred = probs[i] >= thr ? 1 : 0;
      const int label = labels[i] > 0.5f ? 1 : 0;
      confmat[k][label * 2 + pred] += 1.0;
    }
  }
  return confmat;
}

inline double NaiveBinnedAuc(const std::vector<float>& probs, const std::vector<float>& labels,
                             int thresholds) {
  return NaiveBinnedAucFromConfmat(NaiveConfmat(probs, labels, thresholds));
}

// AUC by counting pairs: positive above negative 1, tie one half.
inline double NaivePairAuc(const std::vector<float>& probs, const std::vector<float>& labels) {
  double wins = 0.0, pairs = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    for (size_t j = 0; j < probs.size(); ++j) {
      if (labels[i] > 0.5f && labels[j] <= 0.5f) {
        pairs += 1.0;
        wins += probs[i] > probs[j] ? 1.0 : probs[i] == probs[j] ? 0.5 : 0.0;
      }
    }
  }
  return pairs > 0 ? wins / pairs : 0.0;
}

// XAUC over all pairs i < j, as TorchEasyRec's in_batch_xauc computes it.
inline double NaiveXauc(const float* preds, const float* labels, size_t n) {
  double correct = 0.0, pairs = 0.0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      pairs += 1.0;
      correct += (static_cast<double>(labels[i]) - labels[j]) *
                             (static_cast<double>(preds[i]) - preds[j]) >
                         0
                     ? 1.0
                     : 0.0;
    }
  }
  return pairs > 0 ? correct / pairs : std::nan("");
}

// Simulated ranks in one process: every rank's thread calls the same collectives in the same
// order; each call meets the others at a barrier.
class ThreadGroup {
 public:
  explicit ThreadGroup(int world) : world_(world), sums_(world), bytes_(world), barrier_(world) {}
  int world() const { return world_; }

  void AllReduceSum(int rank, std::vector<double>* values) {
    sums_[rank] = *values;
    Barrier();
    std::vector<double> total(values->size(), 0.0);
    for (int r = 0; r < world_; ++r) {
      EXPECT_EQ(sums_[r].size(), values->size()) << "ranks reduce different lengths";
      for (size_t i = 0; i < total.size() && i < sums_[r].size(); ++i) total[i] += sums_[r][i];
    }
    Barrier();  // nobody overwrites a slot before everyone has read them
    *values = std::move(total);
    ++calls_[rank];
  }
  std::vector<std::string> AllGatherBytes(int rank, const std::string& bytes) {
    bytes_[rank] = bytes;
    Barrier();
    std::vector<std::string> all = bytes_;
    Barrier();
    ++calls_[rank];
    return all;
  }
  // Collective calls made by `rank` so far.
  int calls(int rank) const { return calls_[rank]; }

 private:
  void Barrier() { barrier_.Wait(); }

  int world_;
  std::vector<std::vector<double>> sums_;
  std::vector<std::string> bytes_;
  int calls_[16] = {};
  tzrec::testing::ThreadBarrier barrier_;
};

class ThreadCollectives : public Collectives {
 public:
  ThreadCollectives(ThreadGroup* group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_->world(); }
  void AllReduceSum(std::vector<double>* values) override { group_->AllReduceSum(rank_, values); }
  std::vector<std::string> AllGatherBytes(const std::string& bytes) override {
    return group_->AllGatherBytes(rank_, bytes);
  }

 private:
  ThreadGroup* group_;
  int rank_;
};

// Runs body(rank, comm) on `world` threads and rethrows the first failure.
inline void RunRanks(ThreadGroup* group, const std::function<void(int, Collectives*)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(group->world());
  for (int r = 0; r < group->world(); ++r) {
    threads.emplace_back([&, r] {
      ThreadCollectives comm(group, r);
      try {
        body(r, &comm);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace testing
}  // namespace tzrec
