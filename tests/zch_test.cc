// Zero-collision hashing (a feature's `zch`): the managed-collision index against a literal
// reference of TorchRec's MCH algorithm (full stable sorts), hand-worked admission and
// eviction orders of the three policies, collision-freedom, history sizing, saved state and
// its errors, config parsing; and TorchEasyRec's multi_tower_din_zch_fg_mock config training,
// resuming bit-for-bit, exporting and predicting with its indexes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include <google/protobuf/text_format.h>

#include "managed_ids_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/embedding/zch_row_index.h"
#include "tzrec/train/checkpoint.h"

namespace tzrec {
namespace {

using fg::ZchSpec;
constexpr int64_t kEmpty = std::numeric_limits<int64_t>::max();

ZchSpec Spec(int64_t size, int64_t interval, ZchSpec::Policy policy, float decay = 1.0f) {
  ZchSpec spec;
  spec.size = size;
  spec.eviction_interval = interval;
  spec.policy = policy;
  spec.decay_exponent = decay;
  return spec;
}

// One forward's ids.
bool Record(ZchRowIndex* index, const std::vector<int64_t>& ids) {
  return index->Record({{ids.data(), static_cast<int64_t>(ids.size())}});
}

std::vector<int64_t> Rows(const ZchRowIndex& index, const std::vector<int64_t>& ids) {
  std::vector<int64_t> rows(ids.size());
  index.Map(ids.data(), static_cast<int64_t>(ids.size()), rows.data());
  return rows;
}

// One round of ids (a forward with interval 1): records, coalesces, evicts.
std::vector<int64_t> Round(ZchRowIndex* index, const std::vector<int64_t>& ids) {
  EXPECT_TRUE(Record(index, ids));
  return index->Evict(index->TakeHistory());
}

// TorchRec's MCH update written out literally: full stable sorts over every slot and
// newcomer, as torch.argsort(stable=True) does. The reference twin of ZchRowIndex::Evict.
struct ReferenceZch {
  ZchSpec spec;
  ZchRowIndex::State state;

  float Distance(int64_t last) const {
    return std::pow(static_cast<float>(state.step - last + 1), spec.decay_exponent);
  }
  double Score(int64_t count, int64_t last) const {
    switch (spec.policy) {
      case ZchSpec::Policy::kLfu:
        return static_cast<double>(count);
      case ZchSpec::Policy::kLru:
        return -static_cast<double>(Distance(last));
      case ZchSpec::Policy::kDistanceLfu:
        return static_cast<double>(static_cast<float>(count) / Distance(last));
    }
    return 0;
  }

