// Binned AUC (TorchEasyRec's `auc`) against the exact sort-based AUC.
#include <gtest/gtest.h>

#include <random>

#include "tzrec/metrics/auc.h"

namespace tzrec {
namespace {

TEST(ExactAuc, HandComputedCases) {
  EXPECT_DOUBLE_EQ(ExactAuc({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}), 0.75);
  EXPECT_DOUBLE_EQ(ExactAuc({0.5f, 0.5f}, {0, 1}), 0.5);  // ties count one half
  EXPECT_DOUBLE_EQ(ExactAuc({0.9f, 0.1f}, {1, 0}), 1.0);
  EXPECT_DOUBLE_EQ(ExactAuc({0.9f, 0.1f}, {0, 1}), 0.0);
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

}  // namespace
}  // namespace tzrec
