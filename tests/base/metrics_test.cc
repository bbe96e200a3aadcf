// Evaluation metrics against naive references on random data and hand-computed cases, and
// their config errors. Distributed equivalence and train metrics: metrics_dist_test.cc.
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <set>

#include "base/metric_test_util.h"
#include "test_util.h"
#include "tzrec/metrics/auc.h"
#include "tzrec/metrics/xauc.h"

namespace tzrec {
namespace {

using testing::Build;
using testing::BuildTrain;
using testing::Feed;
using testing::Rows;

// Binary rows: labels ~ Bernoulli(positive_rate), probs a noisy sigmoid of the label; some
// probs rounded to 2 decimals so that ties (and threshold hits) occur.
Rows BinaryRows(int64_t n, uint32_t seed, float positive_rate = 0.3f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  Rows rows;
  for (int64_t i = 0; i < n; ++i) {
    float label = uniform(rng) < positive_rate ? 1.0f : 0.0f;
    float p = 1.0f / (1.0f + std::exp(-(1.2f * label - 0.5f + noise(rng))));
    if (i % 3 == 0) p = std::round(p * 100.0f) / 100.0f;
    rows.preds.push_back(p);
    rows.labels.push_back(label);
  }
  return rows;
}

// Regression rows: label ~ exp(normal), pred correlated with it; some exact ties.
Rows RegressionRows(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  Rows rows;
  for (int64_t i = 0; i < n; ++i) {
    float label = std::exp(noise(rng));
    if (i % 5 == 0) label = std::round(label);
    float pred = 0.7f * label + 0.5f * noise(rng);
    if (i % 7 == 0) pred = std::round(pred * 4.0f) / 4.0f;
    rows.preds.push_back(pred);
    rows.labels.push_back(label);
  }
  return rows;
}

// ---------------------------------------------------------------- exact and binned AUC

TEST(ExactAuc, HandComputedCases) {
  EXPECT_DOUBLE_EQ(ExactAuc({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}), 0.75);
  EXPECT_DOUBLE_EQ(ExactAuc({0.5f, 0.5f}, {0, 1}), 0.5);  // ties count one half
  EXPECT_DOUBLE_EQ(ExactAuc({0.9f, 0.1f}, {1, 0}), 1.0);
  EXPECT_DOUBLE_EQ(ExactAuc({0.9f, 0.1f}, {0, 1}), 0.0);
  EXPECT_DOUBLE_EQ(ExactAuc({0.3f, 0.3f, 0.3f}, {1, 1, 1}), 0.0);  // one class only
}

TEST(ExactAuc, MatchesPairCountingWithTies) {
  Rows rows = BinaryRows(600, 11);
  EXPECT_NEAR(ExactAuc(rows.preds, rows.labels), testing::NaivePairAuc(rows.preds, rows.labels),
              1e-12);
}

TEST(ExactAuc, NanPredictionGivesNanInsteadOfHanging) {
  std::vector<float> probs = {0.2f, std::nanf(""), 0.7f, std::nanf(""), 0.4f};
  EXPECT_TRUE(std::isnan(ExactAuc(probs, {0, 1, 1, 0, 1})));
}

TEST(BinnedAuc, MatchesExactAucWithinBinResolution) {
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (int thresholds : {200, 1000}) {
    std::vector<float> probs, labels;
    BinnedAuc auc(thresholds);
    for (int batch = 0; batch < 5; ++batch) {
      std::vector<float> p, l;
      for (int i = 0; i < 4000; ++i) {
        float label = uniform(rng) < 0.3f ? 1.0f : 0.0f;
        float logit = 1.2f * label + noise(rng);
        p.push_back(1.0f / (1.0f + std::exp(-logit)));
        l.push_back(label);
      }
      auc.Update(p.data(), l.data(), static_cast<int64_t>(p.size()));
      probs.insert(probs.end(), p.begin(), p.end());
      labels.insert(labels.end(), l.begin(), l.end());
    }
    double exact = ExactAuc(probs, labels);
    EXPECT_GT(exact, 0.7);
    EXPECT_NEAR(auc.Compute(), exact, 2.0 / thresholds) << thresholds;
  }
}

TEST(BinnedAuc, PerfectAndCoarseAndMergeAndReset) {
  BinnedAuc auc(200);
  std::vector<float> p = {0.1f, 0.2f, 0.8f, 0.9f}, l = {0, 0, 1, 1};
  auc.Update(p.data(), l.data(), 4);
  EXPECT_NEAR(auc.Compute(), 1.0, 1e-12);
  // With two thresholds {0, 1} every prediction in (0,1) falls in one bin: AUC 0.5.
  BinnedAuc coarse(2);
  coarse.Update(p.data(), l.data(), 4);
  EXPECT_NEAR(coarse.Compute(), 0.5, 1e-12);
  BinnedAuc other(200);
  std::vector<float> p2 = {0.85f}, l2 = {0};
  other.Update(p2.data(), l2.data(), 1);
  auc.Merge(other);
  EXPECT_NEAR(auc.Compute(), ExactAuc({0.1f, 0.2f, 0.8f, 0.9f, 0.85f}, {0, 0, 1, 1, 0}), 1e-12);
  auc.Reset();
  EXPECT_EQ(auc.Compute(), 0.0);
}

TEST(MetricAuc, MatchesNaiveTorchmetricsBinnedAuroc) {
  for (int thresholds : {2, 7, 200}) {
    Rows rows = BinaryRows(3000, 5 + thresholds);
    rows.preds[0] = 0.0f;  // the edges of the threshold range
    rows.preds[1] = 1.0f;
    rows.preds[2] = std::nanf("");  // below every threshold, as prob >= t is false
    protos::MetricConfig config;
    config.mutable_auc()->set_thresholds(thresholds);
    MetricSpec spec = Build(config);
    EXPECT_EQ(spec.prediction, "probs");
    EXPECT_EQ(spec.label_width, 1);
    EXPECT_EQ(spec.metric->combine(), MetricCombine::kSum);
    Feed(spec.metric.get(), rows, 333);
    EXPECT_NEAR(spec.metric->Compute(),
                testing::NaiveBinnedAuc(rows.preds, rows.labels, thresholds), 1e-12)
        << thresholds;
  }
}

TEST(MetricAuc, ReadsProbs1ForTwoClassesAndRejectsMore) {
  protos::MetricConfig config;
  config.mutable_auc();
  EXPECT_EQ(Build(config, 2).prediction, "probs1");
  EXPECT_TZREC_ERROR(Build(config, 3),
                     "model_config.metrics[0].auc: num_class must be <= 2 for auc (got 3)");
  config.mutable_auc()->set_thresholds(1);
  EXPECT_TZREC_ERROR(Build(config), "model_config.metrics[0].auc.thresholds");
}

TEST(MetricAuc, UndefinedIsZero) {
  protos::MetricConfig config;
  config.mutable_auc();
  MetricSpec spec = Build(config);
  EXPECT_EQ(spec.metric->Compute(), 0.0);
  Rows rows;
  rows.preds = {0.2f, 0.9f};
  rows.labels = {1, 1};
  spec.metric->Update(rows.Input());
  EXPECT_EQ(spec.metric->Compute(), 0.0);
}

// ---------------------------------------------------------------- multiclass_auc

Rows MulticlassRows(int64_t n, int num_class, uint32_t seed, int missing_class = -1) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  std::uniform_int_distribution<int> cls(0, num_class - 1);
  Rows rows;
  rows.pred_width = num_class;
  for (int64_t i = 0; i < n; ++i) {
    int label = cls(rng);
    if (label == missing_class) label = (label + 1) % num_class;
    std::vector<float> logits(num_class);
    float total = 0.0f;
    for (int c = 0; c < num_class; ++c) {
      logits[c] = std::exp((c == label ? 1.0f : 0.0f) + noise(rng));
      total += logits[c];
    }
    for (int c = 0; c < num_class; ++c) rows.preds.push_back(logits[c] / total);
    rows.labels.push_back(static_cast<float>(label));
  }
  return rows;
}

double NaiveMulticlassAuc(const Rows& rows, int num_class, int thresholds, bool weighted) {
  double sum = 0.0, weight_sum = 0.0;
  for (int c = 0; c < num_class; ++c) {
    std::vector<float> probs, is_c;
    for (int64_t i = 0; i < rows.size(); ++i) {
      probs.push_back(rows.preds[i * num_class + c]);
      is_c.push_back(rows.labels[i] == c ? 1.0f : 0.0f);
    }
    double auc = testing::NaiveBinnedAuc(probs, is_c, thresholds);
    double weight = weighted ? std::accumulate(is_c.begin(), is_c.end(), 0.0) : 1.0;
    sum += auc * weight;
    weight_sum += weight;
  }
  return sum / weight_sum;
}

TEST(MetricMulticlassAuc, MacroAndWeightedMatchPerClassBinnedAucs) {
  for (bool weighted : {false, true}) {
    for (int missing : {-1, 2}) {  // class 2 without rows: AUC 0, kept (torchmetrics 1.0.3)
      const int num_class = 4;
      Rows rows = MulticlassRows(2000, num_class, weighted * 10 + missing + 3, missing);
      protos::MetricConfig config;
      config.mutable_multiclass_auc()->set_thresholds(50);
      config.mutable_multiclass_auc()->set_average(weighted ? "weighted" : "macro");
      MetricSpec spec = Build(config, num_class);
      EXPECT_EQ(spec.prediction, "probs");
      Feed(spec.metric.get(), rows, 300);
      const double expected = NaiveMulticlassAuc(rows, num_class, 50, weighted);
      EXPECT_NEAR(spec.metric->Compute(), expected, 1e-12) << weighted << missing;
      if (missing < 0) EXPECT_GT(expected, 0.6);
    }
  }
}

TEST(MetricMulticlassAuc, ConfigErrors) {
  protos::MetricConfig config;
  config.mutable_multiclass_auc()->set_average("micro");
  EXPECT_TZREC_ERROR(Build(config, 3), "model_config.metrics[0].multiclass_auc.average");
  config.mutable_multiclass_auc()->set_average("macro");
  EXPECT_TZREC_ERROR(Build(config, 1),
                     "model_config.metrics[0].multiclass_auc: num_class must be >= 2");
  MetricSpec spec = Build(config, 3);
  Rows rows;
  rows.pred_width = 3;
  rows.preds = {0.2f, 0.3f, 0.5f};
  rows.labels = {3.0f};
  EXPECT_TZREC_ERROR(spec.metric->Update(rows.Input()), "label 3 is not a class index");
}

// ---------------------------------------------------------------- recall_at_k

TEST(MetricRecallAtK, MatchesNaiveTopK) {
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> score(0, 20);  // integer scores: many ties
  std::bernoulli_distribution relevant(0.2);
  const int n = 12;
  Rows rows;
  rows.pred_width = rows.label_width = n;
  for (int r = 0; r < 500; ++r) {
    for (int c = 0; c < n; ++c) {
      rows.preds.push_back(static_cast<float>(score(rng)));
      rows.labels.push_back(relevant(rng) ? 1.0f : 0.0f);
    }
  }
  for (int k : {1, 5, 12, 20}) {
    double hits = 0.0, total = 0.0;
    for (int64_t r = 0; r < rows.size(); ++r) {
      std::vector<int> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return rows.preds[r * n + a] > rows.preds[r * n + b]; });
      for (int i = 0; i < std::min(k, n); ++i) hits += rows.labels[r * n + order[i]];
      for (int c = 0; c < n; ++c) total += rows.labels[r * n + c];
    }
    protos::MetricConfig config;
    config.mutable_recall_at_k()->set_top_k(k);
    MetricSpec spec = Build(config);
    EXPECT_EQ(spec.prediction, "similarity");
    EXPECT_EQ(spec.label_width, 0);
    Feed(spec.metric.get(), rows, 64);
    EXPECT_NEAR(spec.metric->Compute(), hits / total, 1e-12) << k;
    if (k < n) EXPECT_LT(spec.metric->Compute(), 1.0);
  }
}

