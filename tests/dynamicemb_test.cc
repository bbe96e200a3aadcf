// dynamicemb (a feature's `dynamicemb`): the dynamic row index against a literal reference of
// its admission / eviction rules (linear scans), hand-worked orders of the score strategies,
// frequency admission and its bounded counter, saved state and its errors, config parsing and
// the initialisers' values; and TorchEasyRec's multi_tower_din_fg_dynamicemb_mock config
// training, resuming bit-for-bit, exporting and predicting through its indexes.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include <google/protobuf/text_format.h>

#include "managed_ids_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/embedding/dynamic_row_index.h"
#include "tzrec/embedding/row_init.h"
#include "tzrec/train/checkpoint.h"

namespace tzrec {
namespace {

using fg::DynamicEmbSpec;

DynamicEmbSpec Spec(int64_t capacity, DynamicEmbSpec::Score score, int64_t threshold = 0, int64_t counter = 0) {
  DynamicEmbSpec spec;
  spec.max_capacity = capacity;
  spec.score = score;
  spec.admission_threshold = threshold;
  spec.counter_capacity = counter > 0 ? counter : capacity;
  return spec;
}

// Raw ids (repeats allowed) as unique ascending ids with their counts.
std::pair<std::vector<int64_t>, std::vector<int64_t>> UniqueCounts(std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  std::vector<int64_t> unique, counts;
  for (int64_t id : ids) {
    if (!unique.empty() && unique.back() == id) {
      ++counts.back();
    } else {
      unique.push_back(id);
      counts.push_back(1);
    }
  }
  return {unique, counts};
}

// One step over raw ids (repeats allowed).
DynamicRowIndex::Admitted Step(DynamicRowIndex* index, const std::vector<int64_t>& ids) {
  const auto [unique, counts] = UniqueCounts(ids);
  return index->Train(unique, counts);
}

std::vector<int64_t> Held(const DynamicRowIndex& index) { return index.SaveState().ids; }

int64_t RowOf(const DynamicRowIndex& index, int64_t id) {
  int64_t row;
  index.Map(&id, 1, -1, &row);
  return row;
}

// The rules of dynamic_row_index.h written as directly as possible: linear scans, no ordered
// sets, no cursors.
class ReferenceIndex {
 public:
  explicit ReferenceIndex(const DynamicEmbSpec& spec) : spec_(spec) {}

