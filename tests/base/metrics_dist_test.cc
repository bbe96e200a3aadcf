// Metrics over simulated ranks (threads joined by an in-process Collectives) against one
// process fed every row, and train metrics (TrainMetric) against a hand-rolled reference of
// TorchEasyRec's TrainMetricWrapper / DecayAUC.
#include <gtest/gtest.h>

#include <array>
#include <numeric>
#include <random>

#include "base/metric_test_util.h"
#include "test_util.h"
#include "tzrec/metrics/train_metric.h"

namespace tzrec {
namespace {

using testing::Build;
using testing::BuildTrain;
using testing::Feed;
using testing::Rows;
using testing::RunRanks;
using testing::ThreadGroup;

// Rows for any metric: width columns of preds in [0, 1] (rows summing to 1 when width > 1),
// labels of the given kind, group keys with repeats.
enum class LabelKind { kBinary, kClass, kRegression, kRelevance };

Rows MakeRows(int64_t n, int width, LabelKind kind, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  Rows rows;
  rows.pred_width = width;
  rows.label_width = kind == LabelKind::kRelevance ? width : 1;
  for (int64_t i = 0; i < n; ++i) {
    float target = uniform(rng);
    switch (kind) {
      case LabelKind::kBinary:
        rows.labels.push_back(target < 0.35f ? 1.0f : 0.0f);
        break;
      case LabelKind::kClass:
        rows.labels.push_back(std::floor(target * width));
        break;
      case LabelKind::kRegression:
        rows.labels.push_back(std::round(std::exp(noise(rng)) * 8.0f) / 8.0f);
        break;
      case LabelKind::kRelevance:
        for (int c = 0; c < width; ++c) rows.labels.push_back(uniform(rng) < 0.2f ? 1.0f : 0.0f);
        break;
    }
    float total = 0.0f;
    std::vector<float> p(width);
    for (int c = 0; c < width; ++c) {
      float signal = kind == LabelKind::kClass        ? (rows.labels.back() == c ? 1.0f : 0.0f)
                     : kind == LabelKind::kRegression ? rows.labels.back() / 4.0f
                     : kind == LabelKind::kBinary     ? rows.labels.back()
                                                      : rows.labels[i * width + c];
      p[c] = 1.0f / (1.0f + std::exp(-(signal + noise(rng) - 0.5f)));
      p[c] = std::round(p[c] * 500.0f) / 500.0f;  // ties
      total += p[c];
    }
    for (int c = 0; c < width; ++c) {
      rows.preds.push_back(width > 1 && kind == LabelKind::kClass ? p[c] / total : p[c]);
    }
    rows.keys.push_back(static_cast<int64_t>(rng() % 97) - 40);
  }
  return rows;
}

struct Case {
  std::string name;
  protos::MetricConfig config;
  int num_class = 1;
  int width = 1;
  LabelKind kind = LabelKind::kBinary;
};

std::vector<Case> AllMetricCases() {
  std::vector<Case> cases;
  auto add = [&](const std::string& name, int num_class, int width, LabelKind kind,
                 const std::function<void(protos::MetricConfig*)>& set) {
    Case c;
    c.name = name;
    c.num_class = num_class;
    c.width = width;
    c.kind = kind;
    set(&c.config);
    cases.push_back(std::move(c));
  };
  add("auc", 1, 1, LabelKind::kBinary, [](auto* c) { c->mutable_auc()->set_thresholds(100); });
  add("auc probs1", 2, 1, LabelKind::kBinary, [](auto* c) { c->mutable_auc(); });
  add("multiclass_auc macro", 4, 4, LabelKind::kClass,
      [](auto* c) { c->mutable_multiclass_auc()->set_thresholds(30); });
  add("multiclass_auc weighted", 4, 4, LabelKind::kClass,
      [](auto* c) { c->mutable_multiclass_auc()->set_average("weighted"); });
  add("recall_at_k", 1, 8, LabelKind::kRelevance,
      [](auto* c) { c->mutable_recall_at_k()->set_top_k(3); });
  add("mean_absolute_error", 1, 1, LabelKind::kRegression,
      [](auto* c) { c->mutable_mean_absolute_error(); });
  add("mean_squared_error", 1, 1, LabelKind::kRegression,
      [](auto* c) { c->mutable_mean_squared_error(); });
  add("accuracy binary", 1, 1, LabelKind::kBinary,
      [](auto* c) { c->mutable_accuracy()->set_threshold(0.55f); });
  add("accuracy top2", 5, 5, LabelKind::kClass,
      [](auto* c) { c->mutable_accuracy()->set_top_k(2); });
  add("grouped_auc", 1, 1, LabelKind::kBinary,
      [](auto* c) { c->mutable_grouped_auc()->set_grouping_key("uid"); });
  add("xauc", 1, 1, LabelKind::kRegression,
      [](auto* c) { c->mutable_xauc()->set_sample_ratio(0.05f); });
  add("xauc max_pairs", 1, 1, LabelKind::kRegression,
      [](auto* c) { c->mutable_xauc()->set_max_pairs(5000); });
  add("xauc in_batch", 1, 1, LabelKind::kRegression,
      [](auto* c) { c->mutable_xauc()->set_in_batch(true); });
  add("grouped_xauc", 1, 1, LabelKind::kRegression, [](auto* c) {
    c->mutable_grouped_xauc()->set_grouping_key("uid");
    c->mutable_grouped_xauc()->set_max_pairs_per_group(20);
  });
  add("normalized_entropy", 1, 1, LabelKind::kBinary,
      [](auto* c) { c->mutable_normalized_entropy(); });
  return cases;
}

void ExpectSameValue(double got, double want, MetricCombine combine, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what;
  } else if (combine == MetricCombine::kGather) {
    EXPECT_EQ(got, want) << what;  // the same rows in canonical order: bit for bit
  } else {
    EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::fabs(want))) << what;
  }
}