TEST(MetricRecallAtK, HandComputed) {
  protos::MetricConfig config;
  config.mutable_recall_at_k()->set_top_k(2);
  MetricSpec spec = Build(config);
  Rows rows;
  rows.pred_width = rows.label_width = 4;
  rows.preds = {0.9f, 0.1f, 0.5f, 0.7f,   // top 2: columns 0, 3
                0.2f, 0.3f, 0.3f, 0.1f};  // top 2: columns 1, 2 (tie)
  rows.labels = {0, 1, 0, 1,              // 1 of 2 relevant found
                 1, 0, 1, 0};             // 1 of 2
  spec.metric->Update(rows.Input());
  EXPECT_DOUBLE_EQ(spec.metric->Compute(), 0.5);
  config.mutable_recall_at_k()->set_top_k(0);
  EXPECT_TZREC_ERROR(Build(config), "model_config.metrics[0].recall_at_k.top_k");
}

// ---------------------------------------------------------------- regression errors

TEST(MetricRegression, MaeAndMseMatchNaive) {
  Rows rows = RegressionRows(1000, 4);
  double abs_sum = 0.0, sq_sum = 0.0;
  for (int64_t i = 0; i < rows.size(); ++i) {
    double d = static_cast<double>(rows.preds[i]) - rows.labels[i];
    abs_sum += std::fabs(d);
    sq_sum += d * d;
  }
  protos::MetricConfig mae, mse;
  mae.mutable_mean_absolute_error();
  mse.mutable_mean_squared_error();
  MetricSpec a = Build(mae), s = Build(mse);
  EXPECT_EQ(a.prediction, "y");
  EXPECT_EQ(s.prediction, "y");
  Feed(a.metric.get(), rows, 77);
  Feed(s.metric.get(), rows, 77);
  EXPECT_NEAR(a.metric->Compute(), abs_sum / 1000, 1e-12);
  EXPECT_NEAR(s.metric->Compute(), sq_sum / 1000, 1e-12);
  EXPECT_TZREC_ERROR(Build(mae, 2), "model_config.metrics[0].mean_absolute_error: num_class");
  Rows hand;
  hand.preds = {1.0f, 2.0f, 4.0f};
  hand.labels = {2.0f, 2.0f, 1.0f};
  a.metric->Reset();
  s.metric->Reset();
  a.metric->Update(hand.Input());
  s.metric->Update(hand.Input());
  EXPECT_DOUBLE_EQ(a.metric->Compute(), 4.0 / 3.0);
  EXPECT_DOUBLE_EQ(s.metric->Compute(), 10.0 / 3.0);
}