  DynamicRowIndex::Admitted Train(const std::vector<int64_t>& ids, const std::vector<int64_t>& counts) {
    ++step_;
    const bool lfu = spec_.score == DynamicEmbSpec::Score::kLfu;
    std::vector<std::pair<int64_t, int64_t>> candidates;
    for (size_t i = 0; i < ids.size(); ++i) {
      Entry* held = Find(ids[i]);
      if (held) {
        held->score = lfu ? held->score + counts[i] : step_;
        held->touched = step_;
      } else {
        candidates.emplace_back(lfu ? counts[i] : step_, ids[i]);
      }
    }
    if (spec_.admission_threshold > 0) {
      std::vector<std::pair<int64_t, int64_t>> admitted;
      for (const auto& [score, id] : candidates) {
        const size_t i = std::find(ids.begin(), ids.end(), id) - ids.begin();
        counter_[id] += lfu ? counts[i] : 1;
        if (counter_[id] >= spec_.admission_threshold) {
          counter_.erase(id);
          admitted.emplace_back(score, id);
        }
      }
      candidates = admitted;
      while (static_cast<int64_t>(counter_.size()) > spec_.counter_capacity) {
        auto least = counter_.begin();
        for (auto it = counter_.begin(); it != counter_.end(); ++it) {
          if (it->second < least->second || (it->second == least->second && it->first > least->first)) least = it;
        }
        counter_.erase(least);
      }
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
    DynamicRowIndex::Admitted out;
    for (const auto& [score, id] : candidates) {
      int64_t row = -1;
      if (static_cast<int64_t>(held_.size()) < spec_.max_capacity) {
        row = static_cast<int64_t>(held_.size());
        held_.push_back({id, score, step_});
      } else if (spec_.score != DynamicEmbSpec::Score::kNoEviction) {
        Entry* victim = nullptr;
        for (Entry& e : held_) {
          if (e.touched == step_) continue;
          if (!victim || e.score < victim->score || (e.score == victim->score && e.id < victim->id)) victim = &e;
        }
        if (victim && victim->score <= score) {
          row = victim - held_.data();
          *victim = {id, score, step_};
        }
      }
      if (row < 0) continue;
      out.rows.push_back(row);
      out.ids.push_back(id);
    }
    return out;
  }

  DynamicRowIndex::State State() const {
    DynamicRowIndex::State state;
    std::vector<Entry> sorted = held_;
    std::sort(sorted.begin(), sorted.end(), [](const Entry& a, const Entry& b) { return a.id < b.id; });
    for (const Entry& e : sorted) {
      state.ids.push_back(e.id);
      state.scores.push_back(e.score);
    }
    state.step = step_;
    for (const auto& [id, count] : counter_) {
      state.counter_ids.push_back(id);
      state.counter_counts.push_back(count);
    }
    return state;
  }

 private:
  struct Entry {
    int64_t id, score, touched;
  };
  Entry* Find(int64_t id) {
    for (Entry& e : held_) {
      if (e.id == id) return &e;
    }
    return nullptr;
  }
  DynamicEmbSpec spec_;
  std::vector<Entry> held_;  // by row
  std::map<int64_t, int64_t> counter_;
  int64_t step_ = 0;
};

TEST(DynamicEmb, IndexMatchesALiteralReferenceOfItsRules) {
  std::mt19937_64 rng(7);
  const DynamicEmbSpec::Score scores[] = {DynamicEmbSpec::Score::kStep, DynamicEmbSpec::Score::kTimestamp,
                                          DynamicEmbSpec::Score::kLfu, DynamicEmbSpec::Score::kNoEviction};
  int64_t evictions = 0, admissions = 0;
  for (const auto score : scores) {
    for (const int64_t capacity : {1, 5, 17}) {
      for (const int64_t threshold : {0, 1, 3}) {
        SCOPED_TRACE(StrCat("score ", static_cast<int>(score), " capacity ", capacity, " threshold ", threshold));
        const DynamicEmbSpec spec = Spec(capacity, score, threshold, /*counter=*/threshold == 3 ? 6 : 0);
        DynamicRowIndex index(spec, "t");
        ReferenceIndex reference(spec);
        std::vector<int64_t> id_of_row;
        for (int step = 0; step < 60; ++step) {
          // Skewed ids: a few hot ones and a long tail, in batches of varying size.
          std::vector<int64_t> ids;
          const int n = 1 + static_cast<int>(rng() % 12);
          for (int i = 0; i < n; ++i) {
            ids.push_back(rng() % 3 == 0 ? static_cast<int64_t>(rng() % 4) : static_cast<int64_t>(rng() % 40) * 1000003);
          }
          const auto [unique, counts] = UniqueCounts(ids);
          const auto got = index.Train(unique, counts);
          const auto want = reference.Train(unique, counts);
          ASSERT_EQ(got.rows, want.rows) << "step " << step;
          ASSERT_EQ(got.ids, want.ids) << "step " << step;
          const auto a = index.SaveState(), b = reference.State();
          ASSERT_EQ(a.ids, b.ids) << "step " << step;
          ASSERT_EQ(a.scores, b.scores) << "step " << step;
          ASSERT_EQ(a.counter_ids, b.counter_ids) << "step " << step;
          ASSERT_EQ(a.counter_counts, b.counter_counts) << "step " << step;
          // Collision-free: every held id has its own row in [0, size).
          std::vector<int64_t> rows(a.ids.size());
          index.Map(a.ids.data(), static_cast<int64_t>(a.ids.size()), -1, rows.data());
          std::sort(rows.begin(), rows.end());
          for (size_t r = 0; r < rows.size(); ++r) ASSERT_EQ(rows[r], static_cast<int64_t>(r));
          id_of_row.resize(rows.size(), -1);
          for (size_t k = 0; k < got.rows.size(); ++k) {
            evictions += id_of_row[got.rows[k]] >= 0;
            id_of_row[got.rows[k]] = got.ids[k];
          }
          admissions += static_cast<int64_t>(got.rows.size());
        }
      }
    }
  }
  EXPECT_GT(evictions, 100);
  EXPECT_GT(admissions, 500);
}

TEST(DynamicEmb, StepEvictsTheLeastRecentlyUsedAndNeverAnIdOfTheSameStep) {
  DynamicRowIndex index(Spec(3, DynamicEmbSpec::Score::kStep), "t");
  auto a = Step(&index, {10, 20, 30});
  EXPECT_EQ(a.rows, (std::vector<int64_t>{0, 1, 2}));
  Step(&index, {10, 30});
  a = Step(&index, {40, 30});  // 20 (last seen at step 1) goes; 10 and 30 stay
  EXPECT_EQ(a.rows, (std::vector<int64_t>{1}));
  EXPECT_EQ(Held(index), (std::vector<int64_t>{10, 30, 40}));
  EXPECT_EQ(RowOf(index, 20), -1);
  // More new ids than evictable rows: ids of this step keep theirs, the rest is refused.
  a = Step(&index, {1, 2, 3, 40});
  EXPECT_EQ(a.ids, (std::vector<int64_t>{1, 2}));  // smaller ids first among equal scores
  EXPECT_EQ(Held(index), (std::vector<int64_t>{1, 2, 40}));
  EXPECT_EQ(index.size(), 3);
}

TEST(DynamicEmb, LfuKeepsFrequentIdsAndRefusesRarerNewcomers) {
  DynamicRowIndex index(Spec(2, DynamicEmbSpec::Score::kLfu), "t");
  Step(&index, {1, 1, 1, 2, 2, 2, 2});  // counts 3 and 4
  EXPECT_TRUE(Step(&index, {5}).rows.empty());  // 1 < 3: refused
  EXPECT_EQ(Held(index), (std::vector<int64_t>{1, 2}));
  const int64_t row_of_1 = RowOf(index, 1);
  EXPECT_EQ(row_of_1, 1);  // admitted highest count first: 2 took row 0
  auto a = Step(&index, {5, 5, 5});  // 3 >= 3: takes id 1's row
  EXPECT_EQ(a.ids, (std::vector<int64_t>{5}));
  EXPECT_EQ(a.rows, (std::vector<int64_t>{row_of_1}));
  EXPECT_EQ(index.SaveState().scores, (std::vector<int64_t>{4, 3}));
  Step(&index, {2, 2});
  EXPECT_EQ(index.SaveState().scores, (std::vector<int64_t>{6, 3}));  // counts accumulate
}

TEST(DynamicEmb, FrequencyAdmissionCountsStepsAndForgetsTheLeastSeen) {
  DynamicRowIndex index(Spec(100, DynamicEmbSpec::Score::kStep, /*threshold=*/3, /*counter=*/2), "t");
  EXPECT_TRUE(Step(&index, {7, 7, 7, 8}).rows.empty());  // a step counts once under STEP
  EXPECT_TRUE(Step(&index, {7, 8}).rows.empty());
  EXPECT_EQ(index.SaveState().counter_counts, (std::vector<int64_t>{2, 2}));
  Step(&index, {9});  // the counter holds 2: the least seen, then the larger id, is dropped
  EXPECT_EQ(index.SaveState().counter_ids, (std::vector<int64_t>{7, 8}));
  auto a = Step(&index, {7});
  EXPECT_EQ(a.ids, (std::vector<int64_t>{7}));
  EXPECT_EQ(index.SaveState().counter_ids, (std::vector<int64_t>{8}));  // admitted ids leave it
  DynamicRowIndex lfu(Spec(100, DynamicEmbSpec::Score::kLfu, /*threshold=*/3), "t");
  EXPECT_EQ(Step(&lfu, {4, 4, 4}).ids, (std::vector<int64_t>{4}));  // LFU counts occurrences
}

TEST(DynamicEmb, NoEvictionRefusesNewIdsOnceFull) {
  DynamicRowIndex index(Spec(2, DynamicEmbSpec::Score::kNoEviction), "t");
  Step(&index, {1, 2});
  EXPECT_TRUE(Step(&index, {3}).rows.empty());
  EXPECT_EQ(Held(index), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(index.unadmitted_row(), 2);
  EXPECT_EQ(index.missing_row(), 3);
}

TEST(DynamicEmb, SavedStateResumesTheSameDecisionsAndBadStateFails) {
  const DynamicEmbSpec spec = Spec(4, DynamicEmbSpec::Score::kStep, 2);
  DynamicRowIndex straight(spec, "t"), first(spec, "t");
  std::mt19937_64 rng(3);
  std::vector<std::vector<int64_t>> steps(30);
  for (auto& s : steps) {
    for (int i = 0; i < 5; ++i) s.push_back(static_cast<int64_t>(rng() % 9));
  }
  for (int i = 0; i < 12; ++i) Step(&first, steps[i]);
  DynamicRowIndex resumed(spec, "t");
  resumed.RestoreState(first.SaveState(), "ckpt");
  for (int i = 0; i < 30; ++i) {
    const auto a = Step(&straight, steps[i]);
    if (i < 12) continue;
    const auto b = Step(&resumed, steps[i]);
    EXPECT_EQ(a.ids, b.ids) << i;  // rows may be numbered differently after a restore
  }
  const auto a = straight.SaveState(), b = resumed.SaveState();
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.scores, b.scores);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.counter_ids, b.counter_ids);
  auto bad = a;
  bad.scores.pop_back();
  EXPECT_TZREC_ERROR(resumed.RestoreState(bad, "ckpt"), "ckpt: 4 ids but 3 scores");
  bad = a;
  std::swap(bad.ids[0], bad.ids[1]);
  EXPECT_TZREC_ERROR(resumed.RestoreState(bad, "ckpt"), "ckpt: ids are not strictly ascending");
  bad = a;
  bad.ids = {1, 2, 3, 4, 5};
  bad.scores = {1, 1, 1, 1, 1};
  EXPECT_TZREC_ERROR(resumed.RestoreState(bad, "ckpt"), "ckpt: 5 ids saved but max_capacity is 4");
}

std::optional<DynamicEmbSpec> ParseDynamicEmb(const std::string& text) {
  protos::IdFeature feature;
  google::protobuf::TextFormat::Parser parser;
  parser.AllowPartialMessage(true);
  EXPECT_TRUE(parser.ParseFromString(text, &feature)) << text;
  return fg::ParseDynamicEmbSpec(feature, "feature_configs[0].id_feature");
}

TEST(DynamicEmb, ConfigParsingDefaultsAndErrors) {
  auto spec = ParseDynamicEmb(R"pb(dynamicemb { max_capacity: 10000 })pb");
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->score, DynamicEmbSpec::Score::kStep);
  EXPECT_EQ(spec->init.mode, fg::DynamicEmbInit::Mode::kUniform);  // TorchRec's bound over max_capacity
  EXPECT_DOUBLE_EQ(spec->init.lower, -0.01);
  EXPECT_DOUBLE_EQ(spec->init.upper, 0.01);
  EXPECT_EQ(spec->eval_value, 0.0);
  EXPECT_EQ(spec->admission_threshold, 0);
  EXPECT_FALSE(ParseDynamicEmb(R"pb(hash_bucket_size: 10)pb").has_value());
  spec = ParseDynamicEmb(R"pb(dynamicemb { max_capacity: 100 score_strategy: "LFU"
        initializer_args { mode: "NORMAL" std_dev: 0.05 } eval_initializer_args { value: 0.5 }
        frequency_admission_strategy { threshold: 5 initializer_args { mode: "CONSTANT" value: -1 } } })pb");
  EXPECT_EQ(spec->score, DynamicEmbSpec::Score::kLfu);
  EXPECT_EQ(spec->init.mode, fg::DynamicEmbInit::Mode::kNormal);
  EXPECT_FLOAT_EQ(spec->init.std_dev, 0.05f);
  EXPECT_EQ(spec->eval_value, 0.5);
  EXPECT_EQ(spec->admission_threshold, 5);
  EXPECT_EQ(spec->unadmitted_value, -1.0);
  EXPECT_EQ(spec->counter_capacity, 100);  // the table's max_capacity unless set
  EXPECT_TZREC_ERROR(ParseDynamicEmb(R"pb(dynamicemb { max_capacity: 0 })pb"),
                     "feature_configs[0].id_feature.dynamicemb.max_capacity 0 must be in [1, ");
  EXPECT_TZREC_ERROR(ParseDynamicEmb(R"pb(dynamicemb { max_capacity: 9 score_strategy: "CUSTOMIZED" })pb"),
                     "dynamicemb.score_strategy CUSTOMIZED needs scores set by Python code");
  EXPECT_TZREC_ERROR(ParseDynamicEmb(R"pb(dynamicemb { max_capacity: 9 score_strategy: "LRU" })pb"),
                     "dynamicemb.score_strategy 'LRU' is not one of");
  EXPECT_TZREC_ERROR(ParseDynamicEmb(R"pb(dynamicemb { max_capacity: 9 initializer_args { mode: "XAVIER" } })pb"),
                     "dynamicemb.initializer_args.mode 'XAVIER' is not one of");
  EXPECT_TZREC_ERROR(ParseDynamicEmb(R"pb(dynamicemb { max_capacity: 9 eval_initializer_args { mode: "UNIFORM" } })pb"),
                     "dynamicemb.eval_initializer_args.mode 'UNIFORM': ids without a row read one CONSTANT value");
  EXPECT_TZREC_ERROR(ParseDynamicEmb(R"pb(dynamicemb { max_capacity: 9 init_table: "/tmp/t" })pb"),
                     "dynamicemb.init_table: loading a dynamicemb dump is not supported");
}

