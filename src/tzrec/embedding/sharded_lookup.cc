#include "tzrec/embedding/sharded_lookup.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "tzrec/common/error.h"

namespace tzrec {
namespace {

// Where this rank's (lookup, bag) segments went and what came in, kept for the backward.
struct Exchange {
  std::vector<int64_t> seg_counts;       // segments sent to each rank
  std::vector<int64_t> recv_seg_counts;  // segments received from each rank
  at::Tensor sent_keys;                  // int64 [sent]: lookup * bags + bag, in send order
  at::Tensor sent_scales;                // float [sent]: gradient scale (mean, 1 / world)
  at::Tensor recv_ids;                   // int64 [received ids]: local rows
  at::Tensor recv_offsets;               // int64 [received segments + 1]
  at::Tensor recv_weights;               // float [received ids] (weighted features) or empty
  int padded_width = 0;                  // widest local part (column_wise), the message width
};

int PaddedWidth(const TableShard& shard) {
  int width = 0;
  for (int r = 0; r < shard.world_size; ++r) width = std::max(width, shard.local_dim(r));
  return width;
}

LookupArgs LocalArgs(const EmbeddingStorage& storage, const Exchange& ex, bool trainable) {
  LookupArgs args;
  args.values = ex.recv_ids.data_ptr<int64_t>();
  args.offsets = ex.recv_offsets.data_ptr<int64_t>();
  args.first_row = 0;
  args.table_rows = storage.total_rows();
  args.mean = false;
  args.trainable = trainable;
  args.weights = ex.recv_weights.numel() > 0 ? ex.recv_weights.data_ptr<float>() : nullptr;
  return args;
}

// Where the bags of every lookup sit: lookup k's bag b is segment key base[k] + b, and its
// output (or gradient) row is at rows[k] + b * stride[k] of the lookup's tensor. Pooled lookups
// share one [bags, Lp * dim] tensor (tensor 0); each sequence lookup has its own [steps, dim].
struct Layout {
  std::vector<int64_t> base;     // [L + 1]
  std::vector<int> tensor;       // per lookup: index of its output tensor
  std::vector<int64_t> column;   // per lookup: first column in that tensor
  std::vector<int64_t> own_bags; // per lookup: -1 pooled, else steps
  int64_t pooled_width = 0;