// ---------------------------------------------------------------- accuracy

TEST(MetricAccuracy, BinaryUsesStrictThreshold) {
  protos::MetricConfig config;
  config.mutable_accuracy()->set_threshold(0.5f);
  MetricSpec spec = Build(config);
  EXPECT_EQ(spec.prediction, "probs");
  Rows rows;
  rows.preds = {0.5f, 0.51f, 0.2f, 0.9f};
  rows.labels = {0, 1, 1, 0};  // 0.5 is predicted 0: correct; then correct, wrong, wrong
  spec.metric->Update(rows.Input());
  EXPECT_DOUBLE_EQ(spec.metric->Compute(), 0.5);

  Rows random = BinaryRows(2000, 8);
  config.mutable_accuracy()->set_threshold(0.4f);
  MetricSpec spec2 = Build(config);
  Feed(spec2.metric.get(), random, 100);
  double correct = 0.0;
  for (int64_t i = 0; i < random.size(); ++i) {
    correct += ((random.preds[i] > 0.4f ? 1.0f : 0.0f) == random.labels[i]) ? 1.0 : 0.0;
  }
  EXPECT_NEAR(spec2.metric->Compute(), correct / 2000, 1e-12);
}

TEST(MetricAccuracy, MulticlassTopKMatchesNaive) {
  const int num_class = 6;
  Rows rows = MulticlassRows(3000, num_class, 21);
  // Rounded probs tie now and then; ties rank the lower class first.
  for (float& p : rows.preds) p = std::round(p * 20.0f) / 20.0f;
  for (int k : {1, 2, 6}) {
    double correct = 0.0;
    for (int64_t i = 0; i < rows.size(); ++i) {
      std::vector<int> order(num_class);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return rows.preds[i * num_class + a] > rows.preds[i * num_class + b];
      });
      for (int j = 0; j < k; ++j) correct += order[j] == rows.labels[i] ? 1.0 : 0.0;
    }
    protos::MetricConfig config;
    config.mutable_accuracy()->set_top_k(k);
    MetricSpec spec = Build(config, num_class);
    Feed(spec.metric.get(), rows, 128);
    EXPECT_NEAR(spec.metric->Compute(), correct / rows.size(), 1e-12) << k;
    if (k == num_class) EXPECT_DOUBLE_EQ(spec.metric->Compute(), 1.0);
  }
  protos::MetricConfig config;
  config.mutable_accuracy()->set_top_k(7);
  EXPECT_TZREC_ERROR(Build(config, num_class), "model_config.metrics[0].accuracy.top_k");
  EXPECT_NO_THROW(Build(config, 1));  // the binary task ignores top_k, as torchmetrics does
}