TEST(DynamicEmb, InitialisersDrawTheirDistributionsAndArePureFunctionsOfTheId) {
  auto draw = [](RowInit init, int64_t rows, int dim) {
    std::vector<int64_t> keys(rows);
    for (int64_t i = 0; i < rows; ++i) keys[i] = i * 7919 + 123456789012345;
    std::vector<float> out(rows * dim);
    InitializeRows(init, keys.data(), rows, 0, dim, out.data(), dim);
    return out;
  };
  RowInit normal;
  normal.seed = 42;
  normal.mode = RowInit::Mode::kNormal;
  normal.mean = 0.5;
  normal.std_dev = 0.05;
  const std::vector<float> values = draw(normal, 4000, 16);
  double sum = 0, squares = 0;
  for (float v : values) {
    sum += v;
    squares += (v - 0.5) * (v - 0.5);
  }
  EXPECT_NEAR(sum / values.size(), 0.5, 0.002);
  EXPECT_NEAR(std::sqrt(squares / values.size()), 0.05, 0.002);
  EXPECT_EQ(draw(normal, 4000, 16), values);  // pure: the same ids give the same rows
  RowInit truncated = normal;
  truncated.mode = RowInit::Mode::kTruncatedNormal;
  truncated.low = 0.45;
  truncated.high = 0.5;
  for (float v : draw(truncated, 500, 8)) {
    ASSERT_GE(v, 0.45f);
    ASSERT_LE(v, 0.5f);
  }
  RowInit constant;
  constant.mode = RowInit::Mode::kConstant;
  constant.value = -0.25;
  for (float v : draw(constant, 3, 4)) EXPECT_EQ(v, -0.25f);
}