  Layout(const std::vector<int64_t>& lookup_bags, int64_t bags, int dim) {
    base.push_back(0);
    int sequences = 0;
    int64_t pooled = 0;
    for (int64_t own : lookup_bags) {
      own_bags.push_back(own);
      base.push_back(base.back() + (own >= 0 ? own : bags));
      if (own >= 0) {
        tensor.push_back(++sequences);
        column.push_back(0);
      } else {
        tensor.push_back(0);
        column.push_back(pooled++ * dim);
      }
    }
    pooled_width = pooled * dim;
  }
  int64_t bags_of(size_t k) const { return base[k + 1] - base[k]; }
  // The lookup of segment `key`.
  size_t LookupOf(int64_t key) const {
    return static_cast<size_t>(std::upper_bound(base.begin(), base.end(), key) - base.begin()) - 1;
  }
};

std::vector<at::Tensor> Forward(EmbeddingStorage* storage, const TableShard& shard, ShardComm* comm,
                                const std::vector<LookupTensors>& lookups,
                                const std::vector<int64_t>& lookup_bags, int64_t bags, Exchange* ex) {
  const int world = shard.world_size;
  const int num_lookups = static_cast<int>(lookups.size());
  const Layout layout(lookup_bags, bags, shard.dim);
  std::vector<std::vector<int64_t>> ids_to(world), lens_to(world), keys_to(world);
  std::vector<std::vector<float>> scales_to(world), weights_to(world);
  bool weighted = false;
  for (const auto& l : lookups) weighted = weighted || l.weights.defined();
  std::vector<int64_t> count(world, 0);
  const float inverse_world = 1.0f / static_cast<float>(world);
  for (int k = 0; k < num_lookups; ++k) {
    const int64_t* values = lookups[k].values.data_ptr<int64_t>();
    const int64_t* offsets = lookups[k].offsets.data_ptr<int64_t>();
    const float* weights = lookups[k].weights.defined() ? lookups[k].weights.data_ptr<float>() : nullptr;
    for (int64_t b = 0; b < layout.bags_of(k); ++b) {
      const int64_t first = offsets[b], last = offsets[b + 1];
      if (first == last) continue;
      const float scale = (lookups[k].mean ? 1.0f / static_cast<float>(last - first) : 1.0f) * inverse_world;
      const int64_t key = layout.base[k] + b;
      for (int64_t i = first; i < last; ++i) {
        if (values[i] < 0 || values[i] >= shard.rows) {
          Fail("embedding id ", values[i], " out of range [0, ", shard.rows, ")");
        }
      }
      if (shard.type == TableShard::Type::kColumnWise) {
        for (int d = 0; d < world; ++d) {
          ids_to[d].insert(ids_to[d].end(), values + first, values + last);
          if (weighted) {
            for (int64_t i = first; i < last; ++i) weights_to[d].push_back(weights ? weights[i] : 1.0f);
          }
          lens_to[d].push_back(last - first);
          keys_to[d].push_back(key);
          scales_to[d].push_back(scale);
        }
        continue;
      }
      std::fill(count.begin(), count.end(), 0);
      // Ids of this bag grouped by owner, each group contiguous in its owner's list.
      for (int d = 0; d < world; ++d) {
        for (int64_t i = first; i < last; ++i) {
          if (shard.OwnerOfRow(values[i]) != d) continue;
          ids_to[d].push_back(values[i] - shard.row_begin(d));
          if (weighted) weights_to[d].push_back(weights ? weights[i] : 1.0f);
          ++count[d];
        }
        if (count[d] > 0) {
          lens_to[d].push_back(count[d]);
          keys_to[d].push_back(key);
          scales_to[d].push_back(scale);
        }
      }
    }
  }
  std::vector<int64_t> id_counts(world), seg_counts(world);
  std::vector<int64_t> all_ids, all_lens, all_keys;
  std::vector<float> all_scales, all_weights;
  for (int d = 0; d < world; ++d) {
    id_counts[d] = static_cast<int64_t>(ids_to[d].size());
    seg_counts[d] = static_cast<int64_t>(lens_to[d].size());
    all_ids.insert(all_ids.end(), ids_to[d].begin(), ids_to[d].end());
    all_lens.insert(all_lens.end(), lens_to[d].begin(), lens_to[d].end());
    all_keys.insert(all_keys.end(), keys_to[d].begin(), keys_to[d].end());
    all_scales.insert(all_scales.end(), scales_to[d].begin(), scales_to[d].end());
    all_weights.insert(all_weights.end(), weights_to[d].begin(), weights_to[d].end());
  }
  auto to_tensor = [](const std::vector<int64_t>& v) {
    at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::kLong);
    std::copy(v.begin(), v.end(), t.data_ptr<int64_t>());
    return t;
  };
  ex->seg_counts = seg_counts;
  ex->recv_seg_counts = comm->ExchangeCounts(seg_counts);
  const std::vector<int64_t> recv_id_counts = comm->ExchangeCounts(id_counts);
  ex->recv_ids = comm->AllToAll(to_tensor(all_ids), id_counts, recv_id_counts).contiguous();
  // Weights travel with their ids (every rank knows whether the table's lookups are weighted).
  ex->recv_weights = at::empty({0}, at::kFloat);
  if (weighted) {
    at::Tensor w = at::empty({static_cast<int64_t>(all_weights.size())}, at::kFloat);
    std::copy(all_weights.begin(), all_weights.end(), w.data_ptr<float>());
    ex->recv_weights = comm->AllToAll(w, id_counts, recv_id_counts).contiguous();
  }
  at::Tensor recv_lens = comm->AllToAll(to_tensor(all_lens), seg_counts, ex->recv_seg_counts);
  const int64_t received = recv_lens.numel();
  ex->recv_offsets = at::empty({received + 1}, at::kLong);
  int64_t* off = ex->recv_offsets.data_ptr<int64_t>();
  off[0] = 0;
  for (int64_t j = 0; j < received; ++j) off[j + 1] = off[j] + recv_lens.data_ptr<int64_t>()[j];
  ex->sent_keys = to_tensor(all_keys);
  ex->sent_scales = at::empty({static_cast<int64_t>(all_scales.size())}, at::kFloat);
  std::copy(all_scales.begin(), all_scales.end(), ex->sent_scales.data_ptr<float>());
  ex->padded_width = PaddedWidth(shard);

  // Pool this rank's rows for the received segments.
  const int local_dim = shard.local_dim(shard.rank);
  at::Tensor partial = at::zeros({received, ex->padded_width}, at::kFloat);
  if (received > 0 && local_dim > 0) {
    at::Tensor local = at::empty({received, local_dim}, at::kFloat);
    LookupArgs args = LocalArgs(*storage, *ex, true);
    SelectedKernels().forward(storage->data(), storage->row_width(), storage->dim(), {args}, received,
                              local.data_ptr<float>());
    partial.narrow(1, 0, local_dim).copy_(local);
  }
  at::Tensor back = comm->AllToAll(partial, ex->recv_seg_counts, seg_counts).contiguous();