  std::vector<int64_t> Evict(const ZchRowIndex::History& h) {
    const int64_t size = spec.size;
    const bool counts = spec.policy != ZchSpec::Policy::kLru, lasts = spec.policy != ZchSpec::Policy::kLfu;
    std::vector<size_t> order(h.ids.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return h.counts[a] > h.counts[b]; });
    std::vector<int64_t> new_ids, new_counts, new_lasts;
    for (size_t i : order) {
      const int64_t pos = std::lower_bound(state.sorted_ids.begin(), state.sorted_ids.end() - 1, h.ids[i]) -
                          state.sorted_ids.begin();
      if (state.sorted_ids[pos] == h.ids[i]) {
        if (counts) state.counts[pos] += h.counts[i];
        if (lasts) state.last_access[pos] = h.last_access[i];
      } else {
        new_ids.push_back(h.ids[i]);
        new_counts.push_back(h.counts[i]);
        new_lasts.push_back(h.last_access[i]);
      }
    }
    if (counts) state.counts[size - 1] = std::numeric_limits<int64_t>::max();
    if (lasts) state.last_access[size - 1] = state.step;
    std::vector<double> merged;
    for (int64_t i = 0; i < size; ++i) merged.push_back(Score(counts ? state.counts[i] : 0, lasts ? state.last_access[i] : 0));
    for (size_t j = 0; j < new_ids.size(); ++j) merged.push_back(Score(new_counts[j], new_lasts[j]));
    std::vector<int64_t> ranked(merged.size());
    std::iota(ranked.begin(), ranked.end(), int64_t{0});
    std::stable_sort(ranked.begin(), ranked.end(), [&](int64_t a, int64_t b) { return merged[a] > merged[b]; });
    std::vector<int64_t> evicted, selected;
    for (size_t r = 0; r < ranked.size(); ++r) {
      if (static_cast<int64_t>(r) < size && ranked[r] >= size) selected.push_back(ranked[r] - size);
      if (static_cast<int64_t>(r) >= size && ranked[r] < size) evicted.push_back(ranked[r]);
    }
    std::vector<int64_t> rows;
    for (size_t k = 0; k < evicted.size(); ++k) {
      state.sorted_ids[evicted[k]] = new_ids[selected[k]];
      if (counts) state.counts[evicted[k]] = new_counts[selected[k]];
      if (lasts) state.last_access[evicted[k]] = new_lasts[selected[k]];
      rows.push_back(state.rows[evicted[k]]);
    }
    std::vector<int64_t> by_id(size);
    std::iota(by_id.begin(), by_id.end(), int64_t{0});
    std::stable_sort(by_id.begin(), by_id.end(),
                     [&](int64_t a, int64_t b) { return state.sorted_ids[a] < state.sorted_ids[b]; });
    for (auto* v : {&state.sorted_ids, &state.rows, &state.counts, &state.last_access}) {
      if (v->empty()) continue;
      std::vector<int64_t> out(size);
      for (int64_t i = 0; i < size; ++i) out[i] = (*v)[by_id[i]];
      *v = out;
    }
    std::sort(rows.begin(), rows.end());
    return rows;
  }
};

TEST(Zch, EvictionMatchesALiteralReferenceOfTorchRecsAlgorithm) {
  std::mt19937_64 rng(7);
  for (auto policy : {ZchSpec::Policy::kLfu, ZchSpec::Policy::kLru, ZchSpec::Policy::kDistanceLfu}) {
    for (int64_t size : {1, 2, 5, 64}) {
      for (float decay : {1.0f, 0.5f}) {
        SCOPED_TRACE(StrCat(static_cast<int>(policy), " size ", size, " decay ", decay));
        const ZchSpec spec = Spec(size, 3, policy, decay);
        ZchRowIndex index(spec, "t");
        ReferenceZch reference{spec, index.SaveState()};
        int64_t rounds = 0;
        for (int step = 0; step < 60; ++step) {
          // A skewed id stream over 200 ids: heavy hitters, ties, and ids seen once.
          std::vector<int64_t> ids;
          const int n = static_cast<int>(rng() % 40);
          for (int i = 0; i < n; ++i) {
            const int64_t r = static_cast<int64_t>(rng() % 1000);
            ids.push_back(r < 500 ? r % 7 : r % 200);
          }
          if (!Record(&index, ids)) continue;
          ++rounds;
          const ZchRowIndex::History history = index.TakeHistory();
          reference.state.step = index.SaveState().step;
          const std::vector<int64_t> expected_rows = reference.Evict(history);
          EXPECT_EQ(index.Evict(history), expected_rows);
          const ZchRowIndex::State got = index.SaveState();
          ASSERT_EQ(got.sorted_ids, reference.state.sorted_ids);
          ASSERT_EQ(got.rows, reference.state.rows);
          ASSERT_EQ(got.counts, reference.state.counts);
          ASSERT_EQ(got.last_access, reference.state.last_access);
        }
        EXPECT_EQ(rounds, 20);
      }
    }
  }
}

TEST(Zch, LfuAdmitsTheMostFrequentAndEvictsTheLeastCounted) {
  ZchRowIndex index(Spec(4, 1, ZchSpec::Policy::kLfu), "t");
  // Three usable rows; 40 ties 30 on count and loses on id order.
  EXPECT_EQ(Round(&index, {10, 10, 10, 20, 20, 30, 40}), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(Rows(index, {10, 20, 30, 40, 99}), (std::vector<int64_t>{0, 1, 2, 3, 3}));
  EXPECT_EQ(index.admitted(), 3);
  // 40 seen 5 times now outranks 30 (1): it takes 30's row, which must be re-initialised.
  EXPECT_EQ(Round(&index, {40, 40, 40, 40, 40}), (std::vector<int64_t>{2}));
  EXPECT_EQ(Rows(index, {10, 20, 30, 40}), (std::vector<int64_t>{0, 1, 3, 2}));
  // Counts accumulate across rounds: 20 (2 + 2) holds against a newcomer with 3.
  EXPECT_EQ(Round(&index, {20, 20, 50, 50, 50}), (std::vector<int64_t>{}));
  EXPECT_EQ(Rows(index, {20, 50}), (std::vector<int64_t>{1, 3}));
}

TEST(Zch, LruEvictsTheLeastRecentlySeen) {
  ZchRowIndex index(Spec(3, 1, ZchSpec::Policy::kLru), "t");
  EXPECT_EQ(Round(&index, {1, 2}), (std::vector<int64_t>{0, 1}));
  // Step 2 sees 2 again and a newcomer 3: 1 (last seen at step 1) goes, 3 takes its row.
  EXPECT_EQ(Round(&index, {2, 3}), (std::vector<int64_t>{0}));
  EXPECT_EQ(Rows(index, {1, 2, 3}), (std::vector<int64_t>{2, 1, 0}));
}

TEST(Zch, DistanceLfuDecaysOldCountsWhereLfuKeepsThem) {
  for (auto policy : {ZchSpec::Policy::kLfu, ZchSpec::Policy::kDistanceLfu}) {
    ZchRowIndex index(Spec(3, 1, policy), "t");
    Round(&index, {1, 1, 1, 1, 2});
    Round(&index, {2, 2});
    // Step 3: 3 seen 3 times. LFU: 1 (4) and 2 (3) hold, 2 wins the tie with the newcomer by
    // position. Distance-LFU: 1 scores 4/3 < 2's 3/2 < 3's 3/1, so 1 goes.
    const std::vector<int64_t> evicted = Round(&index, {3, 3, 3});
    if (policy == ZchSpec::Policy::kLfu) {
      EXPECT_TRUE(evicted.empty());
      EXPECT_EQ(Rows(index, {1, 2, 3}), (std::vector<int64_t>{0, 1, 2}));
    } else {
      EXPECT_EQ(evicted, (std::vector<int64_t>{0}));
      EXPECT_EQ(Rows(index, {1, 2, 3}), (std::vector<int64_t>{2, 1, 0}));
    }
  }
}

TEST(Zch, AdmittedIdsNeverShareARowAndTheLastRowIsKeptForTheRest) {
  std::mt19937_64 rng(11);
  ZchRowIndex index(Spec(50, 2, ZchSpec::Policy::kDistanceLfu, 0.7f), "t");
  for (int step = 0; step < 200; ++step) {
    std::vector<int64_t> ids;
    for (int i = 0; i < 64; ++i) ids.push_back(static_cast<int64_t>(rng() % (step < 100 ? 80 : 5000)) * 7919);
    if (Record(&index, ids)) index.Evict(index.TakeHistory());
    const ZchRowIndex::State state = index.SaveState();
    std::vector<int64_t> admitted;
    for (int64_t id : state.sorted_ids) {
      if (id != kEmpty) admitted.push_back(id);
    }
    ASSERT_LE(admitted.size(), 49u);
    const std::vector<int64_t> rows = Rows(index, admitted);
    ASSERT_EQ(std::set<int64_t>(rows.begin(), rows.end()).size(), rows.size());
    ASSERT_EQ(std::count(rows.begin(), rows.end(), 49), 0);
    std::vector<int64_t> sorted_rows = state.rows;
    std::sort(sorted_rows.begin(), sorted_rows.end());
    std::vector<int64_t> all(50);
    std::iota(all.begin(), all.end(), int64_t{0});
    ASSERT_EQ(sorted_rows, all);
  }
  EXPECT_EQ(index.admitted(), 49);
  EXPECT_EQ(Rows(index, {kEmpty, -5}), (std::vector<int64_t>{49, 49}));
}

TEST(Zch, HistoryIsSizedOnTheFirstForwardAndRoundsEndEveryInterval) {
  ZchRowIndex index(Spec(100, 2, ZchSpec::Policy::kLfu), "t");
  // 4 ids x interval 2 x 1.25 = room for 10 ids a round; the rest of the round is dropped.
  EXPECT_FALSE(Record(&index, {1, 2, 3, 4}));
  EXPECT_TRUE(Record(&index, {5, 6, 7, 8, 9, 10, 11, 12}));
  ZchRowIndex::History history = index.TakeHistory();
  EXPECT_EQ(history.ids, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_FALSE(Record(&index, {1}));
  EXPECT_TRUE(Record(&index, {1}));
  history = index.TakeHistory();
  EXPECT_EQ(history.counts, (std::vector<int64_t>{2}));
  // Ranks' rounds merge by id: counts add, the latest access wins.
  ZchRowIndex::History a{{1, 3}, {2, 1}, {4, 5}}, b{{1, 2}, {1, 7}, {6, 6}};
  ZchRowIndex::History merged = ZchRowIndex::History::Merge({a, b});
  EXPECT_EQ(merged.ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(merged.counts, (std::vector<int64_t>{3, 7, 1}));
  EXPECT_EQ(merged.last_access, (std::vector<int64_t>{6, 6, 5}));
}

TEST(Zch, SavedStateResumesTheSameRoundsAndBadStateFails) {
  std::mt19937_64 rng(3);
  auto stream = [&](int n) {
    std::vector<std::vector<int64_t>> forwards(n);
    for (auto& ids : forwards) {
      for (int i = 0; i < 30; ++i) ids.push_back(static_cast<int64_t>(rng() % 90));
    }
    return forwards;
  };
  const ZchSpec spec = Spec(20, 2, ZchSpec::Policy::kLru, 1.5f);
  ZchRowIndex straight(spec, "t"), resumed(spec, "t");
  auto run = [](ZchRowIndex* index, const std::vector<std::vector<int64_t>>& forwards) {
    for (const auto& ids : forwards) {
      if (Record(index, ids)) index->Evict(index->TakeHistory());
    }
  };
  const auto first = stream(6), second = stream(8);
  run(&straight, first);
  run(&straight, second);
  ZchRowIndex before(spec, "t");
  run(&before, first);
  resumed.RestoreState(before.SaveState(), "ckpt");
  run(&resumed, second);
  const ZchRowIndex::State a = straight.SaveState(), b = resumed.SaveState();
  EXPECT_EQ(a.sorted_ids, b.sorted_ids);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.last_access, b.last_access);
  EXPECT_EQ(a.step, 14);
  EXPECT_EQ(b.step, 14);

  ZchRowIndex::State bad = a;
  bad.rows[0] = bad.rows[1];
  EXPECT_TZREC_ERROR(resumed.RestoreState(bad, "ckpt"), "ckpt: zch rows of table 't' are not a permutation of [0, 20)");
  bad = a;
  std::swap(bad.sorted_ids[0], bad.sorted_ids[1]);
  EXPECT_TZREC_ERROR(resumed.RestoreState(bad, "ckpt"), "zch ids of table 't' are not sorted and unique at position 1");
  bad = a;
  bad.last_access.pop_back();
  EXPECT_TZREC_ERROR(resumed.RestoreState(bad, "ckpt"), "zch last_access_iter of table 't' has 19 entries, the table's zch_size is 20");
}

std::optional<ZchSpec> ParseZch(const std::string& text) {
  protos::IdFeature feature;
  google::protobuf::TextFormat::Parser parser;
  parser.AllowPartialMessage(true);
  EXPECT_TRUE(parser.ParseFromString(text, &feature)) << text;
  return fg::ParseZchSpec(feature, "feature_configs[0].id_feature");
}

TEST(Zch, ConfigParsingAndErrors) {
  auto spec = ParseZch(R"pb(feature_name: "a" zch { zch_size: 100 lru { decay_exponent: 2 } })pb");
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->size, 100);
  EXPECT_EQ(spec->eviction_interval, 5);  // TorchEasyRec's default
  EXPECT_EQ(spec->policy, ZchSpec::Policy::kLru);
  EXPECT_EQ(spec->decay_exponent, 2.0f);
  EXPECT_FALSE(ParseZch(R"pb(feature_name: "a" hash_bucket_size: 10)pb").has_value());
  spec = ParseZch(R"pb(zch { zch_size: 9 lfu {} threshold_filtering_func: "partial(dynamic_threshold_filter, threshold_skew_multiplier=5)" })pb");
  EXPECT_EQ(spec->filter, ZchSpec::Filter::kDynamic);
  EXPECT_EQ(spec->filter_param, 5.0);
  spec = ParseZch(R"pb(zch { zch_size: 9 lfu {} threshold_filtering_func: "average_threshold_filter" })pb");
  EXPECT_EQ(spec->filter, ZchSpec::Filter::kAverage);
  EXPECT_TZREC_ERROR(ParseZch(R"pb(zch { zch_size: 9 })pb"),
                     "feature_configs[0].id_feature.zch: needs an eviction policy");
  EXPECT_TZREC_ERROR(ParseZch(R"pb(zch { zch_size: 0 lfu {} })pb"), "zch.zch_size 0 must be in [1, ");
  EXPECT_TZREC_ERROR(ParseZch(R"pb(zch { zch_size: 9 lfu {} threshold_filtering_func: "lambda c: c > 2" })pb"),
                     "threshold_filtering_func: 'lambda c: c > 2' is not supported");
  EXPECT_TZREC_ERROR(ParseZch(R"pb(zch { zch_size: 9 lfu {} threshold_filtering_func: "partial(average_threshold_filter, 3)" })pb"),
                     "average_threshold_filter takes no parameter");
}

TEST(Zch, FiltersKeepOnlyIdsAboveTheirThreshold) {
  ZchSpec spec = Spec(10, 1, ZchSpec::Policy::kLfu);
  spec.filter = ZchSpec::Filter::kAverage;
  ZchRowIndex index(spec, "t");
  // Counts 3, 1, 1, 1 (mean 1.5): only 7 is admitted, into the last-ranked empty slot (TorchRec
  // fills empty rows from the top down).
  Round(&index, {7, 7, 7, 8, 9, 10});
  EXPECT_EQ(Rows(index, {7, 8, 9, 10}), (std::vector<int64_t>{8, 9, 9, 9}));
  spec.filter = ZchSpec::Filter::kDynamic;
  spec.filter_param = 2.0;  // threshold 2 / 4 ids x 8 ids seen = 4: 6 times passes, 1 does not
  ZchRowIndex dynamic(spec, "t");
  Round(&dynamic, {1, 1, 1, 1, 1, 1, 2, 3});
  EXPECT_EQ(dynamic.admitted(), 1);
}

// TorchEasyRec's zch test config (LFU and LRU tables, pooled and sequence, a zch sequence
// feature), with table sizes cut below the ~20 distinct values gen_data draws for these
// features, so that ids compete for rows every round (LRU tables every step: a batch of 16
// holds some of the item ids only, so the others age).
class ZchTraining : public ::testing::Test {
 protected:
  static constexpr const char* kSmallTables =
      R"("feature_configs[0].id_feature.zch.zch_size": 8, "feature_configs[1].id_feature.zch.zch_size": 8,
         "feature_configs[1].id_feature.zch.eviction_interval": 1,
         "feature_configs[23].sequence_feature.features[0].id_feature.zch.zch_size": 8,
         "feature_configs[23].sequence_feature.features[0].id_feature.zch.eviction_interval": 1,
         "feature_configs[24].sequence_id_feature.zch.zch_size": 10)";

  TrainEvalOptions Options(int64_t steps, bool continue_train, const std::string& model_dir) {
    TrainEvalOptions options = base_;
    options.model_dir = dir_.File(model_dir);
    options.continue_train = continue_train;
    options.edit_config_json = StrCat(R"({"data_config.batch_size": 16, "data_config.shuffle": false,
        "data_config.num_workers": 1, "train_config.num_epochs": 0, "train_config.num_steps": )", steps,
        R"(, "train_config.save_checkpoints_steps": 4, )", kSmallTables, "}");
    return options;
  }

