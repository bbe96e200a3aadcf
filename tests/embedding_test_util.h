// Helpers of the embedding kernel tests: random lookups with duplicate ids, their kernel
// arguments, and one spec of every sparse optimizer (with and without weight decay).
#pragma once

#include <torch/torch.h>

#include <random>
#include <vector>

#include "tzrec/embedding/embedding_storage.h"
#include "tzrec/embedding/sparse_optimizer.h"
#include "tzrec/kernels/cpu_kernels.h"

namespace tzrec {

struct RandomLookup {
  std::vector<int64_t> values, offsets;
  int table;
  bool mean;
  std::vector<float> weights;  // per id for weighted features, else empty
};

inline RandomLookup MakeLookup(std::mt19937& rng, int table, int64_t rows, int64_t bags, bool mean,
                        bool weighted = false) {
  RandomLookup l{{}, {0}, table, mean, {}};
  std::uniform_int_distribution<int> length(0, 4);
  // Few distinct ids so duplicates across bags and lookups are common.
  std::uniform_int_distribution<int64_t> id(0, std::min<int64_t>(rows, 12) - 1);
  for (int64_t b = 0; b < bags; ++b) {
    int n = length(rng);
    for (int i = 0; i < n; ++i) l.values.push_back(id(rng));
    l.offsets.push_back(static_cast<int64_t>(l.values.size()));
  }
  if (weighted) {
    std::uniform_real_distribution<float> weight(-1.5f, 2.0f);
    for (size_t i = 0; i < l.values.size(); ++i) l.weights.push_back(weight(rng));
  }
  return l;
}

inline std::vector<LookupArgs> Args(const std::vector<RandomLookup>& lookups,
                             const std::vector<EmbeddingTable*>& tables) {
  std::vector<LookupArgs> args;
  for (const auto& l : lookups) {
    const EmbeddingTable* t = tables[l.table];
    args.push_back({l.values.data(), l.offsets.data(), t->first_row(), t->rows(), l.mean,
                    t->trainable(), l.weights.empty() ? nullptr : l.weights.data()});
  }
  return args;
}

inline std::vector<SparseOptimizerSpec> AllSpecs() {
  using Kind = SparseOptimizerSpec::Kind;
  using Mode = SparseOptimizerSpec::WeightDecayMode;
  std::vector<SparseOptimizerSpec> specs;
  SparseOptimizerSpec s;
  s.lr = 0.05f;
  s.kind = Kind::kSgd;
  specs.push_back(s);
  s.kind = Kind::kAdagrad;
  s.initial_accumulator = 0.1f;
  specs.push_back(s);
  s.gradient_clipping = true;
  s.max_gradient = 0.05f;
  specs.push_back(s);
  s.gradient_clipping = false;
  s.kind = Kind::kRowwiseAdagrad;
  for (Mode mode : {Mode::kNone, Mode::kL2, Mode::kDecouple}) {
    s.weight_decay_mode = mode;
    s.weight_decay = mode == Mode::kNone ? 0.0f : 0.01f;
    specs.push_back(s);
  }
  for (Kind kind : {Kind::kAdam, Kind::kLamb, Kind::kPartialRowwiseLamb, Kind::kPartialRowwiseAdam,
                    Kind::kLarsSgd, Kind::kAdadelta, Kind::kRmsprop}) {
    s = SparseOptimizerSpec();
    s.kind = kind;
    s.lr = kind == Kind::kLarsSgd || kind == Kind::kAdadelta ? 0.5f : 0.01f;
    specs.push_back(s);
    s.weight_decay = 0.02f;
    specs.push_back(s);
  }
  return specs;
}

}  // namespace tzrec