// Every metric, combined in one CombineOverRanks call per rank, over 2 and 3 ranks and two
// ways of splitting rows: whole batches round-robin (the only split under which in_batch xauc
// is defined to agree), and each row to a random rank.
TEST(MetricDistributed, EveryMetricCombinesToTheOneProcessValue) {
  const std::vector<Case> cases = AllMetricCases();
  const int64_t n = 1500, batch = 97;
  std::vector<Rows> data;
  std::vector<double> single;
  for (size_t m = 0; m < cases.size(); ++m) {
    data.push_back(MakeRows(n, cases[m].width, cases[m].kind, 100 + m));
    MetricSpec spec = Build(cases[m].config, cases[m].num_class);
    Feed(spec.metric.get(), data[m], batch);
    single.push_back(spec.metric->Compute());
    EXPECT_FALSE(std::isnan(single.back())) << cases[m].name;
  }
  for (int world : {2, 3}) {
    for (bool random_split : {false, true}) {
      // rank -> metric -> rows, fed in `batch`-row batches (whole batches when not random).
      std::vector<std::vector<Rows>> per_rank(world, std::vector<Rows>(cases.size()));
      std::mt19937 rng(world);
      for (size_t m = 0; m < cases.size(); ++m) {
        for (int64_t i = 0; i < n; ++i) {
          int r = random_split ? static_cast<int>(rng() % world) : (i / batch) % world;
          per_rank[r][m].pred_width = data[m].pred_width;
          per_rank[r][m].label_width = data[m].label_width;
          per_rank[r][m].Append(data[m], i);
        }
      }
      ThreadGroup group(world);
      std::vector<std::vector<double>> values(world);
      std::vector<std::vector<MetricCombine>> combines(world);
      RunRanks(&group, [&](int rank, Collectives* comm) {
        std::vector<MetricSpec> specs;
        std::vector<Metric*> metrics;
        for (size_t m = 0; m < cases.size(); ++m) {
          specs.push_back(Build(cases[m].config, cases[m].num_class));
          Feed(specs.back().metric.get(), per_rank[rank][m], random_split ? 50 : batch);
          metrics.push_back(specs.back().metric.get());
        }
        CombineOverRanks(metrics, comm);
        for (Metric* metric : metrics) {
          values[rank].push_back(metric->Compute());
          combines[rank].push_back(metric->combine());
        }
      });
      int gathers = 0;
      for (size_t m = 0; m < cases.size(); ++m) {
        gathers += combines[0][m] == MetricCombine::kGather;
        if (random_split && cases[m].name == "xauc in_batch") continue;
        for (int r = 0; r < world; ++r) {
          ExpectSameValue(values[r][m], single[m], combines[0][m],
                          cases[m].name + " world " + std::to_string(world) + " rank " +
                              std::to_string(r) + (random_split ? " random" : " batches"));
        }
      }
      EXPECT_EQ(gathers, 4);  // grouped_auc, the two sampled xaucs, grouped_xauc
      for (int r = 0; r < world; ++r) EXPECT_EQ(group.calls(r), 1 + gathers);
    }
  }
}