  // Assemble the outputs: row-wise partials add up, column-wise ones sit side by side.
  const int dim = shard.dim;
  std::vector<at::Tensor> outs = {at::zeros({bags, layout.pooled_width}, at::kFloat)};
  for (int k = 0; k < num_lookups; ++k) {
    if (layout.own_bags[k] >= 0) outs.push_back(at::zeros({layout.own_bags[k], dim}, at::kFloat));
  }
  auto row_of = [&](size_t k, int64_t b) {
    const at::Tensor& t = outs[layout.tensor[k]];
    return t.data_ptr<float>() + b * t.size(1) + layout.column[k];
  };
  const float* in = back.data_ptr<float>();
  const int64_t* keys = ex->sent_keys.data_ptr<int64_t>();
  int64_t row = 0;
  for (int d = 0; d < world; ++d) {
    const int begin = shard.column_begin(d), width = shard.local_dim(d);
    for (int64_t j = 0; j < seg_counts[d]; ++j, ++row) {
      const size_t k = layout.LookupOf(keys[row]);
      float* dst = row_of(k, keys[row] - layout.base[k]) + begin;
      const float* src = in + row * ex->padded_width;
      for (int c = 0; c < width; ++c) dst[c] += src[c];
    }
  }
  for (int k = 0; k < num_lookups; ++k) {
    if (!lookups[k].mean) continue;
    const int64_t* offsets = lookups[k].offsets.data_ptr<int64_t>();
    for (int64_t b = 0; b < layout.bags_of(k); ++b) {
      const int64_t n = offsets[b + 1] - offsets[b];
      if (n <= 1) continue;
      float* dst = row_of(k, b);
      for (int c = 0; c < dim; ++c) dst[c] /= static_cast<float>(n);
    }
  }
  return outs;
}

// `grads`: the gradients of Forward's outputs (undefined ones count as zero: every rank still
// takes part in the exchange).
void Backward(EmbeddingStorage* storage, const TableShard& shard, ShardComm* comm,
              const Exchange& ex, const std::vector<int64_t>& lookup_bags, int64_t bags,
              const std::vector<at::Tensor>& grads, bool trainable) {
  const int world = shard.world_size;
  const Layout layout(lookup_bags, bags, shard.dim);
  const int64_t sent = ex.sent_keys.numel();
  at::Tensor send = at::zeros({sent, ex.padded_width}, at::kFloat);
  float* s = send.data_ptr<float>();
  const int64_t* keys = ex.sent_keys.data_ptr<int64_t>();
  const float* scales = ex.sent_scales.data_ptr<float>();
  int64_t row = 0;
  for (int d = 0; d < world; ++d) {
    const int begin = shard.column_begin(d), width = shard.local_dim(d);
    for (int64_t j = 0; j < ex.seg_counts[d]; ++j, ++row) {
      const size_t k = layout.LookupOf(keys[row]);
      const at::Tensor& g = grads[layout.tensor[k]];
      if (!g.defined()) continue;
      const float* src = g.data_ptr<float>() + (keys[row] - layout.base[k]) * g.size(1) +
                         layout.column[k] + begin;
      float* dst = s + row * ex.padded_width;
      for (int c = 0; c < width; ++c) dst[c] = src[c] * scales[row];
    }
  }
  at::Tensor received = comm->AllToAll(send, ex.seg_counts, ex.recv_seg_counts);
  const int64_t segments = received.size(0);
  const int local_dim = shard.local_dim(shard.rank);
  if (!trainable || segments == 0 || local_dim == 0) return;
  at::Tensor local = received.narrow(1, 0, local_dim).contiguous();
  LookupArgs args = LocalArgs(*storage, ex, trainable);
  SelectedKernels().backward_update(storage, {args}, segments, local.data_ptr<float>(),
                                    storage->optimizer().step() + 1);
}

struct ShardedLookupFunction : public torch::autograd::Function<ShardedLookupFunction> {
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx, at::Tensor anchor, int64_t storage_address,
      int64_t shard_address, int64_t comm_address, std::vector<at::Tensor> values,
      std::vector<at::Tensor> offsets, std::vector<at::Tensor> weights, std::vector<int64_t> means,
      std::vector<int64_t> lookup_bags, int64_t bags, bool trainable) {
    auto* storage = reinterpret_cast<EmbeddingStorage*>(storage_address);
    const auto& shard = *reinterpret_cast<const TableShard*>(shard_address);
    auto* comm = reinterpret_cast<ShardComm*>(comm_address);
    std::vector<LookupTensors> lookups;
    // means[k]: bit 0 mean pooling, bit 1 weighted (known from the feature, so every rank
    // agrees even when its batch has no ids).
    for (size_t k = 0; k < values.size(); ++k) {
      lookups.push_back({values[k], offsets[k], nullptr, (means[k] & 1) != 0,
                         (means[k] & 2) != 0 ? weights[k] : at::Tensor()});
    }
    Exchange ex;
    std::vector<at::Tensor> out = Forward(storage, shard, comm, lookups, lookup_bags, bags, &ex);
    ctx->saved_data["storage"] = storage_address;
    ctx->saved_data["shard"] = shard_address;
    ctx->saved_data["comm"] = comm_address;
    ctx->saved_data["seg_counts"] = ex.seg_counts;
    ctx->saved_data["recv_seg_counts"] = ex.recv_seg_counts;
    ctx->saved_data["sent_keys"] = ex.sent_keys;
    ctx->saved_data["sent_scales"] = ex.sent_scales;
    ctx->saved_data["recv_ids"] = ex.recv_ids;
    ctx->saved_data["recv_offsets"] = ex.recv_offsets;
    ctx->saved_data["recv_weights"] = ex.recv_weights;
    ctx->saved_data["padded_width"] = static_cast<int64_t>(ex.padded_width);
    ctx->saved_data["lookup_bags"] = lookup_bags;
    ctx->saved_data["bags"] = bags;
    ctx->saved_data["trainable"] = trainable;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    Exchange ex;
    ex.seg_counts = ctx->saved_data["seg_counts"].toIntVector();
    ex.recv_seg_counts = ctx->saved_data["recv_seg_counts"].toIntVector();
    ex.sent_keys = ctx->saved_data["sent_keys"].toTensor();
    ex.sent_scales = ctx->saved_data["sent_scales"].toTensor();
    ex.recv_ids = ctx->saved_data["recv_ids"].toTensor();
    ex.recv_offsets = ctx->saved_data["recv_offsets"].toTensor();
    ex.recv_weights = ctx->saved_data["recv_weights"].toTensor();
    ex.padded_width = static_cast<int>(ctx->saved_data["padded_width"].toInt());
    std::vector<at::Tensor> contiguous;
    for (const at::Tensor& g : grads) contiguous.push_back(g.defined() ? g.contiguous() : g);
    Backward(reinterpret_cast<EmbeddingStorage*>(ctx->saved_data["storage"].toInt()),
             *reinterpret_cast<const TableShard*>(ctx->saved_data["shard"].toInt()),
             reinterpret_cast<ShardComm*>(ctx->saved_data["comm"].toInt()), ex,
             ctx->saved_data["lookup_bags"].toIntVector(), ctx->saved_data["bags"].toInt(),
             contiguous, ctx->saved_data["trainable"].toBool());
    return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor ShardAnchor() {
  static thread_local at::Tensor anchor =
      at::zeros({}, at::TensorOptions().dtype(at::kFloat)).set_requires_grad(true);
  return anchor;
}

}  // namespace

std::vector<at::Tensor> ShardedLookup(EmbeddingStorage* storage, const TableShard& shard,
                                      ShardComm* comm, const std::vector<LookupTensors>& pooled,
                                      const std::vector<LookupTensors>& sequences, int64_t bags,
                                      bool training) {
  std::vector<LookupTensors> lookups = pooled;
  lookups.insert(lookups.end(), sequences.begin(), sequences.end());
  std::vector<int64_t> lookup_bags(pooled.size(), -1);
  for (const auto& l : sequences) lookup_bags.push_back(l.offsets.numel() - 1);
  const bool trainable = lookups.empty() || lookups[0].table->trainable();
  if (!training) {
    Exchange ex;
    return Forward(storage, shard, comm, lookups, lookup_bags, bags, &ex);
  }
  std::vector<at::Tensor> values, offsets, weights;
  std::vector<int64_t> means;
  for (const auto& l : lookups) {
    values.push_back(l.values);
    offsets.push_back(l.offsets);
    weights.push_back(l.weights.defined() ? l.weights.contiguous() : at::empty({0}, at::kFloat));
    means.push_back((l.mean ? 1 : 0) | (l.weights.defined() ? 2 : 0));
  }
  return ShardedLookupFunction::apply(ShardAnchor(), reinterpret_cast<int64_t>(storage),
                                      reinterpret_cast<int64_t>(&shard), reinterpret_cast<int64_t>(comm),
                                      values, offsets, weights, means, lookup_bags, bags, trainable);
}

at::Tensor ShardedPooledLookup(EmbeddingStorage* storage, const TableShard& shard, ShardComm* comm,
                               const std::vector<LookupTensors>& lookups, int64_t bags,
                               bool training) {
  return ShardedLookup(storage, shard, comm, lookups, {}, bags, training)[0];
}

}  // namespace tzrec