  void SetUp() override {
    auto config = LoadPipelineConfig(testing::ReferenceConfig("multi_tower_din_zch_fg_mock.config"));
    ASSERT_TRUE(config.feature_configs(0).id_feature().has_zch());
    ASSERT_TRUE(config.feature_configs(23).sequence_feature().features(0).id_feature().has_zch());
    ASSERT_TRUE(config.feature_configs(24).sequence_id_feature().has_zch());
    // Data from the config as written: ids spread over its large zch sizes.
    base_ = testing::MockDataOptions(dir_, config, testing::ReferenceConfig("multi_tower_din_zch_fg_mock.config"));
  }

  testing::TempDir dir_;
  TrainEvalOptions base_;
};

std::vector<int64_t> Admitted(const std::map<std::string, at::Tensor>& tensors, const std::string& table) {
  const at::Tensor ids = tensors.at("embedding_group." + table + ".weight.zch_ids");
  std::vector<int64_t> out;
  for (int64_t i = 0; i < ids.numel(); ++i) {
    if (ids[i].item<int64_t>() != kEmpty) out.push_back(ids[i].item<int64_t>());
  }
  return out;
}

TEST_F(ZchTraining, TrainsResumesBitForBitAndServesThroughItsIndexes) {
  const auto straight = testing::ExpectResumeIsBitForBit(
      [&](int64_t steps, bool resume, const std::string& name) { return Options(steps, resume, name); }, dir_, 4, 12,
      ".zch_", 6 * 4);
  for (const std::string table : {"user_id_emb", "item_id_emb", "item_id_emb.seq", "click_50_seq__item_id_emb.seq",
                                  "user_id_emb.seq", "buy_50_user_id_seq_emb.seq"}) {
    SCOPED_TRACE(table);
    const std::vector<int64_t> before = Admitted(straight.first, table), after = Admitted(straight.last, table);
    const int64_t size = straight.last.at("embedding_group." + table + ".weight.zch_ids").numel();
    EXPECT_EQ(static_cast<int64_t>(after.size()), size - 1);  // full
    if (table.find("item_id") == std::string::npos) continue;
    // LRU tables: ids seen lately push out the others between steps 4 and 12.
    std::vector<int64_t> gone;
    std::set_difference(before.begin(), before.end(), after.begin(), after.end(), std::back_inserter(gone));
    EXPECT_FALSE(gone.empty());
  }
  EXPECT_TRUE(testing::LastEvalResult(dir_.File("straight")).contains("auc"));

  // The export carries the indexes: predict from it equals predict from the checkpoint.
  const auto manifest = testing::ExpectExportPredictsLikeCheckpoint(dir_, dir_.File("straight"), base_.eval_input_path);
  int with_zch = 0;
  for (const auto& table : manifest["tables"]) with_zch += table.contains("zch");
  EXPECT_EQ(with_zch, 6);
}

}  // namespace
}  // namespace tzrec