// ---------------------------------------------------------------- grouped_auc

Rows GroupedBinaryRows(int64_t n, int groups, uint32_t seed) {
  Rows rows = BinaryRows(n, seed, 0.4f);
  std::mt19937 rng(seed + 1);
  std::uniform_int_distribution<int64_t> key(-groups / 2, groups - groups / 2);
  for (int64_t i = 0; i < n; ++i) rows.keys.push_back(key(rng) * 7919);
  // Single-row groups: one class only, left out of the mean.
  for (int64_t i = 0; i < n / 20; ++i) rows.keys[i] = 1000000 + i;
  return rows;
}

double NaiveGroupedAuc(const Rows& rows) {
  std::set<int64_t> keys(rows.keys.begin(), rows.keys.end());
  double sum = 0.0;
  int count = 0;
  for (int64_t key : keys) {
    std::vector<float> p, l;
    double label_sum = 0.0;
    for (int64_t i = 0; i < rows.size(); ++i) {
      if (rows.keys[i] != key) continue;
      p.push_back(rows.preds[i]);
      l.push_back(rows.labels[i]);
      label_sum += rows.labels[i];
    }
    double mean = label_sum / p.size();
    if (mean > 0.0 && mean < 1.0) {
      sum += testing::NaivePairAuc(p, l);
      ++count;
    }
  }
  return count > 0 ? sum / count : std::nan("");
}

