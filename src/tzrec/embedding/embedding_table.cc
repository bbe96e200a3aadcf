#include "tzrec/embedding/embedding_table.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

#include "tzrec/common/error.h"
#include "tzrec/embedding/embedding_kernels.h"

namespace tzrec {

EmbeddingTable::EmbeddingTable(std::string name, int64_t rows, int dim)
    : name_(std::move(name)), rows_(rows), dim_(dim) {
  TZREC_CHECK(rows > 0 && dim > 0, "table ", name_);
  const double bound = std::sqrt(1.0 / static_cast<double>(rows));
  weight_ = at::empty({rows, dim}, at::TensorOptions().dtype(at::kFloat));
  weight_.uniform_(-bound, bound);
}

void EmbeddingTable::AddPendingGradient(PendingGradient gradient) {
  std::lock_guard<std::mutex> lock(pending_mutex_);
  pending_.push_back(std::move(gradient));
}

std::vector<EmbeddingTable::PendingGradient> EmbeddingTable::TakePendingGradients() {
  std::lock_guard<std::mutex> lock(pending_mutex_);
  std::vector<PendingGradient> taken;
  taken.swap(pending_);
  return taken;
}

void EmbeddingTable::ClearPendingGradients() { TakePendingGradients(); }

UniqueGradients AccumulateGradients(const std::vector<EmbeddingTable::PendingGradient>& pending,
                                    int dim) {
  std::unordered_map<int64_t, int64_t> slot_of;
  std::vector<int64_t> ids;
  std::vector<float> grads;
  for (const auto& p : pending) {
    const int64_t* values = p.values.data_ptr<int64_t>();
    const int64_t* offsets = p.offsets.data_ptr<int64_t>();
    const float* grad_out = p.grad_output.data_ptr<float>();
    const int64_t bags = p.offsets.numel() - 1;
    for (int64_t b = 0; b < bags; ++b) {
      const int64_t first = offsets[b], last = offsets[b + 1];
      if (first == last) continue;
      const float scale = p.mean ? 1.0f / static_cast<float>(last - first) : 1.0f;
      const float* g = grad_out + b * dim;
      for (int64_t i = first; i < last; ++i) {
        auto inserted = slot_of.emplace(values[i], static_cast<int64_t>(ids.size()));
        if (inserted.second) {
          ids.push_back(values[i]);
          grads.resize(grads.size() + dim, 0.0f);
        }
        float* acc = grads.data() + inserted.first->second * dim;
        for (int d = 0; d < dim; ++d) acc[d] += scale * g[d];
      }
    }
  }
  // Ascending ids: a deterministic order and friendlier memory access.
  std::vector<int64_t> order(ids.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ids[a] < ids[b]; });
  UniqueGradients out;
  out.ids.resize(ids.size());
  out.grads.resize(grads.size());
  for (size_t k = 0; k < order.size(); ++k) {
    out.ids[k] = ids[order[k]];
    std::copy_n(grads.data() + order[k] * dim, dim, out.grads.data() + k * dim);
  }
  return out;
}

void SparseOptimizer::Step(const std::vector<EmbeddingTable*>& tables) {
  for (EmbeddingTable* table : tables) {
    auto pending = table->TakePendingGradients();
    if (pending.empty()) continue;
    UniqueGradients gradients = AccumulateGradients(pending, table->dim());
    if (!gradients.ids.empty()) UpdateRows(table, gradients);
  }
}

namespace {

class SgdSparseOptimizer : public SparseOptimizer {
 public:
  explicit SgdSparseOptimizer(double lr) : SparseOptimizer(lr) {}
  std::string name() const override { return "sgd_optimizer"; }
  void InitState(EmbeddingTable*) const override {}
  void UpdateRows(EmbeddingTable* table, const UniqueGradients& g) const override {
    SgdUpdateRows(table->weight().data_ptr<float>(), table->dim(), g.ids.data(),
                  static_cast<int64_t>(g.ids.size()), g.grads.data(), static_cast<float>(lr()));
  }
};

class AdagradSparseOptimizer : public SparseOptimizer {
 public:
  AdagradSparseOptimizer(double lr, double initial_accumulator)
      : SparseOptimizer(lr), initial_accumulator_(initial_accumulator) {}
  std::string name() const override { return "adagrad_optimizer"; }
  void InitState(EmbeddingTable* table) const override {
    table->optimizer_state()["sum"] =
        at::full({table->rows(), table->dim()}, initial_accumulator_,
                 at::TensorOptions().dtype(at::kFloat));
  }
  void UpdateRows(EmbeddingTable* table, const UniqueGradients& g) const override {
    AdagradUpdateRows(table->weight().data_ptr<float>(),
                      table->optimizer_state().at("sum").data_ptr<float>(), table->dim(),
                      g.ids.data(), static_cast<int64_t>(g.ids.size()), g.grads.data(),
                      static_cast<float>(lr()), kEps);
  }

 private:
  static constexpr float kEps = 1e-8f;  // FBGEMM's default for EXACT_ADAGRAD
  double initial_accumulator_;
};

}  // namespace

std::unique_ptr<SparseOptimizer> SparseOptimizer::Create(const protos::SparseOptimizer& config) {
  if (config.has_sgd_optimizer()) {
    return std::make_unique<SgdSparseOptimizer>(config.sgd_optimizer().lr());
  }
  if (config.has_adagrad_optimizer()) {
    return std::make_unique<AdagradSparseOptimizer>(
        config.adagrad_optimizer().lr(), config.adagrad_optimizer().initial_accumulator_value());
  }
  Fail("train_config.sparse_optimizer: no optimizer set or optimizer not supported yet ",
       "(supported: sgd_optimizer, adagrad_optimizer)");
}

}  // namespace tzrec