// TorchEasyRec's dynamicemb test config: user_id (STEP, NORMAL init, admission after 5 steps;
// pooled and in the sequence group) and id_8 (STEP) with small capacities and user_id admitted
// after 2 steps, so ids wait for admission and compete for rows as the run goes.
class DynamicEmbTraining : public ::testing::Test {
 protected:
  static constexpr const char* kSmallTables =
      R"("feature_configs[0].id_feature.dynamicemb.max_capacity": 2,
         "feature_configs[0].id_feature.dynamicemb.frequency_admission_strategy.threshold": 2,
         "feature_configs[0].id_feature.dynamicemb.frequency_admission_strategy.counter_capacity": 1000,
         "feature_configs[7].id_feature.dynamicemb.max_capacity": 6)";

  TrainEvalOptions Options(int64_t steps, bool continue_train, const std::string& model_dir,
                           const std::string& edits = kSmallTables) {
    TrainEvalOptions options = base_;
    options.model_dir = dir_.File(model_dir);
    options.continue_train = continue_train;
    options.edit_config_json = StrCat(R"({"data_config.batch_size": 16, "data_config.shuffle": false,
        "data_config.num_workers": 1, "train_config.num_epochs": 0, "train_config.num_steps": )", steps,
        R"(, "train_config.save_checkpoints_steps": 4)", edits.empty() ? "" : ", ", edits, "}");
    return options;
  }

  void SetUp() override {
    config_ = LoadPipelineConfig(testing::ReferenceConfig("multi_tower_din_fg_dynamicemb_mock.config"));
    ASSERT_TRUE(config_.feature_configs(0).id_feature().has_dynamicemb());
    // Its vocab_file lives in TorchEasyRec's test data: one of the same shape here.
    testing::WriteFile(dir_.File("id_vocab_list_1"), "xyz\n<OOV>\nabc\nefg\n");
    for (auto& feature : *config_.mutable_feature_configs()) {
      if (feature.has_id_feature() && feature.id_feature().has_vocab_file()) {
        feature.mutable_id_feature()->set_vocab_file(dir_.File("id_vocab_list_1"));
      }
    }
    SavePipelineConfig(config_, dir_.File("pipeline.config"));
    base_ = testing::MockDataOptions(dir_, config_, dir_.File("pipeline.config"));
  }

  testing::TempDir dir_;
  protos::EasyRecConfig config_;
  TrainEvalOptions base_;
};