TEST(MetricGroupedAuc, MatchesPerGroupPairCounting) {
  Rows rows = GroupedBinaryRows(3000, 150, 13);
  protos::MetricConfig config;
  config.mutable_grouped_auc()->set_grouping_key("user_id");
  MetricSpec spec = Build(config);
  EXPECT_EQ(spec.grouping_key, "user_id");
  EXPECT_EQ(spec.prediction, "probs");
  EXPECT_EQ(spec.metric->combine(), MetricCombine::kGather);
  Feed(spec.metric.get(), rows, 256);
  const double expected = NaiveGroupedAuc(rows);
  EXPECT_NEAR(spec.metric->Compute(), expected, 1e-12);
  // Differs from the AUC of all rows together: the grouping matters.
  EXPECT_GT(std::fabs(expected - ExactAuc(rows.preds, rows.labels)), 1e-6);
}

TEST(MetricGroupedAuc, HandComputedAndUndefined) {
  protos::MetricConfig config;
  config.mutable_grouped_auc()->set_grouping_key("user_id");
  MetricSpec spec = Build(config, 2);
  EXPECT_EQ(spec.prediction, "probs1");
  Rows rows;
  // group 1: AUC 1; group 2: AUC 0.5 (tie); group 3: one class only, left out.
  rows.preds = {0.9f, 0.1f, 0.4f, 0.4f, 0.3f, 0.8f};
  rows.labels = {1, 0, 1, 0, 1, 1};
  rows.keys = {1, 1, 2, 2, 3, 3};
  spec.metric->Update(rows.Input());
  EXPECT_DOUBLE_EQ(spec.metric->Compute(), 0.75);
  spec.metric->Reset();
  EXPECT_TRUE(std::isnan(spec.metric->Compute()));
  spec.metric->Update(rows.Input(4, 6));
  EXPECT_TRUE(std::isnan(spec.metric->Compute()));
  EXPECT_TZREC_ERROR(Build(config, 3), "model_config.metrics[0].grouped_auc: num_class");
  config.mutable_grouped_auc()->set_grouping_key("");
  EXPECT_TZREC_ERROR(Build(config), "model_config.metrics[0].grouped_auc.grouping_key");
}

// ---------------------------------------------------------------- xauc

TEST(MetricXauc, ExactXaucMatchesAllPairs) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    Rows rows = RegressionRows(400, seed);
    if (seed == 3) {
      rows.preds[5] = std::nanf("");
      rows.labels[9] = std::nanf("");
    }
    EXPECT_NEAR(ExactXauc(rows.preds.data(), rows.labels.data(), rows.preds.size()),
                testing::NaiveXauc(rows.preds.data(), rows.labels.data(), rows.preds.size()), 1e-12)
        << seed;
  }
  float p[] = {1, 2, 3}, t[] = {1, 3, 2};  // pairs (0,1) (0,2) agree, (1,2) does not
  EXPECT_DOUBLE_EQ(ExactXauc(p, t, 3), 2.0 / 3.0);
  EXPECT_TRUE(std::isnan(ExactXauc(p, t, 1)));
}

