#include "tzrec/embedding/pooled_lookup.h"

#include <torch/csrc/autograd/custom_function.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include "tzrec/embedding/embedding_kernels.h"

namespace tzrec {
namespace {

at::Tensor PooledForward(EmbeddingTable* table, const at::Tensor& values,
                         const at::Tensor& offsets, bool mean) {
  const int64_t bags = offsets.numel() - 1;
  at::Tensor out = at::empty({bags, table->dim()}, at::TensorOptions().dtype(at::kFloat));
  PooledLookupForward(table->weight().data_ptr<float>(), table->rows(), table->dim(),
                      values.data_ptr<int64_t>(), offsets.data_ptr<int64_t>(), bags, mean,
                      out.data_ptr<float>());
  return out;
}

struct PooledLookupFunction : public torch::autograd::Function<PooledLookupFunction> {
  // `anchor` is a scalar that requires grad, so autograd records this node even though the
  // table itself is not an autograd variable.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, at::Tensor anchor,
                            at::Tensor values, at::Tensor offsets, int64_t table_address,
                            bool mean) {
    auto* table = reinterpret_cast<EmbeddingTable*>(table_address);
    ctx->saved_data["values"] = values;
    ctx->saved_data["offsets"] = offsets;
    ctx->saved_data["table"] = table_address;
    ctx->saved_data["mean"] = mean;
    return PooledForward(table, values, offsets, mean);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* table = reinterpret_cast<EmbeddingTable*>(ctx->saved_data["table"].toInt());
    EmbeddingTable::PendingGradient pending;
    pending.values = ctx->saved_data["values"].toTensor();
    pending.offsets = ctx->saved_data["offsets"].toTensor();
    pending.grad_output = grads[0].contiguous();
    pending.mean = ctx->saved_data["mean"].toBool();
    table->AddPendingGradient(std::move(pending));
    return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor Anchor() {
  static thread_local at::Tensor anchor =
      at::zeros({}, at::TensorOptions().dtype(at::kFloat)).set_requires_grad(true);
  return anchor;
}

}  // namespace

at::Tensor PooledLookup(EmbeddingTable* table, const at::Tensor& values, const at::Tensor& offsets,
                        bool mean, bool track_gradient) {
  if (!track_gradient) return PooledForward(table, values, offsets, mean);
  return PooledLookupFunction::apply(Anchor(), values, offsets,
                                     reinterpret_cast<int64_t>(table), mean);
}

}  // namespace tzrec