TEST_F(DynamicEmbTraining, TrainsResumesBitForBitAndServesThroughItsIndexes) {
  int dynamic_features = 0;
  for (const auto& feature : config_.feature_configs()) {
    dynamic_features += feature.has_id_feature() && feature.id_feature().has_dynamicemb();
  }
  ASSERT_EQ(dynamic_features, 2);
  const auto straight = testing::ExpectResumeIsBitForBit(
      [&](int64_t steps, bool resume, const std::string& name) { return Options(steps, resume, name); }, dir_, 4, 12,
      ".dynamicemb_", 3 * 5);
  auto held = [](const std::map<std::string, at::Tensor>& tensors, const std::string& table) {
    const at::Tensor ids = tensors.at("embedding_group." + table + ".weight.dynamicemb_ids");
    return std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
  };
  // user_id: ids seen twice hold rows, the others wait in the admission counter.
  const std::vector<int64_t> users = held(straight.last, "user_id_emb");
  EXPECT_GE(users.size(), 1u);
  EXPECT_LE(users.size(), 2u);
  EXPECT_GT(straight.last.at("embedding_group.user_id_emb.weight.dynamicemb_counter_ids").numel(), 10);
  EXPECT_EQ(straight.last.at("embedding_group.user_id_emb.weight").size(0), static_cast<int64_t>(users.size()));
  // id_8: full at 6 rows; recently seen ids pushed out the others.
  const std::vector<int64_t> items = held(straight.last, "id_8_emb");
  EXPECT_EQ(items.size(), 6u);
  EXPECT_EQ(straight.last.at("embedding_group.id_8_emb.weight").sizes(), (std::vector<int64_t>{6, 16}));
  std::vector<int64_t> gone;
  const std::vector<int64_t> before = held(straight.first, "id_8_emb");
  std::set_difference(before.begin(), before.end(), items.begin(), items.end(), std::back_inserter(gone));
  EXPECT_FALSE(gone.empty());
  EXPECT_TRUE(testing::LastEvalResult(dir_.File("straight")).contains("auc"));

  // The export carries the indexes: predict from it equals predict from the checkpoint.
  const auto manifest = testing::ExpectExportPredictsLikeCheckpoint(dir_, dir_.File("straight"), base_.eval_input_path);
  int with_index = 0;
  for (const auto& table : manifest["tables"]) with_index += table.contains("dynamicemb");
  EXPECT_EQ(with_index, 3);  // user_id pooled and in the sequence group, id_8
  // With the default INT8 tables the held rows are quantised (the index as before): predict
  // moves by the quantisation error only.
  const auto int8 = testing::ExpectExportPredictsLikeCheckpoint(dir_, dir_.File("straight"), base_.eval_input_path,
                                                                "INT8", 2e-2);
  int int8_with_index = 0, int8_stored = 0;
  for (const auto& table : int8["tables"]) {
    int8_with_index += table.contains("dynamicemb");
    int8_stored += table.contains("dynamicemb") && table["dtype"] == "INT8";
  }
  EXPECT_EQ(int8_with_index, 3);
  EXPECT_GE(int8_stored, 1);  // the pooled ones (sequence tables follow QUANT_EC_EMB, off by default)
}

// The config as written (1M and 100k rows of capacity, admission after 5 steps) trains, its
// tables holding only the ids admitted so far.
TEST_F(DynamicEmbTraining, TheConfigAsWrittenTrainsWithRowsForAdmittedIdsOnly) {
  testing::DeterministicRuntime();
  TrainAndEvaluate(Options(8, false, "as_written", ""));
  const auto tensors = LoadCheckpointTensors(ListCheckpoints(dir_.File("as_written")).back().path);
  const at::Tensor users = tensors.at("embedding_group.user_id_emb.weight");
  const at::Tensor items = tensors.at("embedding_group.id_8_emb.weight");
  EXPECT_LT(users.size(0), 200);   // of 1000000
  EXPECT_GT(items.size(0), 0);     // no admission: every id seen
  EXPECT_LT(items.size(0), 2000);  // of 100000
  EXPECT_EQ(tensors.at("embedding_group.user_id_emb.weight.dynamicemb_step").item<int64_t>(), 8);
  EXPECT_TRUE(testing::LastEvalResult(dir_.File("as_written")).contains("auc"));
}

}  // namespace
}  // namespace tzrec