TEST(MetricXauc, InBatchIsTheMeanOfBatchXaucs) {
  Rows rows = RegressionRows(1000, 6);
  protos::MetricConfig config;
  config.mutable_xauc()->set_in_batch(true);
  MetricSpec spec = Build(config);
  EXPECT_EQ(spec.prediction, "y");
  EXPECT_EQ(spec.metric->combine(), MetricCombine::kSum);
  // Batches of 300: the last has 100 rows; a final single row has no pair and is skipped.
  Feed(spec.metric.get(), rows, 300);
  Rows one = rows.Slice(0, 1);
  spec.metric->Update(one.Input());
  double sum = 0.0;
  for (int64_t b = 0; b < 1000; b += 300) {
    sum += testing::NaiveXauc(rows.preds.data() + b, rows.labels.data() + b,
                              std::min<int64_t>(300, 1000 - b));
  }
  EXPECT_NEAR(spec.metric->Compute(), sum / 4, 1e-12);
}

TEST(MetricXauc, SampledIsCloseToExactAndIndependentOfOrder) {
  Rows rows = RegressionRows(3000, 7);
  const double exact = testing::NaiveXauc(rows.preds.data(), rows.labels.data(), 3000);
  protos::MetricConfig config;
  config.mutable_xauc()->set_sample_ratio(0.2f);  // ~900k pairs: standard error ~5e-4
  MetricSpec spec = Build(config);
  EXPECT_EQ(spec.metric->combine(), MetricCombine::kGather);
  Feed(spec.metric.get(), rows, 500);
  const double value = spec.metric->Compute();
  EXPECT_NEAR(value, exact, 4e-3);
  EXPECT_NE(value, exact);  // it samples
  // Shuffled rows in other batches: the same value, bit for bit.
  std::vector<int64_t> perm(3000);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(1));
  Rows shuffled;
  for (int64_t i : perm) shuffled.Append(rows, i);
  MetricSpec spec2 = Build(config);
  Feed(spec2.metric.get(), shuffled, 77);
  EXPECT_EQ(spec2.metric->Compute(), value);
}

TEST(MetricXauc, PairCountsAndMaxPairs) {
  // Two rows have one pair: any number of samples gives its exact value.
  protos::MetricConfig config;
  config.mutable_xauc()->set_sample_ratio(1.0f);
  MetricSpec spec = Build(config);
  Rows rows;
  rows.preds = {1.0f, 2.0f};
  rows.labels = {5.0f, 7.0f};
  spec.metric->Update(rows.Input());
  EXPECT_DOUBLE_EQ(spec.metric->Compute(), 1.0);
  // The default ratio on 10 rows gives int(45 * 1e-3) = 0 pairs: NaN, as torch's mean of none.
  Rows ten = RegressionRows(10, 1);
  MetricSpec small = Build([] {
    protos::MetricConfig c;
    c.mutable_xauc();
    return c;
  }());
  small.metric->Update(ten.Input());
  EXPECT_TRUE(std::isnan(small.metric->Compute()));
  // max_pairs: a multiple of 1/max_pairs, and it must stay below n(n-1)/2.
  config.mutable_xauc()->set_max_pairs(7);
  MetricSpec capped = Build(config);
  capped.metric->Update(ten.Input());
  const double v = capped.metric->Compute();
  EXPECT_NEAR(v * 7, std::round(v * 7), 1e-9);
  config.mutable_xauc()->set_max_pairs(45);
  MetricSpec too_many = Build(config);
  too_many.metric->Update(ten.Input());
  EXPECT_TZREC_ERROR(too_many.metric->Compute(), "model_config.metrics[0].xauc.max_pairs");
}

TEST(MetricXauc, ConfigErrors) {
  protos::MetricConfig config;
  config.mutable_xauc()->set_sample_ratio(0.0f);
  EXPECT_TZREC_ERROR(Build(config), "model_config.metrics[0].xauc.sample_ratio: must be in (0, 1]");
  config.mutable_xauc()->set_sample_ratio(1.5f);
  EXPECT_TZREC_ERROR(Build(config), "model_config.metrics[0].xauc.sample_ratio");
  config.mutable_xauc()->set_sample_ratio(1.0f);
  EXPECT_TZREC_ERROR(Build(config, 2), "model_config.metrics[0].xauc: num_class must be 1");
}

// ---------------------------------------------------------------- grouped_xauc

