// The sharded exchange (sharded_lookup.h) against one process holding the whole table, with
// three ranks as threads over an in-memory ShardComm: a row count and a dim that do not divide
// by three (row-wise ranks hold 4/3/3 rows, column-wise ones 1/2/2 columns, so the messages
// carry padded rows), multi-id, empty, weighted and mean-pooled bags and a sequence lookup.
// Forward outputs must equal the whole table's lookups, and one SGD step over the three ranks'
// batches must leave the same table as one step over their concatenation. (The two-rank
// training runs of dist_test.cc cover the same path end to end, with evenly split tables.)
#include "tzrec/embedding/sharded_lookup.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "tzrec/embedding/sparse_optimizer.h"

namespace tzrec {
namespace {

constexpr int kWorld = 3;
constexpr int64_t kRows = 10;
constexpr int kDim = 5;

// What the ranks post for one collective, and a barrier between its phases.
struct Hub {
  std::vector<at::Tensor> posted = std::vector<at::Tensor>(kWorld);
  std::vector<std::vector<int64_t>> counts = std::vector<std::vector<int64_t>>(kWorld);
  testing::ThreadBarrier barrier{kWorld};
  void Wait() { barrier.Wait(); }
};

class ThreadComm : public ShardComm {
 public:
  ThreadComm(Hub* hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return kWorld; }

  std::vector<int64_t> ExchangeCounts(const std::vector<int64_t>& send_counts) override {
    hub_->counts[rank_] = send_counts;
    hub_->Wait();
    std::vector<int64_t> out;
    for (int r = 0; r < kWorld; ++r) out.push_back(hub_->counts[r][rank_]);
    hub_->Wait();
    return out;
  }

  at::Tensor AllToAll(const at::Tensor& input, const std::vector<int64_t>& send_counts,
                      const std::vector<int64_t>& recv_counts) override {
    hub_->posted[rank_] = input.contiguous();
    hub_->counts[rank_] = send_counts;
    hub_->Wait();
    std::vector<at::Tensor> parts;
    for (int r = 0; r < kWorld; ++r) {
      int64_t offset = 0;
      for (int d = 0; d < rank_; ++d) offset += hub_->counts[r][d];
      EXPECT_EQ(hub_->counts[r][rank_], recv_counts[r]) << "rank " << rank_ << " from " << r;
      parts.push_back(hub_->posted[r].narrow(0, offset, hub_->counts[r][rank_]));
    }
    at::Tensor out = at::cat(parts, 0).clone();
    hub_->Wait();  // the posted inputs stay alive until every rank has read them
    return out;
  }

  at::Tensor AllGather(const at::Tensor& input) override {
    hub_->posted[rank_] = input.contiguous();
    hub_->Wait();
    at::Tensor out = at::cat(hub_->posted, 0).clone();
    hub_->Wait();
    return out;
  }

