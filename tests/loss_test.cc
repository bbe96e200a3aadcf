// Losses against their formulas (JRC against TorchEasyRec's masked-matrix formulation, values and
// gradients), task-head weighting, and the Pareto loss weights against closed forms.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <random>

#include "model_test_util.h"
#include "test_util.h"
#include "tzrec/heads/pareto.h"
#include "tzrec/heads/task_head.h"
#include "tzrec/loss/loss.h"
#include "tzrec/protos/loss.pb.h"

namespace tzrec {
namespace {

std::unique_ptr<Loss> MakeLoss(const protos::LossConfig& config, int num_class,
                               std::set<std::string> sparse = {}) {
  const auto* oneof = config.GetDescriptor()->FindOneofByName("loss");
  const auto* which = config.GetReflection()->GetOneofFieldDescriptor(config, oneof);
  LossContext ctx{&config.GetReflection()->GetMessage(config, which), num_class, "loss", sparse};
  return LossRegistry().Get(which->name())(ctx);
}

double Bce(double z, double y) {
  double p = 1.0 / (1.0 + std::exp(-z));
  return -(y * std::log(p) + (1 - y) * std::log(1 - p));
}

Batch EmptyBatch(int64_t rows) { return testing::MakeBatch({}, rows); }

TEST(Losses, BinaryCrossEntropyLabelSmoothingAndWeights) {
  at::Tensor output = torch::tensor({{0.5f}, {-1.0f}, {2.0f}});
  at::Tensor labels = torch::tensor({1.0f, 0.0f, 1.0f});
  at::Tensor weights = torch::tensor({0.5f, 1.0f, 1.5f});
  double z[] = {0.5, -1.0, 2.0}, y[] = {1, 0, 1}, w[] = {0.5, 1.0, 1.5};
  double plain = 0, smoothed = 0, weighted = 0;
  for (int i = 0; i < 3; ++i) {
    plain += Bce(z[i], y[i]) / 3;
    smoothed += Bce(z[i], y[i] * 0.8 + 0.5 * 0.2) / 3;
    weighted += Bce(z[i], y[i]) * w[i] / 3;
  }
  protos::LossConfig config;
  config.mutable_binary_cross_entropy();
  auto loss = MakeLoss(config, 1);
  Predictions p;
  loss->AddPredictions(output, "_t", &p);
  ASSERT_TRUE(p.count("logits_t") && p.count("probs_t"));
  EXPECT_NEAR(p["probs_t"][2].item<double>(), 1 / (1 + std::exp(-2.0)), 1e-6);
  Batch batch = EmptyBatch(3);
  EXPECT_NEAR(loss->Compute(p, "_t", labels, {}, batch).item<double>(), plain, 1e-6);
  EXPECT_NEAR(loss->Compute(p, "_t", labels, weights, batch).item<double>(), weighted, 1e-6);
  config.mutable_binary_cross_entropy()->set_label_smoothing(0.2f);
  EXPECT_NEAR(MakeLoss(config, 1)->Compute(p, "_t", labels, {}, batch).item<double>(), smoothed, 1e-6);
  EXPECT_TZREC_ERROR(MakeLoss(config, 2), "num_class must be 1 for binary_cross_entropy");
}

TEST(Losses, FocalLossMatchesItsFormulaAndDetachesTheFactor) {
  const double gamma = 1.5, alpha = 0.25;
  protos::LossConfig config;
  config.mutable_binary_focal_loss()->set_gamma(gamma);
  config.mutable_binary_focal_loss()->set_alpha(alpha);
  auto loss = MakeLoss(config, 1);
  std::vector<double> z = {0.3, -2.0, 1.1, 0.0}, y = {1, 0, 0, 1};
  at::Tensor output = torch::tensor({0.3, -2.0, 1.1, 0.0}, torch::kDouble).reshape({4, 1}).requires_grad_(true);
  Predictions p;
  loss->AddPredictions(output, "", &p);
  at::Tensor value = loss->Compute(p, "", torch::tensor({1.0, 0.0, 0.0, 1.0}, torch::kDouble), {}, EmptyBatch(4));
  double expected = 0, expected_grad0 = 0;
  for (int i = 0; i < 4; ++i) {
    double pr = 1 / (1 + std::exp(-z[i]));
    double factor = alpha * y[i] * std::pow(1 - pr, gamma) + (1 - alpha) * (1 - y[i]) * std::pow(pr, gamma);
    expected += factor * Bce(z[i], y[i]) / 4;
    // The factor is a constant for the gradient: d/dz = factor * (p - y) / 4.
    if (i == 0) expected_grad0 = factor * (pr - y[i]) / 4;
  }
  EXPECT_NEAR(value.item<double>(), expected, 1e-12);
  value.backward();
  EXPECT_NEAR(output.grad()[0][0].item<double>(), expected_grad0, 1e-12);
  config.mutable_binary_focal_loss()->set_alpha(1.0f);
  EXPECT_TZREC_ERROR(MakeLoss(config, 1), "alpha must be in (0, 1)");
}

TEST(Losses, SoftmaxCrossEntropyWithSmoothingAndProbs1) {
  protos::LossConfig config;
  config.mutable_softmax_cross_entropy()->set_label_smoothing(0.125f);
  auto loss = MakeLoss(config, 3);
  at::Tensor output = torch::tensor({{1.0, 2.0, 0.5}, {-1.0, 0.0, 3.0}}, torch::kDouble);
  Predictions p;
  loss->AddPredictions(output, "", &p);
  EXPECT_FALSE(p.count("probs1"));
  double expected = 0;
  const double eps = 0.125;
  std::vector<int> label = {1, 2};
  for (int r = 0; r < 2; ++r) {
    double norm = 0;
    for (int c = 0; c < 3; ++c) norm += std::exp(output[r][c].item<double>());
    for (int c = 0; c < 3; ++c) {
      double target = (c == label[r] ? 1 - eps : 0) + eps / 3;
      expected -= target * (output[r][c].item<double>() - std::log(norm)) / 2;
    }
  }
  EXPECT_NEAR(loss->Compute(p, "", torch::tensor({1.0, 2.0}), {}, EmptyBatch(2)).item<double>(), expected, 1e-9);
  EXPECT_TZREC_ERROR(loss->Compute(p, "", torch::tensor({1.0, 3.0}), {}, EmptyBatch(2)),
                     "label 3 is not a class index in [0, 3)");
  Predictions two;
  MakeLoss(config, 2)->AddPredictions(output.narrow(1, 0, 2), "_x", &two);
  EXPECT_NEAR(two["probs1_x"][0].item<double>(), std::exp(2.0) / (std::exp(1.0) + std::exp(2.0)), 1e-9);
  EXPECT_TZREC_ERROR(MakeLoss(config, 1), "num_class must be > 1");
}

TEST(Losses, L2LossIsTheMeanSquaredError) {
  protos::LossConfig config;
  config.mutable_l2_loss();
  auto loss = MakeLoss(config, 1);
  Predictions p;
  loss->AddPredictions(torch::tensor({{1.0f}, {3.0f}}), "", &p);
  EXPECT_NEAR(loss->Compute(p, "", torch::tensor({0.5f, 5.0f}), {}, EmptyBatch(2)).item<double>(),
              (0.25 + 4.0) / 2, 1e-6);
  EXPECT_NEAR(loss->Compute(p, "", torch::tensor({0.5f, 5.0f}), torch::tensor({2.0f, 0.0f}), EmptyBatch(2))
                  .item<double>(),
              0.25, 1e-6);
}

// TorchEasyRec's JRC in its reduction="none" form: [rows, B] masked logit matrices.
at::Tensor ReferenceJrc(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& sessions,
                        double alpha) {
  const int64_t b = labels.size(0);
  at::Tensor ce = torch::nn::functional::cross_entropy(
      logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  at::Tensor mask = (sessions.unsqueeze(1) == sessions.unsqueeze(0)).to(logits.scalar_type());
  at::Tensor diag = torch::eye(b, logits.options());
  at::Tensor y = labels.to(logits.scalar_type());
  at::Tensor ge = torch::zeros({b}, logits.options());
  for (int cls : {1, 0}) {
    at::Tensor rows = torch::where(labels == cls)[0];
    if (rows.numel() == 0) continue;
    at::Tensor l = logits.select(1, cls).unsqueeze(0).expand({rows.numel(), b});
    at::Tensor same = mask.index_select(0, rows);
    at::Tensor own = diag.index_select(0, rows);
    at::Tensor y_same_class = (cls == 1 ? y : 1 - y).unsqueeze(0).expand({rows.numel(), b});
    at::Tensor masked = l + ((1 - same) + (1 - own) * y_same_class) * -1e9;
    at::Tensor per_row = torch::nn::functional::cross_entropy(
        masked, rows, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    ge = ge.index_put({rows}, per_row);
  }
  return (alpha * ce + (1 - alpha) * ge).mean();
}

TEST(Losses, JrcMatchesTheMaskedFormulationInValueAndGradient) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 5; ++trial) {
    const int64_t b = 40;
    std::vector<std::vector<int64_t>> session_ids;
    std::vector<float> labels;
    for (int64_t i = 0; i < b; ++i) {
      // Few sessions, some all-positive or all-negative, one row without an id (session 0).
      session_ids.push_back(i == 3 ? std::vector<int64_t>{} : std::vector<int64_t>{static_cast<int64_t>(rng() % 6) + 1});
      labels.push_back(rng() % 3 == 0 ? 1.0f : 0.0f);
    }
    session_ids[5] = {9};  // a session of one row
    testing::SimpleRows rows;
    rows.sparse["session"] = session_ids;
    Batch batch = testing::MakeBatch(rows, b);
    protos::LossConfig config;
    config.mutable_jrc_loss()->set_session_name("session");
    config.mutable_jrc_loss()->set_alpha(0.25f);
    auto loss = MakeLoss(config, 2, {"session"});
    torch::manual_seed(trial);
    at::Tensor output = (torch::randn({b, 2}, torch::kDouble) * 3).requires_grad_(true);
    Predictions p;
    loss->AddPredictions(output, "_j", &p);
    ASSERT_TRUE(p.count("probs1_j"));
    at::Tensor label_tensor = torch::tensor(labels);
    at::Tensor ours = loss->Compute(p, "_j", label_tensor, {}, batch);
    ours.backward();
    at::Tensor grad = output.grad().clone();
    at::Tensor ref_logits = output.detach().clone().requires_grad_(true);
    at::Tensor ref = ReferenceJrc(ref_logits, label_tensor.to(torch::kLong), FirstIdPerRow(batch.Sparse("session")), 0.25);
    ref.backward();
    EXPECT_NEAR(ours.item<double>(), ref.item<double>(), 1e-9) << "trial " << trial;
    EXPECT_TRUE(torch::allclose(grad, ref_logits.grad(), 1e-9, 1e-9)) << "trial " << trial;
  }
  protos::LossConfig config;
  config.mutable_jrc_loss()->set_session_name("nope");
  EXPECT_TZREC_ERROR(MakeLoss(config, 2, {"session"}), "session_name: 'nope' is not a (non-sequence) sparse feature");
  config.mutable_jrc_loss()->set_session_name("session");
  EXPECT_TZREC_ERROR(MakeLoss(config, 1, {"session"}), "num_class must be 2 for jrc_loss");
}

// Tower weighting: (sample weight or 1) x task-space weight, / mean, x weight; the loss is
// mean(loss_i * w_i). Single-task: w / mean(w).
TEST(TaskHead, LossWeightingFollowsTorchEasyRec) {
  protos::TaskTower tower;
  tower.set_tower_name("cvr");
  tower.set_label_name("buy");
  tower.add_losses()->mutable_binary_cross_entropy();
  tower.set_weight(2.0f);
  tower.set_sample_weight_name("w");
  tower.set_task_space_indicator_label("clk");
  tower.set_in_task_space_weight(3.0f);
  tower.set_out_task_space_weight(0.5f);
  HeadContext context;
  context.label_fields = {"clk", "buy"};
  context.sample_weight_fields = {"w"};
  TaskHead head(TaskSpecFromTower(tower, "t", 1, context), context);
  testing::SimpleRows rows;
  rows.labels["clk"] = {1, 0, 1, 0};
  rows.labels["buy"] = {1, 0, 0, 0};
  rows.weights["w"] = {1.0f, 2.0f, 1.0f, 4.0f};
  Batch batch = testing::MakeBatch(rows, 4);
  Predictions p;
  head.AddPredictions(torch::tensor({{0.2f}, {-0.4f}, {1.0f}, {0.0f}}), &p);
  ASSERT_TRUE(p.count("probs_cvr"));
  NamedLosses losses;
  head.ComputeLosses(p, batch, &losses);
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_EQ(losses[0].first, "binary_cross_entropy_cvr");
  double z[] = {0.2, -0.4, 1.0, 0.0}, y[] = {1, 0, 0, 0};
  double w[] = {1.0 * 3.0, 2.0 * 0.5, 1.0 * 3.0, 4.0 * 0.5};
  double mean_w = (w[0] + w[1] + w[2] + w[3]) / 4;
  double expected = 0;
  for (int i = 0; i < 4; ++i) expected += Bce(z[i], y[i]) * (w[i] / mean_w * 2.0) / 4;
  EXPECT_NEAR(losses[0].second.item<double>(), expected, 1e-6);

  // Only `weight` set: the plain mean times the weight.
  protos::TaskTower plain;
  plain.set_tower_name("ctr");
  plain.set_label_name("clk");
  plain.add_losses()->mutable_binary_cross_entropy();
  plain.set_weight(10.0f);
  TaskHead weighted(TaskSpecFromTower(plain, "t", 0, context), context);
  NamedLosses weighted_losses;
  Predictions q;
  weighted.AddPredictions(torch::tensor({{0.2f}, {-0.4f}, {1.0f}, {0.0f}}), &q);
  weighted.ComputeLosses(q, batch, &weighted_losses);
  double clk[] = {1, 0, 1, 0}, mean_bce = 0;
  for (int i = 0; i < 4; ++i) mean_bce += Bce(z[i], clk[i]) / 4;
  EXPECT_NEAR(weighted_losses[0].second.item<double>(), 10.0 * mean_bce, 1e-5);

  protos::TaskTower unknown = plain;
  unknown.set_label_name("zzz");
  EXPECT_TZREC_ERROR(TaskHead(TaskSpecFromTower(unknown, "model_config.mmoe.task_towers[0]", 0, context), context),
                     "model_config.mmoe.task_towers[0].label_name: 'zzz' is not one of data_config.label_fields");
}

TEST(Pareto, SimplexProjectionIsTheNearestPoint) {
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  for (int trial = 0; trial < 50; ++trial) {
    const int k = 2 + trial % 3;
    std::vector<double> v(k);
    for (double& x : v) x = normal(rng);
    const double total = 0.4 + 0.1 * (trial % 5);
    std::vector<double> x = ProjectOntoSimplex(v, total);
    double sum = 0, best = 0;
    for (int i = 0; i < k; ++i) {
      EXPECT_GE(x[i], 0.0);
      sum += x[i];
      best += (x[i] - v[i]) * (x[i] - v[i]);
    }
    EXPECT_NEAR(sum, total, 1e-12);
    // No random point of the simplex is nearer.
    for (int s = 0; s < 2000; ++s) {
      std::vector<double> e(k);
      double norm = 0;
      for (double& u : e) norm += (u = -std::log(std::uniform_real_distribution<double>(1e-12, 1.0)(rng)));
      double d = 0;
      for (int i = 0; i < k; ++i) d += (e[i] / norm * total - v[i]) * (e[i] / norm * total - v[i]);
      EXPECT_GE(d, best - 1e-12);
    }
  }
}

// Two tasks: the weights are the min-norm point of the segment between the gradients (MGDA's
// closed form), clipped to the bounds.
TEST(Pareto, TwoLossWeightsAreTheMinNormCombination) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal;
  for (int trial = 0; trial < 20; ++trial) {
    at::Tensor g = torch::randn({2, 6}, torch::kDouble);
    at::Tensor ggt = torch::matmul(g, g.t());
    const double c0 = trial % 2 ? 0.1 : 0.0, c1 = trial % 3 ? 0.2 : 0.0;
    std::vector<double> w = ParetoLossWeights(ggt, {c0, c1});
    const double g11 = ggt[0][0].item<double>(), g22 = ggt[1][1].item<double>(), g12 = ggt[0][1].item<double>();
    double w0 = (g22 - g12) / (g11 + g22 - 2 * g12);  // min over w0 of |w0 g1 + (1 - w0) g2|
    w0 = std::min(1.0 - c1, std::max(c0, w0));
    EXPECT_NEAR(w[0], w0, 1e-9) << trial;
    EXPECT_NEAR(w[0] + w[1], 1.0, 1e-12);
  }
}

}  // namespace
}  // namespace tzrec