TEST(MetricGroupedXauc, PairGroupsAreExactAndWeightedBySize) {
  // Groups of two rows have one pair, so sampling is exact; single rows are left out.
  protos::MetricConfig config;
  config.mutable_grouped_xauc()->set_grouping_key("user_id");
  MetricSpec spec = Build(config);
  EXPECT_EQ(spec.grouping_key, "user_id");
  EXPECT_EQ(spec.prediction, "y");
  EXPECT_EQ(spec.metric->combine(), MetricCombine::kGather);
  Rows rows;
  rows.preds = {1, 2, 3, 2, 5, 9, 9};
  rows.labels = {1, 2, 1, 3, 4, 1, 2};
  rows.keys = {10, 10, 20, 20, 30, 40, 40};  // agree, disagree, (single), tie
  spec.metric->Update(rows.Input());
  EXPECT_DOUBLE_EQ(spec.metric->Compute(), 1.0 / 3.0);

  Rows many = RegressionRows(2000, 3);
  double correct = 0.0, weight = 0.0;
  for (int64_t i = 0; i < many.size(); ++i) many.keys.push_back(i / 2);
  many.keys.back() = -1;  // a single-row group
  for (int64_t i = 0; i + 1 < many.size() - 1; i += 2) {
    correct += 2.0 * testing::NaiveXauc(&many.preds[i], &many.labels[i], 2);
    weight += 2.0;
  }
  MetricSpec spec2 = Build(config);
  Feed(spec2.metric.get(), many, 99);
  EXPECT_NEAR(spec2.metric->Compute(), correct / weight, 1e-12);
}

TEST(MetricGroupedXauc, LargeGroupsAreCloseToExact) {
  Rows rows = RegressionRows(4000, 12);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int64_t> key(0, 39);
  for (int64_t i = 0; i < rows.size(); ++i) rows.keys.push_back(key(rng));
  double weighted = 0.0;
  for (int64_t k = 0; k < 40; ++k) {
    std::vector<float> p, l;
    for (int64_t i = 0; i < rows.size(); ++i) {
      if (rows.keys[i] == k) {
        p.push_back(rows.preds[i]);
        l.push_back(rows.labels[i]);
      }
    }
    weighted += testing::NaiveXauc(p.data(), l.data(), p.size()) * p.size();
  }
  protos::MetricConfig config;
  config.mutable_grouped_xauc()->set_grouping_key("g");
  config.mutable_grouped_xauc()->set_max_pairs_per_group(2000);
  MetricSpec spec = Build(config);
  Feed(spec.metric.get(), rows, 512);
  EXPECT_NEAR(spec.metric->Compute(), weighted / 4000, 0.01);
  config.mutable_grouped_xauc()->set_grouping_key("");
  EXPECT_TZREC_ERROR(Build(config), "model_config.metrics[0].grouped_xauc.grouping_key");
}

// ---------------------------------------------------------------- normalized_entropy

TEST(MetricNormalizedEntropy, MatchesFormula) {
  Rows rows = BinaryRows(2000, 17);
  rows.preds[0] = 0.0f;  // log clamped to -100, as torch's BCE
  rows.labels[0] = 1.0f;
  rows.preds[1] = 1.0f;
  rows.labels[1] = 1.0f;
  double ce = 0.0, s = 0.0;
  for (int64_t i = 0; i < rows.size(); ++i) {
    double p = rows.preds[i], y = rows.labels[i];
    ce += -(y * std::max(std::log(p), -100.0) + (1 - y) * std::max(std::log(1 - p), -100.0));
    s += y;
  }
  const double n = 2000, m = s / n;
  const double expected = ce / -(s * std::log(m) + (n - s) * std::log(1 - m));
  protos::MetricConfig config;
  config.mutable_normalized_entropy();
  MetricSpec spec = Build(config);
  EXPECT_EQ(spec.prediction, "probs");
  Feed(spec.metric.get(), rows, 300);
  EXPECT_NEAR(spec.metric->Compute(), expected, 1e-9 * expected);
  EXPECT_GT(ce, 100.0);
  EXPECT_EQ(Build(config, 2).prediction, "probs1");
  EXPECT_TZREC_ERROR(Build(config, 3), "model_config.metrics[0].normalized_entropy: num_class");
}

TEST(MetricNormalizedEntropy, EtaClampsAllOneLabels) {
  protos::MetricConfig config;
  config.mutable_normalized_entropy()->set_eta(0.01f);
  MetricSpec spec = Build(config);
  Rows rows;
  rows.preds = {0.9f, 0.8f};
  rows.labels = {1, 1};
  spec.metric->Update(rows.Input());
  const double m = 1.0 - static_cast<double>(0.01f);
  const double expected =
      -(std::log(static_cast<double>(0.9f)) + std::log(static_cast<double>(0.8f))) /
      -(2 * std::log(m));
  EXPECT_NEAR(spec.metric->Compute(), expected, 1e-6);
}