TEST(MetricDistributed, StatesAddAndGatherByHand) {
  // Two ranks' kSum states added and kGather values concatenated by hand give one process's
  // value, and the states really differ from one rank's own.
  for (const Case& c : AllMetricCases()) {
    Rows rows = MakeRows(800, c.width, c.kind, 7);
    MetricSpec all = Build(c.config, c.num_class);
    MetricSpec a = Build(c.config, c.num_class), b = Build(c.config, c.num_class);
    Feed(all.metric.get(), rows, 100);
    Feed(a.metric.get(), rows.Slice(0, 300), 100);
    Feed(b.metric.get(), rows.Slice(300, 800), 100);
    const double own = a.metric->Compute();
    if (a.metric->combine() == MetricCombine::kSum) {
      std::vector<double> sa, sb;
      a.metric->AppendState(&sa);
      b.metric->AppendState(&sb);
      ASSERT_EQ(sa.size(), sb.size()) << c.name;
      ASSERT_FALSE(sa.empty()) << c.name;
      for (size_t i = 0; i < sa.size(); ++i) sa[i] += sb[i];
      size_t offset = 0;
      a.metric->LoadState(sa, &offset);
      EXPECT_EQ(offset, sa.size()) << c.name;
    } else {
      a.metric->LoadGathered({a.metric->SerializeValues(), b.metric->SerializeValues()});
    }
    ExpectSameValue(a.metric->Compute(), all.metric->Compute(), a.metric->combine(), c.name);
    EXPECT_NE(own, all.metric->Compute()) << c.name;
  }
}

TEST(MetricDistributed, NoCommunicatorMeansNoChange) {
  Rows rows = MakeRows(500, 1, LabelKind::kRegression, 3);
  protos::MetricConfig config;
  config.mutable_xauc()->set_sample_ratio(0.5f);
  MetricSpec spec = Build(config);
  Feed(spec.metric.get(), rows, 64);
  const double before = spec.metric->Compute();
  CombineOverRanks({spec.metric.get()}, nullptr);
  EXPECT_EQ(spec.metric->Compute(), before);
  LocalCollectives local;
  CombineOverRanks({spec.metric.get()}, &local);
  EXPECT_EQ(spec.metric->Compute(), before);
}

// ---------------------------------------------------------------- TrainMetric

// DecayAUC and TrainMetricWrapper as TorchEasyRec has them, on a torchmetrics-layout
// confusion matrix per threshold.
class ReferenceDecayAuc {
 public:
  ReferenceDecayAuc(int thresholds, double rate, int64_t step)
      : thresholds_(thresholds),
        rate_(rate),
        step_(step),
        confmat_(thresholds, {0, 0, 0, 0}),
        buffer_(thresholds, {0, 0, 0, 0}) {}
  void Update(const std::vector<float>& probs, const std::vector<float>& labels) {
    auto add = testing::NaiveConfmat(probs, labels, thresholds_);
    for (int k = 0; k < thresholds_; ++k) {
      for (int e = 0; e < 4; ++e) buffer_[k][e] += add[k][e];
    }
    if (++count_ % step_ != 0) return;
    bool any = false;
    for (const auto& c : confmat_) {
      for (double v : c) any |= v > 0;
    }
    for (int k = 0; k < thresholds_; ++k) {
      for (int e = 0; e < 4; ++e) {
        confmat_[k][e] = any ? rate_ * confmat_[k][e] + (1 - rate_) * buffer_[k][e]
                             : confmat_[k][e] + buffer_[k][e];
        buffer_[k][e] = 0;
      }
    }
    value_ = testing::NaiveBinnedAucFromConfmat(confmat_);
  }
  double value() const { return value_; }

 private:
  int thresholds_;
  double rate_;
  int64_t step_;
  std::vector<std::array<double, 4>> confmat_, buffer_;
  int64_t count_ = 0;
  double value_ = 0.0;
};

TEST(TrainMetric, DecayAucMatchesHandRolledWrapper) {
  protos::TrainMetricConfig config;
  config.mutable_auc()->set_thresholds(40);
  TrainMetric metric(BuildTrain(config), 0.7, 3);
  ReferenceDecayAuc reference(40, 0.7, 3);
  for (int step = 0; step < 14; ++step) {
    // Drifting data so that the decay visibly matters.
    Rows rows = MakeRows(200, 1, LabelKind::kBinary, 50 + step);
    if (step >= 6) {
      for (float& p : rows.preds) p = 1.0f - p;
    }
    metric.Update(rows.Input(), nullptr);
    reference.Update(rows.preds, rows.labels);
    EXPECT_NEAR(metric.value(), reference.value(), 1e-12) << step;
    if (step < 2) EXPECT_EQ(metric.value(), 0.0);
  }
  EXPECT_EQ(metric.steps(), 14);
  EXPECT_LT(metric.value(), 0.5);  // the decayed state follows the flipped predictions
  EXPECT_GT(metric.value(), 0.0);
}

