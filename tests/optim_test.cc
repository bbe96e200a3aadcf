// Dense optimizers from config (torch.optim semantics and TorchEasyRec's defaults) and the
// learning-rate schedule registry.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <google/protobuf/text_format.h>

#include <cmath>
#include <functional>
#include <sstream>
#include <string>

#include "test_util.h"
#include "tzrec/optim/dense_optimizer.h"
#include "tzrec/optim/learning_rate.h"
#include "tzrec/protos/optimizer.pb.h"

namespace tzrec {
namespace {

// Two steps of dense Adagrad on a parameter with a fixed gradient, against its formula:
// g' = g + wd * w; sum += g'^2; w -= lr * g' / (sqrt(sum) + eps).
TEST(DenseOptimizer, AdagradFollowsTorchOptimAdagrad) {
  protos::DenseOptimizer config;
  auto* adagrad = config.mutable_adagrad_optimizer();
  adagrad->set_lr(0.5f);
  adagrad->set_weight_decay(0.125f);
  adagrad->set_initial_accumulator_value(0.25f);
  adagrad->set_eps(0.0625f);
  at::Tensor w = torch::tensor({1.0, -2.0}, torch::kDouble).requires_grad_(true);
  auto optimizer = CreateDenseOptimizer(config, {w});
  double ref[2] = {1.0, -2.0}, sum[2] = {0.25, 0.25};
  const double g[2] = {0.5, 3.0};
  for (int step = 0; step < 2; ++step) {
    w.mutable_grad() = torch::tensor({g[0], g[1]}, torch::kDouble);
    optimizer->step();
    for (int i = 0; i < 2; ++i) {
      double gi = g[i] + 0.125 * ref[i];
      sum[i] += gi * gi;
      ref[i] -= 0.5 * gi / (std::sqrt(sum[i]) + 0.0625);
    }
  }
  EXPECT_NEAR(w[0].item<double>(), ref[0], 1e-12);
  EXPECT_NEAR(w[1].item<double>(), ref[1], 1e-12);
  EXPECT_DOUBLE_EQ(DenseLearningRate(*optimizer), 0.5);
  SetDenseLearningRate(*optimizer, 0.25);
  EXPECT_DOUBLE_EQ(DenseLearningRate(*optimizer), 0.25);
}

TEST(DenseOptimizer, DefaultsAndErrors) {
  protos::DenseOptimizer sgd;
  sgd.mutable_sgd_optimizer()->set_lr(0.1f);
  at::Tensor w = torch::zeros({1}).requires_grad_(true);
  auto optimizer = CreateDenseOptimizer(sgd, {w});
  // TorchEasyRec's dense SGD defaults to momentum 0.9.
  auto& options = static_cast<torch::optim::SGDOptions&>(optimizer->param_groups()[0].options());
  EXPECT_NEAR(options.momentum(), 0.9, 1e-7);
  protos::DenseOptimizer none;
  EXPECT_TZREC_ERROR(CreateDenseOptimizer(none, {w}), "train_config.dense_optimizer: no optimizer set");
}

// Adadelta (ours) and RMSprop (LibTorch's) from config, three steps each against
// torch.optim's formulas; each optimizer's state survives a save and load (what a checkpoint
// does): a copy loaded from the archive takes the same next step.
TEST(DenseOptimizer, AdadeltaAndRmspropFollowTorchOptimAndResume) {
  const double g[3][2] = {{0.5, 3.0}, {-1.0, 0.25}, {2.0, -0.5}};
  auto run = [&](const protos::DenseOptimizer& config, const std::function<void(double*, const double*)>& reference) {
    at::Tensor w = torch::tensor({1.0, -2.0}, torch::kDouble).requires_grad_(true);
    auto optimizer = CreateDenseOptimizer(config, {w});
    double ref[2] = {1.0, -2.0};
    for (int step = 0; step < 3; ++step) {
      w.mutable_grad() = torch::tensor({g[step][0], g[step][1]}, torch::kDouble);
      optimizer->step();
      reference(ref, g[step]);
      EXPECT_NEAR(w[0].item<double>(), ref[0], 1e-12) << config.ShortDebugString() << " step " << step;
      EXPECT_NEAR(w[1].item<double>(), ref[1], 1e-12) << config.ShortDebugString() << " step " << step;
    }
    torch::serialize::OutputArchive out;
    optimizer->save(out);
    std::ostringstream bytes;
    out.save_to(bytes);
    at::Tensor w2 = w.detach().clone().requires_grad_(true);
    auto restored = CreateDenseOptimizer(config, {w2});
    std::istringstream in_bytes(bytes.str());
    torch::serialize::InputArchive in;
    in.load_from(in_bytes);
    restored->load(in);
    w.mutable_grad() = torch::tensor({0.75, -1.5}, torch::kDouble);
    w2.mutable_grad() = torch::tensor({0.75, -1.5}, torch::kDouble);
    optimizer->step();
    restored->step();
    EXPECT_TRUE(torch::equal(w, w2)) << config.ShortDebugString();
  };
  protos::DenseOptimizer adadelta;
  adadelta.mutable_adadelta_optimizer()->set_lr(0.5f);
  adadelta.mutable_adadelta_optimizer()->set_weight_decay(0.125f);
  double square_avg[2] = {0, 0}, acc_delta[2] = {0, 0};
  // TorchEasyRec's defaults, float config fields as torch.optim receives them.
  const double rho = 0.95f, eps = 1e-6f;
  run(adadelta, [&](double* w, const double* grad) {
    for (int i = 0; i < 2; ++i) {
      const double gi = grad[i] + 0.125 * w[i];
      square_avg[i] = rho * square_avg[i] + (1 - rho) * gi * gi;
      const double delta = std::sqrt(acc_delta[i] + eps) / std::sqrt(square_avg[i] + eps) * gi;
      acc_delta[i] = rho * acc_delta[i] + (1 - rho) * delta * delta;
      w[i] -= 0.5 * delta;
    }
  });
  protos::DenseOptimizer rmsprop;
  rmsprop.mutable_rmsprop_optimizer()->set_lr(0.25f);
  rmsprop.mutable_rmsprop_optimizer()->set_alpha(0.5f);
  rmsprop.mutable_rmsprop_optimizer()->set_eps(0.0625f);
  double sq[2] = {0, 0};
  run(rmsprop, [&](double* w, const double* grad) {
    for (int i = 0; i < 2; ++i) {
      sq[i] = 0.5 * sq[i] + 0.5 * grad[i] * grad[i];  // alpha 0.5, eps 0.0625: exact in float
      w[i] -= 0.25 * grad[i] / (std::sqrt(sq[i]) + 0.0625);
    }
  });
}

// Adam and AdamW from config update each parameter in one pass (optim/fused_adam.h): the same
// steps as torch::optim's (with L2 or decoupled weight decay, amsgrad) up to float rounding,
// with LibTorch's state, so an archive saved by one loads into the other; parameters it cannot
// fuse (here a double one) take LibTorch's step, exactly.
TEST(DenseOptimizer, AdamAndAdamWInOnePassFollowTorchOptim) {
  torch::manual_seed(6);
  testing::ForEachCpuIsa([] {
  for (bool decoupled : {false, true}) {
    for (float weight_decay : {0.0f, 0.05f}) {
      for (bool amsgrad : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "adamw " << decoupled << " wd " << weight_decay << " amsgrad " << amsgrad);
        protos::DenseOptimizer config;
        if (decoupled) {
          auto* c = config.mutable_adamw_optimizer();
          c->set_lr(0.01f);
          c->set_weight_decay(weight_decay);
          c->set_amsgrad(amsgrad);
        } else {
          auto* c = config.mutable_adam_optimizer();
          c->set_lr(0.01f);
          c->set_weight_decay(weight_decay);
          c->set_amsgrad(amsgrad);
        }
        // LibTorch's optimizers with the config's values as our factory passes them.
        auto adam_options = [&] {
          const auto& c = config.adam_optimizer();
          return torch::optim::AdamOptions(c.lr()).betas({c.beta1(), c.beta2()}).eps(c.eps())
              .weight_decay(c.weight_decay()).amsgrad(c.amsgrad());
        };
        auto adamw_options = [&] {
          const auto& c = config.adamw_optimizer();
          return torch::optim::AdamWOptions(c.lr()).betas({c.beta1(), c.beta2()}).eps(c.eps())
              .weight_decay(c.weight_decay()).amsgrad(c.amsgrad());
        };
        const std::vector<at::Tensor> init = {torch::randn({300, 7}), torch::randn({13})};
        std::vector<at::Tensor> ours, theirs;
        for (const auto& t : init) {
          ours.push_back(t.clone().requires_grad_(true));
          theirs.push_back(t.clone().requires_grad_(true));
        }
        auto fused = CreateDenseOptimizer(config, ours);
        std::unique_ptr<torch::optim::Optimizer> reference;
        if (decoupled) {
          reference = std::make_unique<torch::optim::AdamW>(theirs, adamw_options());
        } else {
          reference = std::make_unique<torch::optim::Adam>(theirs, adam_options());
        }
        auto step_both = [&](torch::optim::Optimizer& a, std::vector<at::Tensor>& pa, torch::optim::Optimizer& b,
                             std::vector<at::Tensor>& pb) {
          for (size_t i = 0; i < pa.size(); ++i) {
            at::Tensor g = torch::randn(pa[i].sizes()) * static_cast<double>(i + 1);
            pa[i].mutable_grad() = g.clone();
            pb[i].mutable_grad() = g.clone();
          }
          a.step();
          b.step();
          for (size_t i = 0; i < pa.size(); ++i) {
            EXPECT_TRUE(torch::allclose(pa[i], pb[i], 1e-5, 1e-6)) << i << " " << (pa[i] - pb[i]).abs().max();
          }
        };
        for (int step = 0; step < 4; ++step) step_both(*fused, ours, *reference, theirs);
        // The fused optimizer's archive loads into LibTorch's, which steps on alike.
        torch::serialize::OutputArchive out;
        fused->save(out);
        std::ostringstream bytes;
        out.save_to(bytes);
        std::vector<at::Tensor> copies;
        for (const auto& t : ours) copies.push_back(t.detach().clone().requires_grad_(true));
        std::unique_ptr<torch::optim::Optimizer> loaded;
        if (decoupled) {
          loaded = std::make_unique<torch::optim::AdamW>(copies, adamw_options());
        } else {
          loaded = std::make_unique<torch::optim::Adam>(copies, adam_options());
        }
        std::istringstream in_bytes(bytes.str());
        torch::serialize::InputArchive in;
        in.load_from(in_bytes);
        loaded->load(in);
        step_both(*fused, ours, *loaded, copies);
      }
    }
  }
  });
  // A double parameter is not fused: LibTorch's step, bit for bit.
  protos::DenseOptimizer config;
  config.mutable_adam_optimizer()->set_lr(0.01f);
  at::Tensor a = torch::randn({5}, torch::kDouble).requires_grad_(true), b = a.detach().clone().requires_grad_(true);
  auto fused = CreateDenseOptimizer(config, {a});
  const auto& c = config.adam_optimizer();
  torch::optim::Adam reference({b}, torch::optim::AdamOptions(c.lr()).betas({c.beta1(), c.beta2()}).eps(c.eps()));
  for (int step = 0; step < 3; ++step) {
    at::Tensor g = torch::randn({5}, torch::kDouble);
    a.mutable_grad() = g.clone();
    b.mutable_grad() = g.clone();
    fused->step();
    reference.step();
  }
  EXPECT_TRUE(torch::equal(a, b));
}

TEST(LearningRate, ConstantByDefaultAndUnknownSchedulesAreErrors) {
  protos::DenseOptimizer config;
  config.mutable_adam_optimizer();
  EXPECT_DOUBLE_EQ(CreateLearningRateSchedule(config, "d")->Rate(0.01, 100, 3), 0.01);
  config.mutable_constant_learning_rate();
  EXPECT_DOUBLE_EQ(CreateLearningRateSchedule(config, "d")->Rate(0.02, 0, 0), 0.02);
  config.mutable_linear_decay_learning_rate();  // in the proto, not in TorchEasyRec
  EXPECT_TZREC_ERROR(CreateLearningRateSchedule(config, "train_config.dense_optimizer"),
                     "train_config.dense_optimizer.linear_decay_learning_rate: not supported yet");
}

// The schedules' values at chosen steps, worked out by hand from TorchEasyRec's formulas
// (rate of step t = the scheduler after t steps).
TEST(LearningRate, SchedulesFollowTorchEasyRecsFormulas) {
  auto schedule = [](const std::string& text) {
    protos::DenseOptimizer config;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString("adam_optimizer { lr: 0.1 } " + text, &config)) << text;
    return CreateLearningRateSchedule(config, "train_config.dense_optimizer");
  };
  // Exponential, staircase, warmup over 5 steps from 0.01, floor 0.02.
  auto exp = schedule(R"(exponential_decay_learning_rate { decay_size: 10 decay_factor: 0.5
      warmup_learning_rate: 0.01 warmup_size: 5 min_learning_rate: 0.02 })");
  EXPECT_NEAR(exp->Rate(0.1, 0, 0), 0.01, 1e-9);
  EXPECT_NEAR(exp->Rate(0.1, 2, 0), 0.01 + 0.09 * 0.4, 1e-9);
  EXPECT_NEAR(exp->Rate(0.1, 5, 0), 0.1, 1e-9);
  EXPECT_NEAR(exp->Rate(0.1, 14, 0), 0.1, 1e-9);
  EXPECT_NEAR(exp->Rate(0.1, 15, 0), 0.05, 1e-9);
  EXPECT_NEAR(exp->Rate(0.1, 25, 0), 0.025, 1e-9);
  EXPECT_NEAR(exp->Rate(0.1, 35, 0), 0.02, 1e-9);  // 0.0125 under the floor
  EXPECT_EQ(exp->Rate(0.0, 35, 0), 0.0);            // a zero base rate stays zero
  auto smooth = schedule("exponential_decay_learning_rate { decay_size: 10 decay_factor: 0.5 staircase: false }");
  EXPECT_NEAR(smooth->Rate(0.1, 5, 0), 0.1 * std::sqrt(0.5), 1e-9);
  auto by_epoch = schedule("exponential_decay_learning_rate { decay_size: 1 decay_factor: 0.5 by_epoch: true }");
  EXPECT_NEAR(by_epoch->Rate(0.1, 1000, 2), 0.025, 1e-9);

  // Manual steps: learning_rates[i - 1] from bisect_left(schedule_sizes, t) = i (so the rate
  // changes one step after each size).
  auto manual = schedule("manual_step_learning_rate { schedule_sizes: [10, 20] learning_rates: [0.05, 0.01] }");
  EXPECT_NEAR(manual->Rate(0.1, 0, 0), 0.1, 1e-9);
  EXPECT_NEAR(manual->Rate(0.1, 10, 0), 0.1, 1e-9);
  EXPECT_NEAR(manual->Rate(0.1, 11, 0), 0.05, 1e-9);
  EXPECT_NEAR(manual->Rate(0.1, 20, 0), 0.05, 1e-9);
  EXPECT_NEAR(manual->Rate(0.1, 21, 0), 0.01, 1e-9);
  auto ramp = schedule(
      "manual_step_learning_rate { schedule_sizes: [10, 20] learning_rates: [0.05, 0.01] warmup: true }");
  EXPECT_NEAR(ramp->Rate(0.1, 5, 0), 0.075, 1e-9);

  // Cosine to 0.01 over 10 steps after a 2-step warmup from 0, then flat.
  auto cosine = schedule("cosine_annealing_learning_rate { T_max: 10 min_learning_rate: 0.01 warmup_size: 2 }");
  EXPECT_NEAR(cosine->Rate(0.1, 1, 0), 0.05, 1e-9);
  EXPECT_NEAR(cosine->Rate(0.1, 2, 0), 0.1, 1e-9);
  EXPECT_NEAR(cosine->Rate(0.1, 7, 0), 0.055, 1e-9);
  EXPECT_NEAR(cosine->Rate(0.1, 12, 0), 0.01, 1e-9);
  EXPECT_NEAR(cosine->Rate(0.1, 40, 0), 0.01, 1e-9);

  // Warm restarts: periods 4, 8, 16 ... (T_mult 2) start at steps 0, 4, 12, 28.
  auto restarts = schedule(
      "cosine_annealing_warm_restarts_learning_rate { T_0: 4 T_mult: 2 min_learning_rate: 0.01 }");
  EXPECT_NEAR(restarts->Rate(0.1, 0, 0), 0.1, 1e-9);
  EXPECT_NEAR(restarts->Rate(0.1, 2, 0), 0.055, 1e-9);
  EXPECT_NEAR(restarts->Rate(0.1, 4, 0), 0.1, 1e-9);
  EXPECT_NEAR(restarts->Rate(0.1, 8, 0), 0.055, 1e-9);
  EXPECT_NEAR(restarts->Rate(0.1, 12, 0), 0.1, 1e-9);
  EXPECT_NEAR(restarts->Rate(0.1, 20, 0), 0.055, 1e-9);
  EXPECT_NEAR(restarts->Rate(0.1, 28, 0), 0.1, 1e-9);
  auto fixed = schedule("cosine_annealing_warm_restarts_learning_rate { T_0: 4 }");
  EXPECT_NEAR(fixed->Rate(0.1, 6, 0), 0.05, 1e-9);
  EXPECT_NEAR(fixed->Rate(0.1, 8, 0), 0.1, 1e-9);

  EXPECT_TZREC_ERROR(schedule("exponential_decay_learning_rate {}"),
                     "train_config.dense_optimizer.exponential_decay_learning_rate.decay_size: must be > 0");
  EXPECT_TZREC_ERROR(schedule("manual_step_learning_rate { schedule_sizes: [1, 2] learning_rates: [0.1] }"),
                     "manual_step_learning_rate: schedule_sizes and learning_rates need the same number");
  EXPECT_TZREC_ERROR(schedule("manual_step_learning_rate { schedule_sizes: [5, 5] learning_rates: [0.1, 0.2] }"),
                     "schedule_sizes: must increase");
  EXPECT_TZREC_ERROR(schedule("cosine_annealing_learning_rate {}"), "cosine_annealing_learning_rate.T_max: must be > 0");
  EXPECT_TZREC_ERROR(schedule("cosine_annealing_warm_restarts_learning_rate { T_0: 0 }"), ".T_0: must be > 0");
}

}  // namespace
}  // namespace tzrec
