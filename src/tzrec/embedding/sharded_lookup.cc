#include "tzrec/embedding/sharded_lookup.h"

#include <ATen/ops/empty.h>
#include <ATen/record_function.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "tzrec/common/error.h"

namespace tzrec {
namespace {

// Where this rank's (lookup, bag) segments of one table went and what came in, kept for the
// backward.
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
  int outputs = 1;               // tensors: the pooled one, then one per sequence lookup

  Layout(const std::vector<int64_t>& lookup_bags, int64_t bags, int dim) {
    base.push_back(0);
    int64_t pooled = 0;
    for (int64_t own : lookup_bags) {
      own_bags.push_back(own);
      base.push_back(base.back() + (own >= 0 ? own : bags));
      if (own >= 0) {
        tensor.push_back(outputs++);
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

// One table of the exchange: what it is and how its lookups are laid out.
struct TableWork {
  EmbeddingStorage* storage;
  const TableShard* shard;
  std::vector<LookupTensors> lookups;  // pooled, then sequences
  std::vector<int64_t> lookup_bags;    // per lookup: -1 pooled, else its steps
  int64_t bags;
  bool trainable;
  bool weighted;  // known from the features, so every rank agrees even without ids
};

// This rank's outgoing ids of one table, grouped by the rank holding their rows.
struct Outgoing {
  std::vector<std::vector<int64_t>> ids, lens, keys;
  std::vector<std::vector<float>> scales, weights;
};

Outgoing GroupByOwner(const TableWork& t, const Layout& layout) {
  const TableShard& shard = *t.shard;
  const int world = shard.world_size;
  Outgoing out;
  out.ids.resize(world);
  out.lens.resize(world);
  out.keys.resize(world);
  out.scales.resize(world);
  out.weights.resize(world);
  std::vector<int64_t> count(world, 0);
  const float inverse_world = 1.0f / static_cast<float>(world);
  for (size_t k = 0; k < t.lookups.size(); ++k) {
    const int64_t* values = t.lookups[k].values.data_ptr<int64_t>();
    const int64_t* offsets = t.lookups[k].offsets.data_ptr<int64_t>();
    const float* weights = t.lookups[k].weights.defined() && t.lookups[k].weights.numel() > 0
                               ? t.lookups[k].weights.data_ptr<float>()
                               : nullptr;
    for (int64_t b = 0; b < layout.bags_of(k); ++b) {
      const int64_t first = offsets[b], last = offsets[b + 1];
      if (first == last) continue;
      const float scale = (t.lookups[k].mean ? 1.0f / static_cast<float>(last - first) : 1.0f) * inverse_world;
      const int64_t key = layout.base[k] + b;
      for (int64_t i = first; i < last; ++i) {
        if (values[i] < 0 || values[i] >= shard.rows) {
          Fail("embedding id ", values[i], " out of range [0, ", shard.rows, ")");
        }
      }
      if (shard.type == TableShard::Type::kColumnWise) {
        for (int d = 0; d < world; ++d) {
          out.ids[d].insert(out.ids[d].end(), values + first, values + last);
          if (t.weighted) {
            for (int64_t i = first; i < last; ++i) out.weights[d].push_back(weights ? weights[i] : 1.0f);
          }
          out.lens[d].push_back(last - first);
          out.keys[d].push_back(key);
          out.scales[d].push_back(scale);
        }
        continue;
      }
      std::fill(count.begin(), count.end(), 0);
      // Ids of this bag grouped by owner, each group contiguous in its owner's list.
      for (int d = 0; d < world; ++d) {
        for (int64_t i = first; i < last; ++i) {
          if (shard.OwnerOfRow(values[i]) != d) continue;
          out.ids[d].push_back(values[i] - shard.row_begin(d));
          if (t.weighted) out.weights[d].push_back(weights ? weights[i] : 1.0f);
          ++count[d];
        }
        if (count[d] > 0) {
          out.lens[d].push_back(count[d]);
          out.keys[d].push_back(key);
          out.scales[d].push_back(scale);
        }
      }
    }
  }
  return out;
}

template <typename T>
at::Tensor ToTensor(const std::vector<T>& v, at::ScalarType type) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, type);
  if (!v.empty()) std::memcpy(t.data_ptr(), v.data(), v.size() * sizeof(T));
  return t;
}

// One all-to-all of float rows of several tables: `send[t]` is table t's [rows, width_t] in
// destination order with `send_rows[t][d]` rows for rank d; comes back as each table's
// [rows, width_t] in source order with `recv_rows[t][r]` rows from rank r.
std::vector<at::Tensor> AllToAllRows(ShardComm* comm, const std::vector<at::Tensor>& send,
                                     const std::vector<int>& widths,
                                     const std::vector<std::vector<int64_t>>& send_rows,
                                     const std::vector<std::vector<int64_t>>& recv_rows) {
  const size_t tables = send.size();
  const int world = comm->world_size();
  std::vector<int64_t> send_counts(world, 0), recv_counts(world, 0);
  for (size_t t = 0; t < tables; ++t) {
    for (int d = 0; d < world; ++d) {
      send_counts[d] += send_rows[t][d] * widths[t];
      recv_counts[d] += recv_rows[t][d] * widths[t];
    }
  }
  int64_t total = 0;
  for (int64_t c : send_counts) total += c;
  at::Tensor flat = at::empty({total}, at::kFloat);
  float* dst = flat.data_ptr<float>();
  std::vector<int64_t> row(tables, 0);  // next row of each table to send
  for (int d = 0; d < world; ++d) {
    for (size_t t = 0; t < tables; ++t) {
      const int64_t n = send_rows[t][d] * widths[t];
      if (n > 0) std::memcpy(dst, send[t].data_ptr<float>() + row[t] * widths[t], n * sizeof(float));
      dst += n;
      row[t] += send_rows[t][d];
    }
  }
  at::Tensor received = comm->AllToAll(flat, send_counts, recv_counts).contiguous();
  std::vector<at::Tensor> out(tables);
  for (size_t t = 0; t < tables; ++t) {
    int64_t rows = 0;
    for (int r = 0; r < world; ++r) rows += recv_rows[t][r];
    out[t] = at::empty({rows, widths[t]}, at::kFloat);
    row[t] = 0;
  }
  const float* src = received.data_ptr<float>();
  for (int r = 0; r < world; ++r) {
    for (size_t t = 0; t < tables; ++t) {
      const int64_t n = recv_rows[t][r] * widths[t];
      if (n > 0) std::memcpy(out[t].data_ptr<float>() + row[t] * widths[t], src, n * sizeof(float));
      src += n;
      row[t] += recv_rows[t][r];
    }
  }
  return out;
}

// Outputs of every table (see ShardedLookups); fills `exchanges` for the backward.
std::vector<std::vector<at::Tensor>> Forward(ShardComm* comm, const std::vector<TableWork>& tables,
                                             std::vector<Exchange>* exchanges) {
  const size_t num_tables = tables.size();
  const int world = comm->world_size();
  exchanges->assign(num_tables, Exchange());
  std::vector<Layout> layouts;
  std::vector<Outgoing> outgoing;
  bool any_weighted = false;
  for (const TableWork& t : tables) {
    TZREC_CHECK(t.shard->world_size == world, "a sharded table's world size differs from the process group's");
    layouts.emplace_back(t.lookup_bags, t.bags, t.shard->dim);
    outgoing.push_back(GroupByOwner(t, layouts.back()));
    any_weighted = any_weighted || t.weighted;
  }

  // 1. Counts: for every table, ids and segments to each rank, in one [world, 2T] exchange.
  const int64_t width = 2 * static_cast<int64_t>(num_tables);
  at::Tensor counts = at::empty({world, std::max<int64_t>(width, 1)}, at::kLong);
  int64_t* c = counts.data_ptr<int64_t>();
  for (int d = 0; d < world; ++d) {
    for (size_t t = 0; t < num_tables; ++t) {
      c[d * counts.size(1) + t] = static_cast<int64_t>(outgoing[t].ids[d].size());
      c[d * counts.size(1) + num_tables + t] = static_cast<int64_t>(outgoing[t].lens[d].size());
    }
  }
  const std::vector<int64_t> ones(world, 1);
  at::Tensor recv_counts = comm->AllToAll(counts, ones, ones).contiguous();
  const int64_t* rc = recv_counts.data_ptr<int64_t>();
  std::vector<std::vector<int64_t>> id_counts(num_tables, std::vector<int64_t>(world)),
      recv_id_counts(num_tables, std::vector<int64_t>(world));
  for (size_t t = 0; t < num_tables; ++t) {
    Exchange& ex = (*exchanges)[t];
    ex.seg_counts.resize(world);
    ex.recv_seg_counts.resize(world);
    for (int d = 0; d < world; ++d) {
      id_counts[t][d] = static_cast<int64_t>(outgoing[t].ids[d].size());
      ex.seg_counts[d] = static_cast<int64_t>(outgoing[t].lens[d].size());
      recv_id_counts[t][d] = rc[d * recv_counts.size(1) + t];
      ex.recv_seg_counts[d] = rc[d * recv_counts.size(1) + num_tables + t];
    }
  }

  // 2. Ids and bag lengths of every table in one int64 exchange: to each rank, every table's
  // ids, then every table's lengths.
  std::vector<int64_t> send_counts(world, 0), receive_counts(world, 0);
  std::vector<int64_t> payload;
  for (int d = 0; d < world; ++d) {
    for (size_t t = 0; t < num_tables; ++t) {
      payload.insert(payload.end(), outgoing[t].ids[d].begin(), outgoing[t].ids[d].end());
      send_counts[d] += id_counts[t][d];
      receive_counts[d] += recv_id_counts[t][d];
    }
    for (size_t t = 0; t < num_tables; ++t) {
      payload.insert(payload.end(), outgoing[t].lens[d].begin(), outgoing[t].lens[d].end());
      send_counts[d] += (*exchanges)[t].seg_counts[d];
      receive_counts[d] += (*exchanges)[t].recv_seg_counts[d];
    }
  }
  at::Tensor received = comm->AllToAll(ToTensor(payload, at::kLong), send_counts, receive_counts).contiguous();
  std::vector<std::vector<int64_t>> recv_ids(num_tables), recv_lens(num_tables);
  const int64_t* in = received.data_ptr<int64_t>();
  for (int r = 0; r < world; ++r) {
    for (size_t t = 0; t < num_tables; ++t) {
      recv_ids[t].insert(recv_ids[t].end(), in, in + recv_id_counts[t][r]);
      in += recv_id_counts[t][r];
    }
    for (size_t t = 0; t < num_tables; ++t) {
      recv_lens[t].insert(recv_lens[t].end(), in, in + (*exchanges)[t].recv_seg_counts[r]);
      in += (*exchanges)[t].recv_seg_counts[r];
    }
  }
  // Weights travel with their ids, for the weighted tables only.
  std::vector<std::vector<float>> recv_weights(num_tables);
  if (any_weighted) {
    std::vector<int64_t> weight_send(world, 0), weight_recv(world, 0);
    std::vector<float> weights;
    for (int d = 0; d < world; ++d) {
      for (size_t t = 0; t < num_tables; ++t) {
        if (!tables[t].weighted) continue;
        weights.insert(weights.end(), outgoing[t].weights[d].begin(), outgoing[t].weights[d].end());
        weight_send[d] += id_counts[t][d];
        weight_recv[d] += recv_id_counts[t][d];
      }
    }
    at::Tensor got = comm->AllToAll(ToTensor(weights, at::kFloat), weight_send, weight_recv).contiguous();
    const float* w = got.data_ptr<float>();
    for (int r = 0; r < world; ++r) {
      for (size_t t = 0; t < num_tables; ++t) {
        if (!tables[t].weighted) continue;
        recv_weights[t].insert(recv_weights[t].end(), w, w + recv_id_counts[t][r]);
        w += recv_id_counts[t][r];
      }
    }
  }

  // 3. Pool this rank's rows for the received segments of every table.
  std::vector<at::Tensor> partials(num_tables);
  std::vector<int> widths(num_tables);
  std::vector<std::vector<int64_t>> partial_rows(num_tables), back_rows(num_tables);
  for (size_t t = 0; t < num_tables; ++t) {
    Exchange& ex = (*exchanges)[t];
    const TableShard& shard = *tables[t].shard;
    ex.recv_ids = ToTensor(recv_ids[t], at::kLong);
    ex.recv_weights = ToTensor(recv_weights[t], at::kFloat);
    const int64_t segments = static_cast<int64_t>(recv_lens[t].size());
    ex.recv_offsets = at::empty({segments + 1}, at::kLong);
    int64_t* off = ex.recv_offsets.data_ptr<int64_t>();
    off[0] = 0;
    for (int64_t j = 0; j < segments; ++j) off[j + 1] = off[j] + recv_lens[t][j];
    std::vector<int64_t> keys;
    std::vector<float> scales;
    for (int d = 0; d < world; ++d) {
      keys.insert(keys.end(), outgoing[t].keys[d].begin(), outgoing[t].keys[d].end());
      scales.insert(scales.end(), outgoing[t].scales[d].begin(), outgoing[t].scales[d].end());
    }
    ex.sent_keys = ToTensor(keys, at::kLong);
    ex.sent_scales = ToTensor(scales, at::kFloat);
    ex.padded_width = PaddedWidth(shard);
    widths[t] = ex.padded_width;
    const int local_dim = shard.local_dim(shard.rank);
    partials[t] = at::zeros({segments, ex.padded_width}, at::kFloat);
    if (segments > 0 && local_dim > 0) {
      at::Tensor local = at::empty({segments, local_dim}, at::kFloat);
      LookupArgs args = LocalArgs(*tables[t].storage, ex, true);
      StorageForward(tables[t].storage, {args}, segments, local.data_ptr<float>());
      partials[t].narrow(1, 0, local_dim).copy_(local);
    }
    partial_rows[t] = ex.recv_seg_counts;
    back_rows[t] = ex.seg_counts;
  }

  // 4. The partial sums go back to the ranks that asked, every table in one exchange.
  std::vector<at::Tensor> back = AllToAllRows(comm, partials, widths, partial_rows, back_rows);

  // 5. Assemble each table's outputs: row-wise partials add up, column-wise ones sit side by side.
  std::vector<std::vector<at::Tensor>> results(num_tables);
  for (size_t t = 0; t < num_tables; ++t) {
    const TableWork& work = tables[t];
    const TableShard& shard = *work.shard;
    const Layout& layout = layouts[t];
    const Exchange& ex = (*exchanges)[t];
    const int dim = shard.dim;
    std::vector<at::Tensor>& outs = results[t];
    outs.push_back(at::zeros({work.bags, layout.pooled_width}, at::kFloat));
    for (size_t k = 0; k < work.lookups.size(); ++k) {
      if (layout.own_bags[k] >= 0) outs.push_back(at::zeros({layout.own_bags[k], dim}, at::kFloat));
    }
    auto row_of = [&](size_t k, int64_t b) {
      const at::Tensor& o = outs[layout.tensor[k]];
      return o.data_ptr<float>() + b * o.size(1) + layout.column[k];
    };
    const float* src_rows = back[t].data_ptr<float>();
    const int64_t* keys = ex.sent_keys.data_ptr<int64_t>();
    int64_t row = 0;
    for (int d = 0; d < world; ++d) {
      const int begin = shard.column_begin(d), local = shard.local_dim(d);
      for (int64_t j = 0; j < ex.seg_counts[d]; ++j, ++row) {
        const size_t k = layout.LookupOf(keys[row]);
        float* dst = row_of(k, keys[row] - layout.base[k]) + begin;
        const float* src = src_rows + row * ex.padded_width;
        for (int col = 0; col < local; ++col) dst[col] += src[col];
      }
    }
    for (size_t k = 0; k < work.lookups.size(); ++k) {
      if (!work.lookups[k].mean) continue;
      const int64_t* offsets = work.lookups[k].offsets.data_ptr<int64_t>();
      for (int64_t b = 0; b < layout.bags_of(k); ++b) {
        const int64_t n = offsets[b + 1] - offsets[b];
        if (n <= 1) continue;
        float* dst = row_of(k, b);
        for (int col = 0; col < dim; ++col) dst[col] /= static_cast<float>(n);
      }
    }
  }
  return results;
}

// `grads[t]`: the gradients of table t's Forward outputs (undefined ones count as zero: every
// rank still takes part in the exchange).
void Backward(ShardComm* comm, const std::vector<TableWork>& tables, const std::vector<Exchange>& exchanges,
              const std::vector<std::vector<at::Tensor>>& grads) {
  const size_t num_tables = tables.size();
  const int world = comm->world_size();
  std::vector<at::Tensor> send(num_tables);
  std::vector<int> widths(num_tables);
  std::vector<std::vector<int64_t>> send_rows(num_tables), recv_rows(num_tables);
  for (size_t t = 0; t < num_tables; ++t) {
    const TableShard& shard = *tables[t].shard;
    const Exchange& ex = exchanges[t];
    const Layout layout(tables[t].lookup_bags, tables[t].bags, shard.dim);
    const int64_t sent = ex.sent_keys.numel();
    send[t] = at::zeros({sent, ex.padded_width}, at::kFloat);
    widths[t] = ex.padded_width;
    send_rows[t] = ex.seg_counts;
    recv_rows[t] = ex.recv_seg_counts;
    float* s = send[t].data_ptr<float>();
    const int64_t* keys = ex.sent_keys.data_ptr<int64_t>();
    const float* scales = ex.sent_scales.data_ptr<float>();
    int64_t row = 0;
    for (int d = 0; d < world; ++d) {
      const int begin = shard.column_begin(d), local = shard.local_dim(d);
      for (int64_t j = 0; j < ex.seg_counts[d]; ++j, ++row) {
        const size_t k = layout.LookupOf(keys[row]);
        const at::Tensor& g = grads[t][layout.tensor[k]];
        if (!g.defined()) continue;
        const float* src = g.data_ptr<float>() + (keys[row] - layout.base[k]) * g.size(1) +
                           layout.column[k] + begin;
        float* dst = s + row * ex.padded_width;
        for (int col = 0; col < local; ++col) dst[col] = src[col] * scales[row];
      }
    }
  }
  std::vector<at::Tensor> received = AllToAllRows(comm, send, widths, send_rows, recv_rows);
  for (size_t t = 0; t < num_tables; ++t) {
    const TableShard& shard = *tables[t].shard;
    const int64_t segments = received[t].size(0);
    const int local_dim = shard.local_dim(shard.rank);
    if (!tables[t].trainable || segments == 0 || local_dim == 0) continue;
    at::Tensor local = received[t].narrow(1, 0, local_dim).contiguous();
    EmbeddingStorage* storage = tables[t].storage;
    LookupArgs args = LocalArgs(*storage, exchanges[t], true);
    UpdateRows(storage, {args}, segments, local.data_ptr<float>());
  }
}

std::vector<TableWork> ToWork(const std::vector<ShardedStorageLookups>& tables) {
  std::vector<TableWork> work;
  for (const auto& t : tables) {
    TableWork w;
    w.storage = t.storage;
    w.shard = t.shard;
    w.lookups = t.pooled;
    w.lookups.insert(w.lookups.end(), t.sequences.begin(), t.sequences.end());
    w.lookup_bags.assign(t.pooled.size(), -1);
    for (const auto& l : t.sequences) w.lookup_bags.push_back(l.offsets.numel() - 1);
    w.bags = t.bags;
    w.trainable = w.lookups.empty() || w.lookups[0].table->trainable();
    w.weighted = false;
    for (const auto& l : w.lookups) w.weighted = w.weighted || l.weights.defined();
    work.push_back(std::move(w));
  }
  return work;
}

std::string Key(size_t table, const char* name) { return "t" + std::to_string(table) + "." + name; }

// The autograd node of one step's sharded lookups. Its inputs are flattened over the tables:
// lookup k of table t is at lookup_start[t] + k; table t's outputs at output_start[t] + i.
struct ShardedLookupsFunction : public torch::autograd::Function<ShardedLookupsFunction> {
  static torch::autograd::variable_list forward(
      torch::autograd::AutogradContext* ctx, at::Tensor anchor, std::vector<int64_t> storage_addresses,
      std::vector<int64_t> shard_addresses, int64_t comm_address, std::vector<at::Tensor> values,
      std::vector<at::Tensor> offsets, std::vector<at::Tensor> weights, std::vector<int64_t> flags,
      std::vector<int64_t> lookup_bags, std::vector<int64_t> lookup_start, std::vector<int64_t> bags,
      std::vector<int64_t> trainable) {
    RECORD_USER_SCOPE("tzrec::sharded_embedding_lookup");  // named in is_profiling traces
    auto* comm = reinterpret_cast<ShardComm*>(comm_address);
    std::vector<TableWork> tables = Rebuild(storage_addresses, shard_addresses, values, offsets, weights, flags,
                                            lookup_bags, lookup_start, bags, trainable);
    std::vector<Exchange> exchanges;
    std::vector<std::vector<at::Tensor>> outputs = Forward(comm, tables, &exchanges);
    ctx->saved_data["storages"] = storage_addresses;
    ctx->saved_data["shards"] = shard_addresses;
    ctx->saved_data["comm"] = comm_address;
    ctx->saved_data["flags"] = flags;
    ctx->saved_data["lookup_bags"] = lookup_bags;
    ctx->saved_data["lookup_start"] = lookup_start;
    ctx->saved_data["bags"] = bags;
    ctx->saved_data["trainable"] = trainable;
    for (size_t t = 0; t < exchanges.size(); ++t) {
      const Exchange& ex = exchanges[t];
      ctx->saved_data[Key(t, "seg_counts")] = ex.seg_counts;
      ctx->saved_data[Key(t, "recv_seg_counts")] = ex.recv_seg_counts;
      ctx->saved_data[Key(t, "sent_keys")] = ex.sent_keys;
      ctx->saved_data[Key(t, "sent_scales")] = ex.sent_scales;
      ctx->saved_data[Key(t, "recv_ids")] = ex.recv_ids;
      ctx->saved_data[Key(t, "recv_offsets")] = ex.recv_offsets;
      ctx->saved_data[Key(t, "recv_weights")] = ex.recv_weights;
      ctx->saved_data[Key(t, "padded_width")] = static_cast<int64_t>(ex.padded_width);
    }
    torch::autograd::variable_list flat;
    for (auto& outs : outputs) flat.insert(flat.end(), outs.begin(), outs.end());
    return flat;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const std::vector<int64_t> storages = ctx->saved_data["storages"].toIntVector();
    // The lookups' ids are not needed backward: the exchange kept what each rank received.
    std::vector<TableWork> tables =
        Rebuild(storages, ctx->saved_data["shards"].toIntVector(), {}, {}, {}, ctx->saved_data["flags"].toIntVector(),
                ctx->saved_data["lookup_bags"].toIntVector(), ctx->saved_data["lookup_start"].toIntVector(),
                ctx->saved_data["bags"].toIntVector(), ctx->saved_data["trainable"].toIntVector());
    std::vector<Exchange> exchanges(tables.size());
    std::vector<std::vector<at::Tensor>> table_grads(tables.size());
    size_t next = 0;
    for (size_t t = 0; t < tables.size(); ++t) {
      Exchange& ex = exchanges[t];
      ex.seg_counts = ctx->saved_data[Key(t, "seg_counts")].toIntVector();
      ex.recv_seg_counts = ctx->saved_data[Key(t, "recv_seg_counts")].toIntVector();
      ex.sent_keys = ctx->saved_data[Key(t, "sent_keys")].toTensor();
      ex.sent_scales = ctx->saved_data[Key(t, "sent_scales")].toTensor();
      ex.recv_ids = ctx->saved_data[Key(t, "recv_ids")].toTensor();
      ex.recv_offsets = ctx->saved_data[Key(t, "recv_offsets")].toTensor();
      ex.recv_weights = ctx->saved_data[Key(t, "recv_weights")].toTensor();
      ex.padded_width = static_cast<int>(ctx->saved_data[Key(t, "padded_width")].toInt());
      const Layout layout(tables[t].lookup_bags, tables[t].bags, tables[t].shard->dim);
      for (int i = 0; i < layout.outputs; ++i, ++next) {
        const at::Tensor& g = grads[next];
        table_grads[t].push_back(g.defined() ? g.contiguous() : g);
      }
    }
    Backward(reinterpret_cast<ShardComm*>(ctx->saved_data["comm"].toInt()), tables, exchanges, table_grads);
    return torch::autograd::variable_list(12);
  }

  // The tables from the node's flattened inputs (ids empty in the backward).
  static std::vector<TableWork> Rebuild(const std::vector<int64_t>& storages, const std::vector<int64_t>& shards,
                                        const std::vector<at::Tensor>& values, const std::vector<at::Tensor>& offsets,
                                        const std::vector<at::Tensor>& weights, const std::vector<int64_t>& flags,
                                        const std::vector<int64_t>& lookup_bags,
                                        const std::vector<int64_t>& lookup_start, const std::vector<int64_t>& bags,
                                        const std::vector<int64_t>& trainable) {
    std::vector<TableWork> tables;
    for (size_t t = 0; t < storages.size(); ++t) {
      TableWork w;
      w.storage = reinterpret_cast<EmbeddingStorage*>(storages[t]);
      w.shard = reinterpret_cast<const TableShard*>(shards[t]);
      w.bags = bags[t];
      w.trainable = trainable[t] != 0;
      w.weighted = false;
      for (int64_t k = lookup_start[t]; k < lookup_start[t + 1]; ++k) {
        // flags[k]: bit 0 mean pooling, bit 1 weighted.
        const bool weighted = (flags[k] & 2) != 0;
        w.weighted = w.weighted || weighted;
        w.lookup_bags.push_back(lookup_bags[k]);
        if (!values.empty()) {
          w.lookups.push_back({values[k], offsets[k], nullptr, (flags[k] & 1) != 0,
                               weighted ? weights[k] : at::Tensor()});
        }
      }
      tables.push_back(std::move(w));
    }
    return tables;
  }
};

at::Tensor ShardAnchor() {
  static thread_local at::Tensor anchor =
      at::zeros({}, at::TensorOptions().dtype(at::kFloat)).set_requires_grad(true);
  return anchor;
}

}  // namespace

std::vector<std::vector<at::Tensor>> ShardedLookups(ShardComm* comm,
                                                    const std::vector<ShardedStorageLookups>& tables,
                                                    bool training) {
  std::vector<TableWork> work = ToWork(tables);
  if (!training) {
    std::vector<Exchange> exchanges;
    return Forward(comm, work, &exchanges);
  }
  std::vector<int64_t> storages, shards, flags, lookup_bags, lookup_start = {0}, bags, trainable;
  std::vector<at::Tensor> values, offsets, weights;
  for (const TableWork& w : work) {
    storages.push_back(reinterpret_cast<int64_t>(w.storage));
    shards.push_back(reinterpret_cast<int64_t>(w.shard));
    bags.push_back(w.bags);
    trainable.push_back(w.trainable ? 1 : 0);
    for (size_t k = 0; k < w.lookups.size(); ++k) {
      const LookupTensors& l = w.lookups[k];
      values.push_back(l.values);
      offsets.push_back(l.offsets);
      weights.push_back(l.weights.defined() ? l.weights.contiguous() : at::empty({0}, at::kFloat));
      flags.push_back((l.mean ? 1 : 0) | (l.weights.defined() ? 2 : 0));
      lookup_bags.push_back(w.lookup_bags[k]);
    }
    lookup_start.push_back(static_cast<int64_t>(values.size()));
  }
  torch::autograd::variable_list flat = ShardedLookupsFunction::apply(
      ShardAnchor(), storages, shards, reinterpret_cast<int64_t>(comm), values, offsets, weights, flags,
      lookup_bags, lookup_start, bags, trainable);
  std::vector<std::vector<at::Tensor>> results(work.size());
  size_t next = 0;
  for (size_t t = 0; t < work.size(); ++t) {
    const Layout layout(work[t].lookup_bags, work[t].bags, work[t].shard->dim);
    for (int i = 0; i < layout.outputs; ++i) results[t].push_back(flat[next++]);
  }
  return results;
}

}  // namespace tzrec