TEST(TrainMetric, OtherMetricsDecayTheirValue) {
  protos::TrainMetricConfig mae_config;
  mae_config.mutable_mean_absolute_error();
  TrainMetric metric(BuildTrain(mae_config), 0.6, 2);
  double ref_value = 0.0, abs_sum = 0.0;
  int64_t rows_since = 0;
  for (int step = 1; step <= 9; ++step) {
    Rows rows = MakeRows(50 + step, 1, LabelKind::kRegression, step);
    metric.Update(rows.Input(), nullptr);
    for (int64_t i = 0; i < rows.size(); ++i) {
      abs_sum += std::fabs(static_cast<double>(rows.preds[i]) - rows.labels[i]);
    }
    rows_since += rows.size();
    if (step % 2 == 0) {
      double v = abs_sum / rows_since;
      ref_value = ref_value == 0.0 ? v : 0.6 * ref_value + 0.4 * v;
      abs_sum = 0.0;
      rows_since = 0;
    }
    EXPECT_NEAR(metric.value(), ref_value, 1e-12) << step;
  }
  EXPECT_GT(metric.value(), 0.0);
  EXPECT_TZREC_ERROR(TrainMetric(BuildTrain(mae_config), 0.9, 0, "model_config.train_metrics[0]"),
                     "model_config.train_metrics[0].decay_step: must be >= 1");
}

// Two ranks, each a half of every global batch, give one process's decayed values; the
// collectives run on decay steps only.
TEST(TrainMetric, TwoRanksEqualOneProcess) {
  struct TrainCase {
    std::string name;
    protos::TrainMetricConfig config;
    LabelKind kind;
    int width;
    int num_class;
  };
  std::vector<TrainCase> cases(5);
  cases[0] = {"auc", {}, LabelKind::kBinary, 1, 1};
  cases[0].config.mutable_auc()->set_thresholds(64);
  cases[1] = {"mean_squared_error", {}, LabelKind::kRegression, 1, 1};
  cases[1].config.mutable_mean_squared_error();
  cases[2] = {"accuracy", {}, LabelKind::kClass, 3, 3};
  cases[2].config.mutable_accuracy();
  cases[3] = {"xauc", {}, LabelKind::kRegression, 1, 1};
  cases[3].config.mutable_xauc()->set_sample_ratio(0.1f);
  cases[4] = {"recall_at_k", {}, LabelKind::kRelevance, 6, 1};
  cases[4].config.mutable_recall_at_k()->set_top_k(2);
  const int steps = 12, decay_step = 4, world = 2;
  const double rate = 0.8;
  for (const TrainCase& c : cases) {
    std::vector<Rows> batches;
    for (int s = 0; s < steps; ++s) {
      batches.push_back(MakeRows(120, c.width, c.kind, 1000 + s));
      if (c.name == "auc" && s >= 5) {
        for (float& p : batches.back().preds) p = 1.0f - p;
      }
    }
    TrainMetric single(BuildTrain(c.config, c.num_class), rate, decay_step);
    std::vector<double> want;
    for (const Rows& b : batches) {
      single.Update(b.Input(), nullptr);
      want.push_back(single.value());
    }
    ThreadGroup group(world);
    std::vector<std::vector<double>> got(world);
    RunRanks(&group, [&](int rank, Collectives* comm) {
      TrainMetric metric(BuildTrain(c.config, c.num_class), rate, decay_step);
      for (const Rows& b : batches) {
        Rows half = rank == 0 ? b.Slice(0, 50) : b.Slice(50, 120);
        metric.Update(half.Input(), comm);
        got[rank].push_back(metric.value());
      }
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(group.calls(r), steps / decay_step) << c.name;
      for (int s = 0; s < steps; ++s) {
        EXPECT_NEAR(got[r][s], want[s], 1e-12) << c.name << " rank " << r << " step " << s;
      }
    }
    EXPECT_NE(want.back(), 0.0) << c.name;
  }
}

}  // namespace
}  // namespace tzrec
