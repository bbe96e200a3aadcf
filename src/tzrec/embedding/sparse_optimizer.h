// Sparse (embedding) optimizers: the math applied to each touched row, FBGEMM-style.
//
// Optimizer state lives beside each row in the embedding storage (embedding_storage.h), so an
// update touches one contiguous [weight | state] block. Semantics follow FBGEMM's TBE
// optimizers that TorchEasyRec uses: the gradient of a row is the sum over the batch, clipped
// element-wise to [-max_gradient, max_gradient] when gradient_clipping is set, then
//   sgd:              w -= lr * g
//   adagrad:          s += g*g;  w -= lr * g / (sqrt(s) + eps)                  (per element)
//   rowwise_adagrad:  [L2: g += wd*w]  s += mean(g*g);  w -= lr * g / (sqrt(s) + eps)
//                     [DECOUPLE: w -= lr*wd*w first]                              (per row)
//   adam:             m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g*g;
//                     w -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd*w)
//   partial_rowwise_adam: as adam with one v per row from mean(g*g)
//   lars_sgd:         lr' = lr * eta * |w| / (|g| + wd*|w|)  (row norms, eta 0.001);
//                     mom = momentum*mom + lr' * (g + wd*w);  w -= mom
//   lamb:             m, v as adam;  r = m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd*w;
//                     w -= lr * |w| / |r| * r                         (row norms)
//   partial_rowwise_lamb: as lamb with one v per row from mean(g*g)
// FBGEMM runs these four on GPUs only; adadelta and rmsprop are in TorchEasyRec's proto for a
// private TorchRec build, and here follow torch.optim per element (L2 weight decay):
//   adadelta:         g += wd*w;  sq = rho sq + (1-rho) g^2;
//                     delta = sqrt(acc + eps) / sqrt(sq + eps) * g;  acc = rho acc + (1-rho) delta^2;
//                     w -= lr * delta
//   rmsprop:          g += wd*w;  sq = alpha sq + (1-alpha) g^2;  w -= lr * g / (sqrt(sq) + eps)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tzrec/common/registry.h"
#include "tzrec/protos/optimizer.pb.h"

namespace tzrec {

struct SparseOptimizerSpec {
  enum class Kind {
    kSgd,
    kAdagrad,
    kRowwiseAdagrad,
    kAdam,
    kLarsSgd,
    kLamb,
    kPartialRowwiseLamb,
    kPartialRowwiseAdam,
    kAdadelta,
    kRmsprop,
  };
  enum class WeightDecayMode { kNone, kL2, kDecouple };
  Kind kind = Kind::kSgd;
  float lr = 0.002f;
  float eps = 1e-8f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float weight_decay = 0.0f;
  WeightDecayMode weight_decay_mode = WeightDecayMode::kNone;
  float initial_accumulator = 0.0f;
  float momentum = 0.9f;  // lars_sgd
  float eta = 0.001f;     // lars_sgd trust coefficient (FBGEMM's default; not in the config)
  float rho = 0.95f;      // adadelta
  float alpha = 0.99f;    // rmsprop
  bool gradient_clipping = false;
  float max_gradient = 1.0f;

  // Floats of optimizer state stored after the `dim` weights of each row.
  int StateWidth(int dim) const;
  // Names and [offset, width) of the state slices, for checkpoints.
  struct StateSlice {
    std::string name;
    int offset;
    int width;
  };
  std::vector<StateSlice> StateSlices(int dim) const;
  // Initial value of every state float.
  float InitialState() const;
  std::string Name() const;
};

// Parses train_config.sparse_optimizer; unsupported settings fail naming the field.
SparseOptimizerSpec ParseSparseOptimizer(const protos::SparseOptimizer& config);

// Sparse optimizers by config name (slot SparseOptimizer / optimizer): the member message ->
// its spec.
using SparseOptimizerFactory = std::function<SparseOptimizerSpec(const google::protobuf::Message&)>;
Registry<SparseOptimizerFactory>& SparseOptimizerRegistry();

// Owns the spec, the current learning rate and the iteration count (Adam's t).
class SparseOptimizer {
 public:
  explicit SparseOptimizer(SparseOptimizerSpec spec) : spec_(spec) {}
  static std::unique_ptr<SparseOptimizer> Create(const protos::SparseOptimizer& config) {
    return std::make_unique<SparseOptimizer>(ParseSparseOptimizer(config));
  }
  const SparseOptimizerSpec& spec() const { return spec_; }
  std::string name() const { return spec_.Name(); }
  double lr() const { return spec_.lr; }
  void set_lr(double lr) { spec_.lr = static_cast<float>(lr); }
  // Iterations completed; the update in flight uses step() + 1.
  int64_t step() const { return step_; }
  void set_step(int64_t step) { step_ = step; }
  // Called once per optimizer step (rows were updated in backward, or by
  // ApplyDeferredRowGradients when deferring).
  void FinishStep() { ++step_; }
  // Gradient accumulation: while set, backwards keep row gradients in their storages instead
  // of updating rows (fused_lookup.h ApplyDeferredRowGradients applies them).
  bool defers_updates() const { return defer_updates_; }
  void set_defer_updates(bool defer) { defer_updates_ = defer; }

 private:
  SparseOptimizerSpec spec_;
  int64_t step_ = 0;
  bool defer_updates_ = false;
};

}  // namespace tzrec