// ---------------------------------------------------------------- MeanMetric, registries

TEST(MeanMetric, WeightedMeanAndState) {
  MeanMetric mean;
  EXPECT_EQ(mean.Compute(), 0.0);
  mean.Add(2.0, 1.0);
  mean.Add(5.0, 3.0);
  EXPECT_DOUBLE_EQ(mean.Compute(), 17.0 / 4.0);
  Rows rows;
  rows.preds = {1.0f, 3.0f};
  rows.labels = {0, 0};
  mean.Update(rows.Input());
  EXPECT_DOUBLE_EQ(mean.Compute(), 21.0 / 6.0);
  std::vector<double> state;
  mean.AppendState(&state);
  ASSERT_EQ(state.size(), 2u);
  state[0] *= 2;
  state[1] *= 2;
  size_t offset = 0;
  mean.LoadState(state, &offset);
  EXPECT_EQ(offset, 2u);
  EXPECT_DOUBLE_EQ(mean.Compute(), 21.0 / 6.0);
  mean.Reset();
  EXPECT_EQ(mean.Compute(), 0.0);
}

TEST(MetricRegistry, MembersAndHonouredFieldsMatchTheProtos) {
  const std::vector<std::string> eval = {"accuracy",
                                         "auc",
                                         "grouped_auc",
                                         "grouped_xauc",
                                         "mean_absolute_error",
                                         "mean_squared_error",
                                         "multiclass_auc",
                                         "normalized_entropy",
                                         "recall_at_k",
                                         "xauc"};
  EXPECT_EQ(MetricRegistry().Names(), eval);
  const std::vector<std::string> train = {
      "accuracy", "auc", "mean_absolute_error", "mean_squared_error", "recall_at_k", "xauc"};
  EXPECT_EQ(TrainMetricRegistry().Names(), train);
  EXPECT_EQ(MetricRegistry().Fields("multiclass_auc"),
            (std::vector<std::string>{"thresholds", "average"}));
  EXPECT_TRUE(TrainMetricRegistry().Fields("mean_squared_error").empty());
  // Every member is a oneof member and every honoured field a field of its message.
  for (auto [registry, descriptor] :
       {std::make_pair(&MetricRegistry(), protos::MetricConfig::descriptor()),
        std::make_pair(&TrainMetricRegistry(), protos::TrainMetricConfig::descriptor())}) {
    for (const std::string& name : registry->Names()) {
      const google::protobuf::FieldDescriptor* member = descriptor->FindFieldByName(name);
      ASSERT_NE(member, nullptr) << name;
      ASSERT_NE(member->containing_oneof(), nullptr) << name;
      EXPECT_EQ(member->containing_oneof()->name(), "metric");
      std::set<std::string> fields;
      for (int i = 0; i < member->message_type()->field_count(); ++i) {
        fields.insert(member->message_type()->field(i)->name());
      }
      std::set<std::string> honoured(registry->Fields(name).begin(), registry->Fields(name).end());
      EXPECT_EQ(honoured, fields) << name << ": every field of the message is read";
    }
  }
  const auto* members =
      HonouredFields::Global().OneofMembers("tzrec.protos.MetricConfig", "metric");
  ASSERT_NE(members, nullptr);
  EXPECT_EQ(members->size(), 10u);
  EXPECT_EQ(members->at("xauc"),
            (std::vector<std::string>{"sample_ratio", "max_pairs", "in_batch"}));
  ASSERT_NE(HonouredFields::Global().OneofMembers("tzrec.protos.TrainMetricConfig", "metric"),
            nullptr);
}

TEST(MetricRegistry, BuildMetricNeedsAMember) {
  protos::MetricConfig empty;
  EXPECT_TZREC_ERROR(Build(empty), "model_config.metrics[0]: no metric set");
  protos::TrainMetricConfig train;
  train.mutable_auc()->set_thresholds(50);
  MetricSpec spec = BuildTrain(train);
  EXPECT_TRUE(spec.metric->decays_state());
  EXPECT_EQ(spec.prediction, "probs");
  EXPECT_TZREC_ERROR(BuildTrain(train, 3), "model_config.train_metrics[0].auc: num_class");
  // A factory called without a config reads the proto defaults.
  MetricSpec defaults = MetricRegistry().Get("auc")(MetricContext{});
  EXPECT_EQ(defaults.prediction, "probs");
}

}  // namespace
}  // namespace tzrec