 private:
  Hub* hub_;
  int rank_;
};

// One rank's batch: `pooled` lookups of 5 bags each and one sequence lookup.
struct Batch {
  std::vector<std::vector<int64_t>> pooled_bags, sequence_steps;
  std::vector<float> weights;  // the first pooled lookup's, per id
};

Batch BatchOfRank(int r) {
  Batch b;
  // Rows 0..9: multi-id bags that span every rank's rows, an empty bag, repeats.
  b.pooled_bags = {{r, 3, 7, 9}, {}, {(r + 4) % 10}, {1, 1, 2}, {9 - r, 5}};
  b.sequence_steps = {{r + 2}, {8}, {}, {0, 6}};
  for (size_t i = 0; i < 10; ++i) b.weights.push_back(0.5f + 0.25f * static_cast<float>((i + r) % 4));
  return b;
}

LookupTensors Lookup(const std::vector<std::vector<int64_t>>& bags, bool mean, const std::vector<float>* weights) {
  std::vector<int64_t> values, offsets = {0};
  for (const auto& bag : bags) {
    values.insert(values.end(), bag.begin(), bag.end());
    offsets.push_back(static_cast<int64_t>(values.size()));
  }
  LookupTensors l;
  l.values = torch::tensor(values, torch::kLong);
  l.offsets = torch::tensor(offsets, torch::kLong);
  l.table = nullptr;
  l.mean = mean;
  if (weights) l.weights = torch::tensor(*weights, torch::kFloat);
  return l;
}

// Lookups of `batches` (one or all ranks' bags, concatenated): weighted sum, mean, sequence.
void MakeLookups(const std::vector<Batch>& batches, const EmbeddingTable* table, std::vector<LookupTensors>* pooled,
                 std::vector<LookupTensors>* sequences) {
  std::vector<std::vector<int64_t>> bags, steps;
  std::vector<float> weights;
  for (const Batch& b : batches) {
    bags.insert(bags.end(), b.pooled_bags.begin(), b.pooled_bags.end());
    steps.insert(steps.end(), b.sequence_steps.begin(), b.sequence_steps.end());
    weights.insert(weights.end(), b.weights.begin(), b.weights.end());
  }
  *pooled = {Lookup(bags, false, &weights), Lookup(bags, true, nullptr)};
  *sequences = {Lookup(steps, false, nullptr)};
  for (auto& l : *pooled) l.table = table;
  for (auto& l : *sequences) l.table = table;
}

SparseOptimizerSpec Sgd() {
  SparseOptimizerSpec spec;
  spec.kind = SparseOptimizerSpec::Kind::kSgd;
  spec.lr = 0.5f;
  return spec;
}

// Upstream gradients of one rank's outputs: fixed, different per rank and per element.
std::vector<at::Tensor> Upstream(const std::vector<at::Tensor>& outputs, int r) {
  std::vector<at::Tensor> grads;
  for (size_t i = 0; i < outputs.size(); ++i) {
    grads.push_back(torch::arange(outputs[i].numel(), torch::kFloat).reshape(outputs[i].sizes()).mul(0.01 * (r + 1))
                        .add(0.1 * static_cast<double>(i + 1)).sin());
  }
  return grads;
}

void CheckShardedMatchesOneProcess(TableShard::Type type) {
  SCOPED_TRACE(TableShard::TypeName(type));
  std::vector<Batch> batches;
  for (int r = 0; r < kWorld; ++r) batches.push_back(BatchOfRank(r));

  // One process: the whole table, every rank's forward, then one step over the global batch.
  SparseOptimizer whole_optimizer(Sgd());
  EmbeddingStorage whole(kDim, &whole_optimizer);
  EmbeddingTable* whole_table = whole.AddTable("t", kRows, true);
  whole.Allocate();
  const at::Tensor initial = whole_table->weight().clone();
  std::vector<std::vector<at::Tensor>> expected(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    std::vector<LookupTensors> pooled, sequences;
    MakeLookups({batches[r]}, whole_table, &pooled, &sequences);
    expected[r] = StorageLookup(&whole, pooled, sequences, 5, /*training=*/false);
  }
  {
    std::vector<LookupTensors> pooled, sequences;
    MakeLookups(batches, whole_table, &pooled, &sequences);
    std::vector<at::Tensor> out = StorageLookup(&whole, pooled, sequences, 5 * kWorld, /*training=*/true);
    // The ranks' upstream gradients in global order; each rank's loss is a mean over its own
    // batch, so the global step sees them divided by the world size.
    std::vector<std::vector<at::Tensor>> per_rank(kWorld);
    for (int r = 0; r < kWorld; ++r) per_rank[r] = Upstream(expected[r], r);
    at::Tensor loss = torch::zeros({});
    for (size_t i = 0; i < out.size(); ++i) {
      std::vector<at::Tensor> parts;
      for (int r = 0; r < kWorld; ++r) parts.push_back(per_rank[r][i]);
      loss = loss + (out[i] * at::cat(parts, 0)).sum() / kWorld;
    }
    loss.backward();
    whole_optimizer.FinishStep();
  }

  // Three ranks, each holding its shard.
  Hub hub;
  std::vector<std::vector<at::Tensor>> forward(kWorld);
  std::vector<at::Tensor> trained(kWorld), started(kWorld);
  std::vector<TableShard> shards(kWorld);
  auto rank_main = [&](int r) {
    TableShard& shard = shards[r];
    shard.type = type;
    shard.rows = kRows;
    shard.dim = kDim;
    shard.world_size = kWorld;
    shard.rank = r;
    shard.owner = 1;
    ThreadComm comm(&hub, r);
    SparseOptimizer optimizer(Sgd());
    EmbeddingStorage storage(shard.local_dim(r), &optimizer);
    EmbeddingTable* table = storage.AddTable("t", shard.local_rows(r), true);
    storage.Allocate(false);
    storage.InitializeTable(table, kRows, kDim, shard.row_offset(r), shard.row_step(), shard.column_begin(r));
    started[r] = table->weight().clone();
    ShardedStorageLookups lookups;
    lookups.storage = &storage;
    lookups.shard = &shard;
    lookups.bags = 5;
    MakeLookups({batches[r]}, table, &lookups.pooled, &lookups.sequences);
    forward[r] = ShardedLookups(&comm, {lookups}, /*training=*/false)[0];
    std::vector<at::Tensor> out = ShardedLookups(&comm, {lookups}, /*training=*/true)[0];
    const std::vector<at::Tensor> upstream = Upstream(out, r);
    at::Tensor loss = torch::zeros({});
    for (size_t i = 0; i < out.size(); ++i) loss = loss + (out[i] * upstream[i]).sum();
    loss.backward();
    optimizer.FinishStep();
    trained[r] = table->weight().clone();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) threads.emplace_back(rank_main, r);
  for (auto& t : threads) t.join();

  // The shards' values, put back where they sit in the logical table.
  auto assemble = [&](const std::vector<at::Tensor>& parts) {
    at::Tensor logical = torch::full({kRows, kDim}, std::nanf(""));
    for (int r = 0; r < kWorld; ++r) {
      const TableShard& s = shards[r];
      for (int64_t l = 0; l < s.local_rows(r); ++l) {
        logical[s.row_offset(r) + l * s.row_step()].narrow(0, s.column_begin(r), s.local_dim(r)).copy_(parts[r][l]);
      }
    }
    return logical;
  };
  EXPECT_TRUE(torch::equal(assemble(started), initial)) << "shards start from the whole table's values";
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(forward[r].size(), expected[r].size());
    for (size_t i = 0; i < expected[r].size(); ++i) {
      EXPECT_TRUE(torch::allclose(forward[r][i], expected[r][i], 1e-5, 1e-6))
          << "rank " << r << " output " << i << "\n" << forward[r][i] << "\n" << expected[r][i];
    }
  }
  const at::Tensor after = assemble(trained);
  EXPECT_FALSE(torch::equal(after, initial)) << "the step changed nothing";
  EXPECT_TRUE(torch::allclose(after, whole_table->weight(), 1e-5, 1e-6))
      << after << "\n" << whole_table->weight();
}

TEST(ShardedLookup, RowWiseMatchesOneProcess) { CheckShardedMatchesOneProcess(TableShard::Type::kRowWise); }

TEST(ShardedLookup, ColumnWiseWithUnevenColumnsMatchesOneProcess) {
  CheckShardedMatchesOneProcess(TableShard::Type::kColumnWise);
}

TEST(ShardedLookup, TableWiseMatchesOneProcess) { CheckShardedMatchesOneProcess(TableShard::Type::kTableWise); }

}  // namespace
}  // namespace tzrec
