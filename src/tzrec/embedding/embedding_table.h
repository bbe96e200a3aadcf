// Embedding tables and the sparse optimizers that update them.
//
// A table is a plain float tensor [rows, dim] outside autograd, with its optimizer state
// beside it. The pooled lookup (pooled_lookup.h) records the gradient of each lookup in the
// table during backward; SparseOptimizer::Step then de-duplicates the touched ids, sums their
// gradients and updates only those rows (never a dense [rows, dim] gradient, never LibTorch's
// sparse COO path). This is the naive-but-correct engine; the fused engine replaces the
// kernels, not this interface.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tzrec/protos/optimizer.pb.h"

namespace tzrec {

class EmbeddingTable {
 public:
  // Rows are initialised uniform in [-sqrt(1/rows), sqrt(1/rows)] (TorchRec's default) from
  // the global torch generator, so TORCH_MANUAL_SEED makes them reproducible.
  EmbeddingTable(std::string name, int64_t rows, int dim);

  const std::string& name() const { return name_; }
  int64_t rows() const { return rows_; }
  int dim() const { return dim_; }
  at::Tensor& weight() { return weight_; }
  std::map<std::string, at::Tensor>& optimizer_state() { return optimizer_state_; }

  // Gradient of one pooled lookup: d(out)/d(rows) is grad_output[bag] (divided by the bag
  // length for mean pooling) for every id of the bag.
  struct PendingGradient {
    at::Tensor values;       // int64 [N]
    at::Tensor offsets;      // int64 [B + 1]
    at::Tensor grad_output;  // float [B, dim], contiguous
    bool mean = false;
  };
  void AddPendingGradient(PendingGradient gradient);
  std::vector<PendingGradient> TakePendingGradients();
  void ClearPendingGradients();

 private:
  std::string name_;
  int64_t rows_;
  int dim_;
  at::Tensor weight_;
  std::map<std::string, at::Tensor> optimizer_state_;
  std::mutex pending_mutex_;
  std::vector<PendingGradient> pending_;
};

// Touched rows of one table with their summed gradients.
struct UniqueGradients {
  std::vector<int64_t> ids;   // distinct, ascending
  std::vector<float> grads;   // [ids.size(), dim]
};
UniqueGradients AccumulateGradients(const std::vector<EmbeddingTable::PendingGradient>& pending,
                                    int dim);

class SparseOptimizer {
 public:
  virtual ~SparseOptimizer() = default;
  // Builds from train_config.sparse_optimizer; unsupported optimizers fail naming the field.
  static std::unique_ptr<SparseOptimizer> Create(const protos::SparseOptimizer& config);

  virtual std::string name() const = 0;
  // Allocates the optimizer state of a table (e.g. Adagrad's squared-gradient sum).
  virtual void InitState(EmbeddingTable* table) const = 0;
  // Applies the pending gradients of every table and clears them.
  void Step(const std::vector<EmbeddingTable*>& tables);
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }

 protected:
  explicit SparseOptimizer(double lr) : lr_(lr) {}
  virtual void UpdateRows(EmbeddingTable* table, const UniqueGradients& gradients) const = 0;

 private:
  double lr_;
};

}  // namespace tzrec
