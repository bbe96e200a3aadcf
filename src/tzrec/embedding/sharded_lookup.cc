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

// This rank's outgoing ids of one table, grouped by the rank holding their rows: rank d's ids
// are ids[id_begin[d], id_begin[d + 1]) (local rows there), and its segments (the ids of one
// bag that rank d holds) lens / keys / scales[seg_begin[d], seg_begin[d + 1]), in (lookup,
// bag) order, so each rank's keys increase.
struct Outgoing {
  std::vector<int64_t> id_begin, seg_begin;  // [world + 1]
  std::vector<int64_t> ids, lens, keys;
  std::vector<float> scales;
  std::vector<float> weights;  // parallel to ids, weighted tables only
  int64_t ids_to(int d) const { return id_begin[d + 1] - id_begin[d]; }
  int64_t segments_to(int d) const { return seg_begin[d + 1] - seg_begin[d]; }
};

// Two passes: count what goes to each rank, then write every id and segment straight to its
// place (no per-rank list grows as it goes; this runs for every id of every step).
Outgoing GroupByOwner(const TableWork& t, const Layout& layout) {
  const TableShard& shard = *t.shard;
  const int world = shard.world_size;
  const bool to_every_rank = shard.type == TableShard::Type::kColumnWise;
  const float inverse_world = 1.0f / static_cast<float>(world);
  const int64_t rows = shard.rows;
  std::vector<int64_t> id_count(world, 0), seg_count(world, 0);
  std::vector<int64_t> id_base;  // per lookup: its first id's index in `owner`
  int64_t total_ids = 0;
  for (const LookupTensors& l : t.lookups) {
    id_base.push_back(total_ids);
    total_ids += l.values.numel();
  }
  std::vector<int32_t> owner(to_every_rank ? 0 : total_ids);
  std::vector<int64_t> seen(world, -1);  // the last bag (running index) with an id for each rank
  int64_t bag_index = 0;
  for (size_t k = 0; k < t.lookups.size(); ++k) {
    const int64_t* values = t.lookups[k].values.data_ptr<int64_t>();
    const int64_t* offsets = t.lookups[k].offsets.data_ptr<int64_t>();
    int32_t* owner_of = owner.data() + (to_every_rank ? 0 : id_base[k]);
    for (int64_t b = 0; b < layout.bags_of(k); ++b, ++bag_index) {
      const int64_t first = offsets[b], last = offsets[b + 1];
      for (int64_t i = first; i < last; ++i) {
        if (static_cast<uint64_t>(values[i]) >= static_cast<uint64_t>(rows)) {
          Fail("embedding id ", values[i], " out of range [0, ", rows, ")");
        }
      }
      if (first == last) continue;
      if (to_every_rank) {
        for (int d = 0; d < world; ++d) {
          id_count[d] += last - first;
          ++seg_count[d];
        }
        continue;
      }
      if (last - first == 1) {  // one id: one segment for its owner
        const int d = shard.OwnerOfRow(values[first]);
        owner_of[first] = d;
        ++id_count[d];
        ++seg_count[d];
        continue;
      }
      for (int64_t i = first; i < last; ++i) {
        const int d = shard.OwnerOfRow(values[i]);
        owner_of[i] = d;
        ++id_count[d];
        if (seen[d] != bag_index) {
          seen[d] = bag_index;
          ++seg_count[d];
        }
      }
    }
  }
  Outgoing out;
  out.id_begin.assign(world + 1, 0);
  out.seg_begin.assign(world + 1, 0);
  for (int d = 0; d < world; ++d) {
    out.id_begin[d + 1] = out.id_begin[d] + id_count[d];
    out.seg_begin[d + 1] = out.seg_begin[d] + seg_count[d];
  }
  out.ids.resize(out.id_begin[world]);
  if (t.weighted) out.weights.resize(out.id_begin[world]);
  out.lens.resize(out.seg_begin[world]);
  out.keys.resize(out.seg_begin[world]);
  out.scales.resize(out.seg_begin[world]);
  std::vector<int64_t> next_id(out.id_begin.begin(), out.id_begin.end() - 1);
  std::vector<int64_t> next_seg(out.seg_begin.begin(), out.seg_begin.end() - 1);
  for (size_t k = 0; k < t.lookups.size(); ++k) {
    const int64_t* values = t.lookups[k].values.data_ptr<int64_t>();
    const int64_t* offsets = t.lookups[k].offsets.data_ptr<int64_t>();
    const float* weights = t.lookups[k].weights.defined() && t.lookups[k].weights.numel() > 0
                               ? t.lookups[k].weights.data_ptr<float>()
                               : nullptr;
    const int32_t* owner_of = owner.data() + (to_every_rank ? 0 : id_base[k]);
    for (int64_t b = 0; b < layout.bags_of(k); ++b) {
      const int64_t first = offsets[b], last = offsets[b + 1];
      if (first == last) continue;
      const float scale = (t.lookups[k].mean ? 1.0f / static_cast<float>(last - first) : 1.0f) * inverse_world;
      const int64_t key = layout.base[k] + b;
      auto add_segment = [&](int d, int64_t len) {
        const int64_t s = next_seg[d]++;
        out.lens[s] = len;
        out.keys[s] = key;
        out.scales[s] = scale;
      };
      if (to_every_rank) {
        for (int d = 0; d < world; ++d) {
          std::copy(values + first, values + last, out.ids.begin() + next_id[d]);
          if (t.weighted) {
            for (int64_t i = first; i < last; ++i) out.weights[next_id[d] + i - first] = weights ? weights[i] : 1.0f;
          }
          next_id[d] += last - first;
          add_segment(d, last - first);
        }
        continue;
      }
      if (last - first == 1) {  // the common single-id bag: one segment, one rank
        const int d = owner_of[first];
        if (t.weighted) out.weights[next_id[d]] = weights ? weights[first] : 1.0f;
        out.ids[next_id[d]++] = shard.LocalRow(values[first]);
        add_segment(d, 1);
        continue;
      }
      // Ids of this bag grouped by owner, each group contiguous in its owner's list.
      for (int d = 0; d < world; ++d) {
        int64_t n = 0;
        for (int64_t i = first; i < last; ++i) {
          if (owner_of[i] != d) continue;
          if (t.weighted) out.weights[next_id[d]] = weights ? weights[i] : 1.0f;
          out.ids[next_id[d]++] = shard.LocalRow(values[i]);
          ++n;
        }
        if (n > 0) add_segment(d, n);
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

// Where every table's rows sit in the flat buffer of one all-to-all of float rows: the message
// of each rank (to it, or from it) holds every table's block in table order; table t's block
// of rank r has rows[t][r] rows of widths[t] floats.
struct RowBlocks {
  std::vector<std::vector<int64_t>> begin;  // [rank][table]: first float of the block
  std::vector<int64_t> per_rank;            // floats to / from each rank
  int64_t total = 0;
  RowBlocks(const std::vector<std::vector<int64_t>>& rows, const std::vector<int>& widths, int world)
      : begin(world, std::vector<int64_t>(rows.size())), per_rank(world, 0) {
    for (int r = 0; r < world; ++r) {
      for (size_t t = 0; t < rows.size(); ++t) {
        begin[r][t] = total;
        const int64_t n = rows[t][r] * widths[t];
        per_rank[r] += n;
        total += n;
      }
    }
  }
};

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
      c[d * counts.size(1) + t] = outgoing[t].ids_to(d);
      c[d * counts.size(1) + num_tables + t] = outgoing[t].segments_to(d);
    }
  }
  const std::vector<int64_t> ones(world, 1);
  at::Tensor recv_counts = comm->AllToAll(counts, ones, ones).contiguous();
  const int64_t* rc = recv_counts.data_ptr<int64_t>();
  std::vector<std::vector<int64_t>> recv_id_counts(num_tables, std::vector<int64_t>(world));
  for (size_t t = 0; t < num_tables; ++t) {
    Exchange& ex = (*exchanges)[t];
    ex.seg_counts.resize(world);
    ex.recv_seg_counts.resize(world);
    for (int d = 0; d < world; ++d) {
      ex.seg_counts[d] = outgoing[t].segments_to(d);
      recv_id_counts[t][d] = rc[d * recv_counts.size(1) + t];
      ex.recv_seg_counts[d] = rc[d * recv_counts.size(1) + num_tables + t];
    }
  }

  // 2. Ids and bag lengths of every table in one int64 exchange: to each rank, every table's
  // ids, then every table's lengths. What comes in goes straight to each table's tensors.
  std::vector<int64_t> send_counts(world, 0), receive_counts(world, 0);
  for (int d = 0; d < world; ++d) {
    for (size_t t = 0; t < num_tables; ++t) {
      send_counts[d] += outgoing[t].ids_to(d) + outgoing[t].segments_to(d);
      receive_counts[d] += recv_id_counts[t][d] + (*exchanges)[t].recv_seg_counts[d];
    }
  }
  int64_t payload_size = 0;
  for (int64_t n : send_counts) payload_size += n;
  at::Tensor payload = at::empty({payload_size}, at::kLong);
  int64_t* out_ptr = payload.data_ptr<int64_t>();
  for (int d = 0; d < world; ++d) {
    for (size_t t = 0; t < num_tables; ++t) {
      out_ptr = std::copy(outgoing[t].ids.begin() + outgoing[t].id_begin[d],
                          outgoing[t].ids.begin() + outgoing[t].id_begin[d + 1], out_ptr);
    }
    for (size_t t = 0; t < num_tables; ++t) {
      out_ptr = std::copy(outgoing[t].lens.begin() + outgoing[t].seg_begin[d],
                          outgoing[t].lens.begin() + outgoing[t].seg_begin[d + 1], out_ptr);
    }
  }
  at::Tensor received = comm->AllToAll(payload, send_counts, receive_counts).contiguous();
  std::vector<int64_t*> ids_at(num_tables), offsets_at(num_tables);
  for (size_t t = 0; t < num_tables; ++t) {
    Exchange& ex = (*exchanges)[t];
    int64_t ids = 0, segments = 0;
    for (int r = 0; r < world; ++r) {
      ids += recv_id_counts[t][r];
      segments += ex.recv_seg_counts[r];
    }
    ex.recv_ids = at::empty({ids}, at::kLong);
    ex.recv_offsets = at::empty({segments + 1}, at::kLong);
    ids_at[t] = ex.recv_ids.data_ptr<int64_t>();
    offsets_at[t] = ex.recv_offsets.data_ptr<int64_t>();
    *offsets_at[t] = 0;
  }
  const int64_t* in = received.data_ptr<int64_t>();
  for (int r = 0; r < world; ++r) {
    for (size_t t = 0; t < num_tables; ++t) {
      ids_at[t] = std::copy(in, in + recv_id_counts[t][r], ids_at[t]);
      in += recv_id_counts[t][r];
    }
    for (size_t t = 0; t < num_tables; ++t) {
      for (int64_t j = 0; j < (*exchanges)[t].recv_seg_counts[r]; ++j, ++offsets_at[t]) {
        offsets_at[t][1] = offsets_at[t][0] + in[j];
      }
      in += (*exchanges)[t].recv_seg_counts[r];
    }
  }
  // Weights travel with their ids, for the weighted tables only.
  for (size_t t = 0; t < num_tables; ++t) {
    (*exchanges)[t].recv_weights = at::empty({tables[t].weighted ? (*exchanges)[t].recv_ids.numel() : 0}, at::kFloat);
  }
  if (any_weighted) {
    std::vector<int64_t> weight_send(world, 0), weight_recv(world, 0);
    std::vector<float> weights;
    for (int d = 0; d < world; ++d) {
      for (size_t t = 0; t < num_tables; ++t) {
        if (!tables[t].weighted) continue;
        weights.insert(weights.end(), outgoing[t].weights.begin() + outgoing[t].id_begin[d],
                       outgoing[t].weights.begin() + outgoing[t].id_begin[d + 1]);
        weight_send[d] += outgoing[t].ids_to(d);
        weight_recv[d] += recv_id_counts[t][d];
      }
    }
    at::Tensor got = comm->AllToAll(ToTensor(weights, at::kFloat), weight_send, weight_recv).contiguous();
    const float* w = got.data_ptr<float>();
    std::vector<float*> weights_at(num_tables);
    for (size_t t = 0; t < num_tables; ++t) weights_at[t] = (*exchanges)[t].recv_weights.data_ptr<float>();
    for (int r = 0; r < world; ++r) {
      for (size_t t = 0; t < num_tables; ++t) {
        if (!tables[t].weighted) continue;
        weights_at[t] = std::copy(w, w + recv_id_counts[t][r], weights_at[t]);
        w += recv_id_counts[t][r];
      }
    }
  }

  // 3. Pool this rank's rows for the received segments of every table, straight into the
  // message that takes the partial sums back to the ranks that asked.
  std::vector<int> widths(num_tables);
  std::vector<std::vector<int64_t>> partial_rows(num_tables), back_rows(num_tables);
  for (size_t t = 0; t < num_tables; ++t) {
    Exchange& ex = (*exchanges)[t];
    ex.sent_keys = ToTensor(outgoing[t].keys, at::kLong);
    ex.sent_scales = ToTensor(outgoing[t].scales, at::kFloat);
    ex.padded_width = PaddedWidth(*tables[t].shard);
    widths[t] = ex.padded_width;
    partial_rows[t] = ex.recv_seg_counts;
    back_rows[t] = ex.seg_counts;
  }
  const RowBlocks partial_blocks(partial_rows, widths, world), back_blocks(back_rows, widths, world);
  at::Tensor partials = at::empty({partial_blocks.total}, at::kFloat);
  for (size_t t = 0; t < num_tables; ++t) {
    const Exchange& ex = (*exchanges)[t];
    const int local_dim = tables[t].shard->local_dim(tables[t].shard->rank);
    const int64_t padded = ex.padded_width;
    LookupArgs args = LocalArgs(*tables[t].storage, ex, true);
    for (int r = 0; r < world; ++r) {
      const int64_t segments = ex.recv_seg_counts[r];
      float* dst = partials.data_ptr<float>() + partial_blocks.begin[r][t];
      if (local_dim == padded && segments > 0) {
        StorageForward(tables[t].storage, {args}, segments, dst);
      } else if (segments > 0) {
        // A narrower column slice than the message's rows (uneven column_wise split): padded.
        std::fill(dst, dst + segments * padded, 0.0f);
        if (local_dim > 0) {
          at::Tensor local = at::empty({segments, local_dim}, at::kFloat);
          StorageForward(tables[t].storage, {args}, segments, local.data_ptr<float>());
          for (int64_t j = 0; j < segments; ++j) {
            std::memcpy(dst + j * padded, local.data_ptr<float>() + j * local_dim, sizeof(float) * local_dim);
          }
        }
      }
      args.offsets += segments;  // the next rank's segments
    }
  }

  // 4. The partial sums go back to the ranks that asked, every table in one exchange.
  const at::Tensor back = comm->AllToAll(partials, partial_blocks.per_rank, back_blocks.per_rank).contiguous();

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
    std::vector<float*> out_data;
    std::vector<int64_t> out_width;
    for (const at::Tensor& o : outs) {
      out_data.push_back(o.data_ptr<float>());
      out_width.push_back(o.size(1));
    }
    auto row_of = [&](size_t k, int64_t b) {
      return out_data[layout.tensor[k]] + b * out_width[layout.tensor[k]] + layout.column[k];
    };
    const int64_t* keys = ex.sent_keys.data_ptr<int64_t>();
    int64_t row = 0;
    for (int d = 0; d < world; ++d) {
      const int begin = shard.column_begin(d), local = shard.local_dim(d);
      const float* src = back.data_ptr<float>() + back_blocks.begin[d][t];
      size_t k = 0;  // keys to each rank increase: their lookup only moves forward
      for (int64_t j = 0; j < ex.seg_counts[d]; ++j, ++row, src += ex.padded_width) {
        while (keys[row] >= layout.base[k + 1]) ++k;
        float* dst = row_of(k, keys[row] - layout.base[k]) + begin;
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
  std::vector<int> widths(num_tables);
  std::vector<std::vector<int64_t>> send_rows(num_tables), recv_rows(num_tables);
  for (size_t t = 0; t < num_tables; ++t) {
    widths[t] = exchanges[t].padded_width;
    send_rows[t] = exchanges[t].seg_counts;
    recv_rows[t] = exchanges[t].recv_seg_counts;
  }
  const RowBlocks send_blocks(send_rows, widths, world), recv_blocks(recv_rows, widths, world);
  at::Tensor send = at::empty({send_blocks.total}, at::kFloat);
  for (size_t t = 0; t < num_tables; ++t) {
    const TableShard& shard = *tables[t].shard;
    const Exchange& ex = exchanges[t];
    const Layout layout(tables[t].lookup_bags, tables[t].bags, shard.dim);
    std::vector<const float*> grad_data;
    std::vector<int64_t> grad_width;
    for (const at::Tensor& g : grads[t]) {
      grad_data.push_back(g.defined() ? g.data_ptr<float>() : nullptr);
      grad_width.push_back(g.defined() ? g.size(1) : 0);
    }
    const int64_t* keys = ex.sent_keys.data_ptr<int64_t>();
    const float* scales = ex.sent_scales.data_ptr<float>();
    const int64_t padded = ex.padded_width;
    int64_t row = 0;
    for (int d = 0; d < world; ++d) {
      const int begin = shard.column_begin(d), local = shard.local_dim(d);
      float* dst = send.data_ptr<float>() + send_blocks.begin[d][t];
      size_t k = 0;
      for (int64_t j = 0; j < ex.seg_counts[d]; ++j, ++row, dst += padded) {
        while (keys[row] >= layout.base[k + 1]) ++k;
        const float* g = grad_data[layout.tensor[k]];
        if (!g) {
          std::fill(dst, dst + padded, 0.0f);
          continue;
        }
        const float* src = g + (keys[row] - layout.base[k]) * grad_width[layout.tensor[k]] + layout.column[k] + begin;
        for (int col = 0; col < local; ++col) dst[col] = src[col] * scales[row];
        std::fill(dst + local, dst + padded, 0.0f);
      }
    }
  }
  const at::Tensor received = comm->AllToAll(send, send_blocks.per_rank, recv_blocks.per_rank).contiguous();
  for (size_t t = 0; t < num_tables; ++t) {
    const TableShard& shard = *tables[t].shard;
    const Exchange& ex = exchanges[t];
    const int64_t segments = ex.recv_offsets.numel() - 1;
    const int local_dim = shard.local_dim(shard.rank);
    if (!tables[t].trainable || segments == 0 || local_dim == 0) continue;
    // This table's gradient rows from every rank, in received-segment order.
    at::Tensor local = at::empty({segments, local_dim}, at::kFloat);
    float* dst = local.data_ptr<float>();
    for (int r = 0; r < world; ++r) {
      const float* src = received.data_ptr<float>() + recv_blocks.begin[r][t];
      if (local_dim == ex.padded_width) {
        dst = std::copy(src, src + ex.recv_seg_counts[r] * local_dim, dst);
        continue;
      }
      for (int64_t j = 0; j < ex.recv_seg_counts[r]; ++j, dst += local_dim) {
        std::memcpy(dst, src + j * ex.padded_width, sizeof(float) * local_dim);
      }
    }
    EmbeddingStorage* storage = tables[t].storage;
    LookupArgs args = LocalArgs(*storage, ex, true);
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
