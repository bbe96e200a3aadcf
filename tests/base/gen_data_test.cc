// gen_data for multi-task configs: one label per task tower from the hidden model, dependent
// (conversion-style) tasks, softmax and regression towers, per-label oracles in oracle.json,
// and pooled grouping keys (grouped_auc grouping_key, jrc_loss session_name); the
// target/history signal of sequence groups, sequence steps and flags, and unchanged output for
// configs without sequence groups.
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "gen_data_test_util.h"
#include "test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/config/edit_config.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/input/dataset.h"
#include "tzrec/features/feature.h"
#include "tzrec/fg/feature_generator.h"
#include "tzrec/tools/create_fg_json.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/tools/gen_data_raw.h"
#include "tzrec/tools/gen_data_sequence.h"

namespace tzrec {
namespace {

using namespace gen_data_test;  // NOLINT: the shared helpers read as local ones

nlohmann::json OracleJson(const std::string& dir) {
  return nlohmann::json::parse(ReadFileToString(dir + "/oracle.json"));
}

const GenDataLabel& Label(const GenDataResult& result, const std::string& name) {
  for (const auto& label : result.labels) {
    if (label.label == name) return label;
  }
  ADD_FAILURE() << "no label " << name;
  static GenDataLabel none;
  return none;
}

// Checks the clk (ctr tower) / buy (cvr tower, drawn only where clk = 1) labels of a taobao
// multi-task config: oracles, positive rates, buy => clk on every row read back, oracle.json.
void CheckClkBuy(const std::string& name, const std::string& edits) {
  SCOPED_TRACE(name + " " + edits);
  testing::TempDir dir;
  auto config = Config(name, edits);
  auto result = Generate(config, dir.File("data"));
  ASSERT_EQ(result.labels.size(), 2u);
  const GenDataLabel& clk = result.labels[0];
  const GenDataLabel& buy = result.labels[1];
  EXPECT_EQ(clk.label, "clk");
  EXPECT_EQ(clk.tower, "ctr");
  EXPECT_TRUE(clk.depends_on.empty());
  EXPECT_EQ(buy.label, "buy");
  EXPECT_EQ(buy.tower, "cvr");
  EXPECT_EQ(buy.depends_on, std::vector<std::string>{"clk"});
  EXPECT_GT(clk.oracle_auc, 0.7);
  EXPECT_GT(buy.oracle_auc, 0.7);
  EXPECT_LT(buy.oracle_auc, 1.0);
  EXPECT_GE(clk.positive_rate, 0.2);
  EXPECT_LE(clk.positive_rate, 0.4);
  EXPECT_GE(buy.positive_rate, 0.02);
  EXPECT_LE(buy.positive_rate, 0.12);
  EXPECT_DOUBLE_EQ(result.oracle_auc, clk.oracle_auc);
  EXPECT_DOUBLE_EQ(result.positive_rate, clk.positive_rate);

  auto rows = ReadBack(config, result.train_pattern);
  ASSERT_EQ(rows.size, 4000);
  const auto& clicks = rows.labels.at("clk");
  const auto& buys = rows.labels.at("buy");
  int64_t clicked = 0, bought = 0, bought_without_click = 0;
  for (int64_t r = 0; r < rows.size; ++r) {
    ASSERT_TRUE(clicks[r] == 0.0f || clicks[r] == 1.0f) << clicks[r];
    ASSERT_TRUE(buys[r] == 0.0f || buys[r] == 1.0f) << buys[r];
    clicked += clicks[r] > 0.5f;
    bought += buys[r] > 0.5f;
    bought_without_click += buys[r] > 0.5f && clicks[r] < 0.5f;
  }
  EXPECT_EQ(bought_without_click, 0);
  EXPECT_NEAR(static_cast<double>(clicked) / rows.size, clk.positive_rate, 1e-9);
  EXPECT_NEAR(static_cast<double>(bought) / rows.size, buy.positive_rate, 1e-9);
  // Conversions are not a fixed share of clicks: the cvr tower's own logit decides.
  EXPECT_LT(bought, clicked / 2);

  auto json = OracleJson(dir.File("data"));
  EXPECT_DOUBLE_EQ(json["oracle_auc"].get<double>(), result.oracle_auc);
  EXPECT_EQ(json["eval_pattern"].get<std::string>(), result.eval_pattern);
  EXPECT_EQ(json["train_pattern"].get<std::string>(), result.train_pattern);
  EXPECT_NEAR(json["labels"]["clk"]["oracle_auc"].get<double>(), clk.oracle_auc, 1e-5);
  EXPECT_NEAR(json["labels"]["buy"]["oracle_auc"].get<double>(), buy.oracle_auc, 1e-5);
  EXPECT_NEAR(json["labels"]["buy"]["positive_rate"].get<double>(), buy.positive_rate, 1e-5);
  ASSERT_EQ(json["towers"].size(), 2u);
  EXPECT_EQ(json["towers"]["ctr"]["label"].get<std::string>(), "clk");
  EXPECT_EQ(json["towers"]["cvr"]["label"].get<std::string>(), "buy");
  EXPECT_NEAR(json["towers"]["cvr"]["oracle_auc"].get<double>(), buy.oracle_auc, 1e-5);
}

TEST(GenData, MmoeTaobaoLabelsPerTaskWithConversions) {
  // No relation_tower_names: cvr (buy) depends on the first tower (ctr, clk).
  CheckClkBuy("mmoe_taobao.config", kParquet);
}

TEST(GenData, DbmtlTaobaoLabelsFollowRelationTowers) {
  CheckClkBuy("dbmtl_taobao.config", kParquet);
  CheckClkBuy("dbmtl_taobao.config", kCsv);
}

TEST(GenData, PleTaobaoLabelsPerTaskWithConversions) {
  CheckClkBuy("ple_taobao.config", kParquet);
}

TEST(GenData, LabelFieldsWithoutTowerStayIndependent) {
  // A third label field no tower names: its own draw from the shared logit, no dependency.
  testing::TempDir dir;
  auto config = Config("mmoe_taobao.config", kParquet);
  config.mutable_data_config()->add_label_fields("extra");
  auto result = Generate(config, dir.File("data"));
  ASSERT_EQ(result.labels.size(), 3u);
  const GenDataLabel& extra = Label(result, "extra");
  EXPECT_TRUE(extra.tower.empty());
  EXPECT_TRUE(extra.depends_on.empty());
  EXPECT_GT(extra.oracle_auc, 0.7);
  EXPECT_GT(extra.positive_rate, 0.1);
  auto rows = ReadBack(config, result.train_pattern);
  int64_t extra_without_click = 0;
  for (int64_t r = 0; r < rows.size; ++r) {
    extra_without_click += rows.labels.at("extra")[r] > 0.5f && rows.labels.at("clk")[r] < 0.5f;
  }
  EXPECT_GT(extra_without_click, 50);
  auto json = OracleJson(dir.File("data"));
  EXPECT_TRUE(json["labels"].contains("extra"));
  EXPECT_EQ(json["towers"].size(), 2u);
}

// Groups of the key ids in `rows`: (groups, groups of >= 2 rows, groups with both classes
// of `label`).
struct GroupCounts {
  int64_t groups = 0, several = 0, both = 0, rows_in_several = 0;
};
GroupCounts CountGroups(const ReadRows& rows, const std::string& label) {
  std::map<int64_t, std::pair<int64_t, int64_t>> groups;  // id -> rows, positives
  for (int64_t r = 0; r < rows.size; ++r) {
    EXPECT_EQ(rows.keys[r].size(), 1u) << "row " << r;
    if (rows.keys[r].empty()) continue;
    auto& g = groups[rows.keys[r][0]];
    ++g.first;
    g.second += rows.labels.at(label)[r] > 0.5f;
  }
  GroupCounts counts;
  counts.groups = static_cast<int64_t>(groups.size());
  for (const auto& [id, g] : groups) {
    if (g.first >= 2) {
      ++counts.several;
      counts.rows_in_several += g.first;
    }
    if (g.second > 0 && g.second < g.first) ++counts.both;
  }
  return counts;
}

TEST(GenData, GroupedAucKeyFormsGroupsFromRawColumns) {
  // FG_DAG: user_id reads the raw column user:user_id.
  for (const char* edits : {kParquet, kCsv}) {
    SCOPED_TRACE(edits);
    testing::TempDir dir;
    auto plain = Config("mmoe_taobao.config", edits);
    auto config = plain;
    config.mutable_model_config()->mutable_mmoe()->mutable_task_towers(0)->add_metrics()
        ->mutable_grouped_auc()->set_grouping_key("user_id");
    auto result = Generate(config, dir.File("data"));
    auto rows = ReadBack(config, result.train_pattern, "user_id");
    ASSERT_EQ(rows.size, 4000);
    auto counts = CountGroups(rows, "clk");
    // About rows / 16 = 250 keys, nearly all of them with several rows and both classes.
    EXPECT_LE(counts.groups, 250);
    EXPECT_GE(counts.groups, 200);
    EXPECT_GE(counts.rows_in_several, 3900);
    EXPECT_GE(counts.both, 150);
    // The eval split gets its own, smaller pool (eval rows / 16).
    auto eval = CountGroups(ReadBack(config, result.eval_pattern, "user_id"), "clk");
    EXPECT_LE(eval.groups, 125);
    EXPECT_GE(eval.both, 60);
    EXPECT_GT(result.oracle_auc, 0.7);

    // Without the metric user_id stays a Zipf draw over its 1.1M buckets: mostly single rows.
    testing::TempDir plain_dir;
    auto plain_result = Generate(plain, plain_dir.File("data"));
    auto plain_rows = ReadBack(plain, plain_result.train_pattern, "user_id");
    int64_t single = 0;
    std::map<int64_t, int> seen;
    for (const auto& ids : plain_rows.keys) {
      if (!ids.empty()) ++seen[ids[0]];
    }
    for (const auto& [id, n] : seen) single += n == 1;
    EXPECT_GT(single, 1000);
  }
}

TEST(GenData, JrcSessionsFormGroupsOfEncodedIds) {
  // dbmtl_taobao_jrc: FG_NONE, jrc_loss session_name user_id, num_class 2 towers.
  for (const char* edits : {kParquet, kCsv}) {
    SCOPED_TRACE(edits);
    testing::TempDir dir;
    auto config = Config("dbmtl_taobao_jrc.config", edits);
    auto result = Generate(config, dir.File("data"));
    ASSERT_EQ(result.labels.size(), 2u);
    EXPECT_EQ(result.labels[0].num_class, 2);
    EXPECT_EQ(result.labels[1].depends_on, std::vector<std::string>{"clk"});
    EXPECT_GT(result.labels[0].oracle_auc, 0.7);
    EXPECT_GT(result.labels[1].oracle_auc, 0.7);
    EXPECT_GE(result.labels[1].positive_rate, 0.02);
    auto rows = ReadBack(config, result.train_pattern, "user_id");
    ASSERT_EQ(rows.size, 4000);
    auto counts = CountGroups(rows, "clk");
    EXPECT_LE(counts.groups, 250);
    EXPECT_GE(counts.groups, 200);
    EXPECT_GE(counts.rows_in_several, 3900);
    EXPECT_GE(counts.both, 150);
    for (int64_t r = 0; r < rows.size; ++r) {
      const float clk = rows.labels.at("clk")[r], buy = rows.labels.at("buy")[r];
      ASSERT_TRUE(clk == 0.0f || clk == 1.0f);
      ASSERT_TRUE(buy == 0.0f || (buy == 1.0f && clk == 1.0f)) << "row " << r;
    }
  }
}

TEST(GenData, L2LossTowerGetsContinuousLabels) {
  testing::TempDir dir;
  auto config = Config("mmoe_taobao.config", kParquet);
  auto* cvr = config.mutable_model_config()->mutable_mmoe()->mutable_task_towers(1);
  cvr->clear_losses();
  cvr->add_losses()->mutable_l2_loss();
  cvr->clear_metrics();
  cvr->add_metrics()->mutable_mean_squared_error();
  auto result = Generate(config, dir.File("data"));
  const GenDataLabel& buy = Label(result, "buy");
  EXPECT_TRUE(buy.regression);
  EXPECT_GT(buy.oracle_mse, 0.0);
  EXPECT_GT(buy.mean, 0.1);
  auto rows = ReadBack(config, result.train_pattern);
  const auto& values = rows.labels.at("buy");
  const auto& clicks = rows.labels.at("clk");
  int64_t fractional = 0;
  double sum = 0, squares = 0;
  for (int64_t r = 0; r < rows.size; ++r) {
    const float y = values[r];
    ASSERT_GT(y, -1.5f);
    ASSERT_LT(y, 6.5f);
    if (clicks[r] < 0.5f) ASSERT_EQ(y, 0.0f) << "row " << r;  // gated by clk
    fractional += y != std::round(y);
    sum += y;
    squares += y * y;
  }
  EXPECT_GT(fractional, rows.size / 5);
  const double variance = squares / rows.size - (sum / rows.size) * (sum / rows.size);
  // The oracle mean P(clk | x) * 5 * sigmoid(logit) explains a good part of the label
  // variance (the rest is mostly the click draw it is gated by).
  EXPECT_LT(buy.oracle_mse, 0.7 * variance) << "variance " << variance;
  EXPECT_NEAR(sum / rows.size, buy.mean, 1e-4);
  auto json = OracleJson(dir.File("data"));
  EXPECT_NEAR(json["labels"]["buy"]["oracle_mse"].get<double>(), buy.oracle_mse, 1e-5);
  EXPECT_FALSE(json["labels"]["buy"].contains("oracle_auc"));
  EXPECT_TRUE(json["towers"]["cvr"].contains("oracle_mse"));
  EXPECT_DOUBLE_EQ(json["oracle_auc"].get<double>(), Label(result, "clk").oracle_auc);
}

TEST(GenData, SoftmaxTowerDrawsClassIndices) {
  testing::TempDir dir;
  auto config = Config("mmoe_taobao.config", kParquet);
  auto* ctr = config.mutable_model_config()->mutable_mmoe()->mutable_task_towers(0);
  ctr->set_num_class(3);
  ctr->clear_losses();
  ctr->add_losses()->mutable_softmax_cross_entropy();
  auto result = Generate(config, dir.File("data"));
  const GenDataLabel& clk = Label(result, "clk");
  EXPECT_EQ(clk.num_class, 3);
  EXPECT_GT(clk.oracle_auc, 0.7);
  auto rows = ReadBack(config, result.train_pattern);
  std::map<float, int64_t> classes;
  for (int64_t r = 0; r < rows.size; ++r) {
    ++classes[rows.labels.at("clk")[r]];
    // buy is drawn where clk is not class 0.
    if (rows.labels.at("buy")[r] > 0.5f) ASSERT_NE(rows.labels.at("clk")[r], 0.0f);
  }
  ASSERT_EQ(classes.size(), 3u);
  for (const auto& [c, n] : classes) EXPECT_GT(n, rows.size / 20) << "class " << c;
}

TEST(GenData, SingleTaskConfigKeepsOneIndependentLabel) {
  testing::TempDir dir;
  auto config = LoadPipelineConfig(testing::SourceDir() + "/examples/deepfm_mock.config");
  auto result = Generate(config, dir.File("data"));
  ASSERT_EQ(result.labels.size(), 1u);
  EXPECT_TRUE(result.labels[0].tower.empty());
  EXPECT_GT(result.oracle_auc, 0.75);
  EXPECT_DOUBLE_EQ(result.oracle_auc, result.labels[0].oracle_auc);
  auto json = OracleJson(dir.File("data"));
  EXPECT_FALSE(json.contains("towers"));
  EXPECT_TRUE(json["labels"].contains("label"));
}

TEST(GenData, CliPrintsOneOracleLinePerLabel) {
  testing::TempDir dir;
  auto config = Config("dbmtl_taobao.config", kParquet);
  SavePipelineConfig(config, dir.File("pipeline.config"));
  ::testing::internal::CaptureStdout();
  int code = GenDataMain({"--pipeline_config_path=" + dir.File("pipeline.config"),
                          "--output_dir=" + dir.File("data"), "--train_rows=1000",
                          "--eval_rows=500", "--num_files=1"});
  std::fflush(stdout);
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(code, 0);
  const size_t all = out.find("oracle_auc=");
  const size_t clk = out.find("oracle_auc_clk=");
  const size_t buy = out.find("oracle_auc_buy=");
  ASSERT_NE(all, std::string::npos) << out;
  ASSERT_NE(clk, std::string::npos) << out;
  ASSERT_NE(buy, std::string::npos) << out;
  EXPECT_LT(all, clk);
  EXPECT_LT(clk, buy);
  // The scripts' greedy sed finds the top-level oracle_auc on the one-line oracle.json.
  const std::string text = ReadFileToString(dir.File("data/oracle.json"));
  const size_t last = text.rfind("\"oracle_auc\": ");
  auto json = nlohmann::json::parse(text);
  EXPECT_NEAR(std::stod(text.substr(last + 14)), json["oracle_auc"].get<double>(), 1e-12);
}

// MD5 of every written data file (train then eval, in name order) and the oracle AUCs of a
// run, as a fingerprint of the output.
std::string DataFingerprint(const GenDataResult& result) {
  std::string all;
  for (const auto& pattern : {result.train_pattern, result.eval_pattern}) {
    for (const auto& path : ExpandInputPaths(pattern)) all += Md5Hex(ReadFileToString(path));
  }
  char buf[64];
  for (const auto& label : result.labels) {
    const double oracle = label.regression ? label.oracle_mse : label.oracle_auc;
    std::snprintf(buf, sizeof(buf), " %.9f", oracle);
    all += buf;
  }
  return Md5Hex(all);
}

// Configs without sequence groups are written exactly as before the sequence signal existed
// (fingerprints from the code before it, fixed seed): FG_NONE CSV, FG_DAG Parquet, and
// sequence features outside any sequence group in both modes.
TEST(GenData, ConfigsWithoutSequenceGroupsAreUnchanged) {
  auto without_sequence_groups = [](protos::EasyRecConfig config) {
    auto* groups = config.mutable_model_config()->mutable_feature_groups();
    for (int g = groups->size() - 1; g >= 0; --g) {
      if (groups->Get(g).group_type() == protos::SEQUENCE) groups->DeleteSubrange(g, 1);
    }
    for (auto& group : *groups) group.clear_sequence_groups();
    return config;
  };
  const std::vector<std::pair<std::string, protos::EasyRecConfig>> cases = {
      {"deepfm_mock", LoadPipelineConfig(testing::SourceDir() + "/examples/deepfm_mock.config")},
      {"mmoe_taobao parquet", Config("mmoe_taobao.config", kParquet)},
      {"dbmtl_taobao_jrc csv", Config("dbmtl_taobao_jrc.config", kCsv)},
      {"multi_tower_din_taobao csv",
       without_sequence_groups(Config("multi_tower_din_taobao.config", kCsv))},
      {"multi_tower_din_mock parquet",
       without_sequence_groups(Config("multi_tower_din_mock.config", "{}"))},
      {"dbmtl_has_sequence_mock csv",
       without_sequence_groups(Config("dbmtl_has_sequence_mock.config", kCsv))},
  };
  const std::map<std::string, std::string> expected = {
      {"deepfm_mock", "5add04510388af0c08b5e1f4220526f5"},
      {"mmoe_taobao parquet", "ed12ab05c16491dc520bb4846b4d5eef"},
      {"dbmtl_taobao_jrc csv", "fcec98bc06f249587154bfd6277037f6"},
      {"multi_tower_din_taobao csv", "124224453674d8d8cfb5f90312345b01"},
      {"multi_tower_din_mock parquet", "f9f32804cecd671e4c5f3c08ed3abe3d"},
      {"dbmtl_has_sequence_mock csv", "00621ad3c4db4ad7c11f1dd00859d390"},
  };
  for (const auto& [name, config] : cases) {
    testing::TempDir dir;
    auto result = Generate(config, dir.File("data"), 1500, 500);
    EXPECT_EQ(DataFingerprint(result), expected.at(name)) << name;
  }
}

// ------------------------------------------------------------------- sequence signal

GenDataOptions SequenceOptions(int max_sequence_steps, double variance = 1.0) {
  GenDataOptions gen;
  gen.max_sequence_steps = max_sequence_steps;
  gen.sequence_signal_variance = variance;
  return gen;
}

// The signal plan gen_data builds for `config` and `options`, rebuilt here to read the hidden
// values of the rows back (the configs of these tests have no grouping keys: only labels and
// sample weights keep their own values).
gen_data_internal::SequenceSignal PlantedSignal(const protos::EasyRecConfig& config,
                                                const GenDataOptions& options) {
  const auto& data = config.data_config();
  const auto infos = fg::DescribeFeatures(config.feature_configs(), data.fg_mode());
  std::vector<gen_data_internal::RawInput> raw;
  if (data.fg_mode() != protos::FG_NONE) {
    raw = gen_data_internal::PlanRawInputs(infos, data.fg_mode());
  }
  std::set<std::string> reserved(data.label_fields().begin(), data.label_fields().end());
  reserved.insert(data.sample_weight_fields().begin(), data.sample_weight_fields().end());
  return gen_data_internal::SequenceSignal(config.model_config(), infos, data.fg_mode(), raw,
                                           reserved, options);
}

// Label rate where `x` > 0 minus where `x` < 0, over the rows of `x` (NaN: left out).
double LabelGap(const std::vector<double>& x, const std::vector<bool>& positive) {
  int64_t n[2] = {0, 0}, p[2] = {0, 0};
  for (size_t r = 0; r < x.size(); ++r) {
    if (std::isnan(x[r]) || x[r] == 0.0) continue;
    const int side = x[r] > 0.0;
    ++n[side];
    p[side] += positive[r];
  }
  if (n[0] == 0 || n[1] == 0) return 0.0;
  return static_cast<double>(p[1]) / n[1] - static_cast<double>(p[0]) / n[0];
}

// The planted signal as the rows read back show it (after feature generation for FG configs;
// ids mapped to the pool values through each feature's bucketizer). A history step is relevant
// when its key attribute equals the target's; its value is the sum of the hidden values of its
// other paired attributes / sqrt(their count) (of the key itself for a sequence with one pair).
struct SignalStats {
  int64_t rows = 0;
  int32_t max_steps = 0;
  // Over every signal sequence: history steps, relevant ones, and the expected relevant share.
  int64_t steps = 0, relevant = 0;
  double expected_share = 0.0;
  // (row, signal sequence) with a relevant step, and all of them.
  int64_t matched = 0, drawn = 0;
  // Steps whose key is no pool value: FG_DAG's one default step of an empty history.
  int64_t unmapped = 0, unmapped_outside_empty = 0;
  // Targets whose key is outside the pool's first key_values values (none expected).
  int64_t targets_outside_keys = 0;
  // First signal sequence, rows with a relevant step: label rate where the mean value of the
  // relevant steps is > 0 minus where it is < 0; the same split by the mean over all steps, and
  // by the mean over the irrelevant steps (rows that have some); rows without a relevant step
  // split by the mean over all steps.
  int64_t rows_relevant = 0;
  double gap_relevant = 0.0, gap_all = 0.0, gap_irrelevant = 0.0, gap_unmatched = 0.0;
  double label_rate = 0.0;
};

SignalStats ReadSignal(const protos::EasyRecConfig& config, const GenDataResult& result,
                       const GenDataOptions& options, const std::string& label) {
  SignalStats stats;
  const auto& data = config.data_config();
  const auto infos = fg::DescribeFeatures(config.feature_configs(), data.fg_mode());
  std::map<std::string, const fg::FeatureInfo*> info_of;
  for (const auto& info : infos) info_of[info.name] = &info;
  const auto signal = PlantedSignal(config, options);
  EXPECT_EQ(signal.PairNames(), result.sequence_pairs) << "the rebuilt plan differs";

  // Read-back id of `feature` -> index of the pool value.
  auto ids_of = [&](const std::string& feature, const std::vector<std::string>& values) {
    std::map<int64_t, size_t> ids;
    for (size_t v = 0; v < values.size(); ++v) {
      int64_t id = 0;
      if (data.fg_mode() == protos::FG_NONE) {
        id = std::stoll(values[v]);
      } else {
        std::string error;
        EXPECT_TRUE(info_of.at(feature)->bucketizer->FromText(values[v], &id, &error)) << error;
      }
      EXPECT_TRUE(ids.emplace(id, v).second) << feature << ": " << values[v];
    }
    return ids;
  };
  struct Attribute {
    std::string query, history;
    gen_data_internal::SequenceSignal::HistoryPool pool;
    std::map<int64_t, size_t> query_ids, history_ids;
  };
  std::vector<std::string> order;  // signal sequences in pair order
  std::map<std::string, std::vector<Attribute>> sequences;
  std::vector<std::string> names;
  for (const auto& [query, history] : result.sequence_pairs) {
    const fg::FeatureInfo& info = *info_of.at(history);
    const std::string sequence = info.sequence_name.empty() ? info.name : info.sequence_name;
    if (!sequences.count(sequence)) order.push_back(sequence);
    Attribute a;
    a.query = query;
    a.history = history;
    a.pool = signal.PoolOf(history);
    EXPECT_FALSE(a.pool.values.empty()) << history;
    a.query_ids = ids_of(query, a.pool.values);
    a.history_ids = ids_of(history, a.pool.values);
    sequences[sequence].push_back(std::move(a));
    for (const auto& name : {query, history}) {
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    }
  }
  if (order.empty()) {
    ADD_FAILURE() << "no signal sequence";
    return stats;
  }
  auto rows = ReadBack(config, result.train_pattern, "", names);
  stats.rows = rows.size;
  std::vector<bool> positive(rows.size);
  int64_t positives = 0;
  for (int64_t r = 0; r < rows.size; ++r) {
    positive[r] = rows.labels.at(label)[r] > 0.5f;
    positives += positive[r];
  }
  stats.label_rate = static_cast<double>(positives) / std::max<int64_t>(1, rows.size);
  const double nan = std::nan("");
  std::vector<double> mean_relevant(rows.size, nan), mean_all(rows.size, nan),
      mean_irrelevant(rows.size, nan), mean_unmatched(rows.size, nan);
  for (size_t s = 0; s < order.size(); ++s) {
    const auto& attributes = sequences.at(order[s]);
    const Attribute* key = nullptr;
    for (const auto& a : attributes) {
      if (a.pool.key) key = &a;
    }
    if (!key) {
      ADD_FAILURE() << order[s] << " has no key attribute";
      continue;
    }
    EXPECT_EQ(key, &attributes.back()) << "the key is the sequence's last paired attribute";
    if (s == 0) stats.expected_share = key->pool.relevant_share;
    const int items = static_cast<int>(attributes.size()) - 1;
    for (int64_t r = 0; r < rows.size; ++r) {
      const auto& q = rows.ids.at(key->query)[r];
      EXPECT_EQ(q.size(), 1u) << key->query << " row " << r;
      auto target = q.empty() ? key->query_ids.end() : key->query_ids.find(q[0]);
      if (target == key->query_ids.end()) {
        ADD_FAILURE() << key->query << " row " << r << ": the target is no pool value";
        continue;
      }
      stats.targets_outside_keys += static_cast<int64_t>(target->second) >= key->pool.key_values;
      const int32_t n = rows.steps.at(key->history)[r];
      stats.max_steps = std::max(stats.max_steps, n);
      double sum_relevant = 0.0, sum_all = 0.0;
      int count = 0, all = 0;
      for (int32_t t = 0; t < n; ++t) {
        auto step_key = key->history_ids.find(rows.ids.at(key->history)[r].at(t));
        if (step_key == key->history_ids.end()) {
          ++stats.unmapped;
          stats.unmapped_outside_empty += n != 1;
          continue;
        }
        const bool relevant = step_key->second == target->second;
        double value = key->pool.hidden[step_key->second];
        if (items > 0) {
          value = 0.0;
          for (const auto& a : attributes) {
            if (&a == key) continue;
            const auto& h = rows.ids.at(a.history)[r];
            EXPECT_EQ(static_cast<int32_t>(h.size()), n) << a.history << " row " << r;
            auto item = t < static_cast<int32_t>(h.size()) ? a.history_ids.find(h[t])
                                                           : a.history_ids.end();
            EXPECT_TRUE(item != a.history_ids.end()) << a.history << " row " << r;
            if (item != a.history_ids.end()) value += a.pool.hidden[item->second];
          }
          value /= std::sqrt(static_cast<double>(items));
        }
        ++stats.steps;
        stats.relevant += relevant;
        ++all;
        sum_all += value;
        if (relevant) {
          ++count;
          sum_relevant += value;
        }
      }
      ++stats.drawn;
      stats.matched += count > 0;
      if (s != 0 || all == 0) continue;
      if (count == 0) {
        mean_unmatched[r] = sum_all / all;
        continue;
      }
      ++stats.rows_relevant;
      mean_relevant[r] = sum_relevant / count;
      mean_all[r] = sum_all / all;
      if (all > count) mean_irrelevant[r] = (sum_all - sum_relevant) / (all - count);
    }
  }
  stats.gap_relevant = LabelGap(mean_relevant, positive);
  stats.gap_all = LabelGap(mean_all, positive);
  stats.gap_irrelevant = LabelGap(mean_irrelevant, positive);
  stats.gap_unmatched = LabelGap(mean_unmatched, positive);
  return stats;
}

std::string Describe(const SignalStats& s) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "rows %lld, relevant share %.4f (expected %.4f), match rate %.4f, rows with a "
                "relevant step %lld, label rate %.4f, gaps: relevant %.4f all %.4f irrelevant "
                "%.4f unmatched %.4f, unmapped steps %lld, max steps %d",
                static_cast<long long>(s.rows),
                static_cast<double>(s.relevant) / std::max<int64_t>(1, s.steps), s.expected_share,
                static_cast<double>(s.matched) / std::max<int64_t>(1, s.drawn),
                static_cast<long long>(s.rows_relevant), s.label_rate, s.gap_relevant, s.gap_all,
                s.gap_irrelevant, s.gap_unmatched, static_cast<long long>(s.unmapped), s.max_steps);
  return buf;
}

// What every signal test checks of the data read back: the rebuilt plan reads every step,
// targets' keys are keys, the relevant share and the match rate are the planted ones.
void CheckPlanted(const SignalStats& stats, const GenDataResult& result, int64_t rows) {
  ASSERT_EQ(stats.rows, rows);
  EXPECT_EQ(stats.targets_outside_keys, 0);
  // Only FG_DAG's default step of an empty history is no pool value.
  EXPECT_EQ(stats.unmapped_outside_empty, 0);
  EXPECT_LE(stats.unmapped, stats.drawn / 5);
  EXPECT_GT(stats.expected_share, 0.0);
  EXPECT_NEAR(static_cast<double>(stats.relevant) / stats.steps, stats.expected_share, 0.015)
      << Describe(stats);
  // match_rate is what the data shows: rows whose history has a step relevant to the target.
  EXPECT_NEAR(static_cast<double>(stats.matched) / stats.drawn, result.sequence_match_rate, 1e-9);
}

// Labels follow the mean hidden value of the history steps relevant to the target (same key),
// through feature generation and in every format: FG_NONE Parquet (LIST per step) and CSV,
// FG_DAG Parquet, FG_NORMAL CSV, and a multi-task config with two nested sequence_groups
// (each task through the shared logit; the signal split over both sequences).
TEST(GenData, SequenceSignalFollowsTheRelevantHistorySteps) {
  struct Case {
    std::string name, edits;
    std::vector<std::pair<std::string, std::string>> pairs;
    double gap;  // least label-rate gap by the relevant steps' mean value
  };
  const std::vector<std::pair<std::string, std::string>> mock = {
      {"id_2", "click_50_seq__id_2"}, {"id_3", "click_50_seq__id_3"}};
  const std::vector<std::pair<std::string, std::string>> taobao = {
      {"adgroup_id", "click_50_seq__adgroup_id"}, {"cate_id", "click_50_seq__cate_id"},
      {"brand", "click_50_seq__brand"}};
  const std::vector<Case> cases = {
      {"multi_tower_din_mock.config", "{}", mock, 0.2},
      {"multi_tower_din_mock.config", kCsv, mock, 0.2},
      {"multi_tower_din_taobao.config", kParquet, taobao, 0.2},
      {"multi_tower_din_taobao.config",
       R"({"data_config.dataset_type": "CsvDataset", "data_config.with_header": true,
           "data_config.fg_mode": "FG_NORMAL"})",
       taobao, 0.2},
      {"dbmtl_has_sequence_mock.config", kCsv,
       {{"id_2", "click_50_seq__id_2"}, {"id_3", "click_50_seq__id_3"},
        {"id_2", "buy_50_seq__id_2"}, {"id_3", "buy_50_seq__id_3"}}, 0.1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + " " + c.edits);
    testing::TempDir dir;
    auto config = Config(c.name, c.edits);
    const GenDataOptions options = SequenceOptions(20);
    auto result = Generate(config, dir.File("data"), 4000, 2000, options);
    EXPECT_EQ(result.sequence_pairs, c.pairs);
    auto stats = ReadSignal(config, result, options, result.labels[0].label);
    CheckPlanted(stats, result, 4000);
    // Relevant share 0.25 + 0.75 / 20 = 0.2875 per step, and one relevant step in a history
    // that drew none: 0.2993 over 0-20 steps. Every non-empty history matches (20 / 21).
    EXPECT_NEAR(stats.expected_share, 0.2993, 1e-4);
    EXPECT_GT(result.sequence_match_rate, 0.93);
    EXPECT_LT(result.sequence_match_rate, 0.97);
    EXPECT_LE(stats.max_steps, 20);
    // The relevant steps' mean value moves the label; the irrelevant steps' does not, and the
    // mean over all steps (what pooling sees) only through its relevant part.
    EXPECT_GT(stats.gap_relevant, c.gap) << Describe(stats);
    EXPECT_LT(std::abs(stats.gap_irrelevant), 0.06) << Describe(stats);
    EXPECT_LT(stats.gap_all, 0.75 * stats.gap_relevant) << Describe(stats);
    EXPECT_LT(std::abs(stats.gap_unmatched), 0.1) << Describe(stats);
    for (const auto& label : result.labels) {
      // The oracle knows the relevant steps' values; without its term it is clearly worse.
      EXPECT_GT(label.oracle_auc, label.oracle_auc_without_sequence + 0.02) << label.label;
      EXPECT_GT(label.oracle_auc_without_sequence, 0.6) << label.label;
    }
    auto json = OracleJson(dir.File("data"));
    ASSERT_TRUE(json.contains("sequence_signal"));
    EXPECT_EQ(json["sequence_signal"]["pairs"].size(), c.pairs.size());
    EXPECT_EQ(json["sequence_signal"]["pairs"][0][1].get<std::string>(), c.pairs[0].second);
    EXPECT_NEAR(json["sequence_signal"]["match_rate"].get<double>(), result.sequence_match_rate,
                1e-9);
    EXPECT_DOUBLE_EQ(json["sequence_signal"]["variance"].get<double>(), 1.0);
    const std::string& first = result.labels[0].label;
    EXPECT_NEAR(json["labels"][first]["oracle_auc_without_sequence"].get<double>(),
                result.labels[0].oracle_auc_without_sequence, 1e-9);
    // The greedy sed scripts use still finds the top-level oracle_auc.
    const std::string text = ReadFileToString(dir.File("data/oracle.json"));
    EXPECT_NEAR(std::stod(text.substr(text.rfind("\"oracle_auc\": ") + 14)), result.oracle_auc,
                1e-12);
  }
}

// Simple sequence features pair with queries by position in the group; an attribute with too
// few values (3 buckets) carries no signal. FG_DAG with hashed ids. The one paired attribute is
// key and item at once: a step is relevant when it equals the target, and the term is the
// target's own hidden value where some step is.
TEST(GenData, SequencePairsByPositionAndSkipsSmallAttributes) {
  protos::EasyRecConfig config;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"pb(
    train_input_path: "" eval_input_path: "" model_dir: ""
    data_config { batch_size: 256 dataset_type: CsvDataset with_header: true label_fields: "clk"
                  fg_mode: FG_DAG }
    feature_configs { id_feature { feature_name: "user_id" expression: "user:user_id"
                                   hash_bucket_size: 1000 embedding_dim: 8 } }
    feature_configs { id_feature { feature_name: "item_id" expression: "item:item_id"
                                   hash_bucket_size: 100000 embedding_dim: 8 } }
    feature_configs { id_feature { feature_name: "gender" expression: "item:gender"
                                   num_buckets: 3 embedding_dim: 8 } }
    feature_configs { sequence_id_feature { feature_name: "clicked" expression: "user:clicked"
        sequence_length: 30 sequence_delim: ";" hash_bucket_size: 100000 embedding_dim: 8 } }
    feature_configs { sequence_id_feature { feature_name: "clicked_gender"
        expression: "user:clicked_gender" sequence_length: 30 sequence_delim: ";" num_buckets: 3
        embedding_dim: 8 } }
    model_config {
      feature_groups { group_name: "deep" feature_names: "user_id" feature_names: "item_id"
                       feature_names: "gender" group_type: DEEP }
      feature_groups { group_name: "seq" feature_names: "item_id" feature_names: "gender"
                       feature_names: "clicked" feature_names: "clicked_gender"
                       group_type: SEQUENCE }
      multi_tower_din { towers { input: "deep" mlp { hidden_units: [8] } }
                        din_towers { input: "seq" attn_mlp { hidden_units: [8] } }
                        final { hidden_units: [8] } }
      losses { binary_cross_entropy {} }
    })pb", &config));
  testing::TempDir dir;
  const GenDataOptions options = SequenceOptions(30);
  auto result = Generate(config, dir.File("data"), 4000, 1000, options);
  const std::vector<std::pair<std::string, std::string>> expected = {{"item_id", "clicked"}};
  EXPECT_EQ(result.sequence_pairs, expected);
  auto stats = ReadSignal(config, result, options, "clk");
  CheckPlanted(stats, result, 4000);
  EXPECT_EQ(stats.max_steps, 30);
  // 0-30 steps, every non-empty history has a relevant step: 30 / 31.
  EXPECT_GT(result.sequence_match_rate, 0.95);
  EXPECT_LT(result.sequence_match_rate, 0.985);
  // Where some step equals the target the target's value moves the label; elsewhere the
  // values of the history do not. (The irrelevant steps are the other 19 keys, whose mean value
  // leans against the target's: no check of their gap here.)
  EXPECT_GT(stats.gap_relevant, 0.4) << Describe(stats);
  EXPECT_LT(stats.gap_all, 0.85 * stats.gap_relevant) << Describe(stats);
  EXPECT_LT(std::abs(stats.gap_unmatched), 0.1) << Describe(stats);
  EXPECT_GT(result.oracle_auc, result.labels[0].oracle_auc_without_sequence + 0.02);
}
// sequence_signal_variance 0 plants nothing: no pairs, labels blind to the history, and
// oracle.json as without a signal.
TEST(GenData, ZeroSequenceVarianceTurnsTheSignalOff) {
  testing::TempDir dir;
  auto config = Config("multi_tower_din_taobao.config", kParquet);
  auto result = Generate(config, dir.File("data"), 2000, 1000, SequenceOptions(20, 0.0));
  EXPECT_TRUE(result.sequence_pairs.empty());
  EXPECT_EQ(result.sequence_match_rate, 0.0);
  EXPECT_EQ(result.labels[0].oracle_auc_without_sequence, 0.0);
  auto json = OracleJson(dir.File("data"));
  EXPECT_FALSE(json.contains("sequence_signal"));
  EXPECT_FALSE(json["labels"]["clk"].contains("oracle_auc_without_sequence"));
}

// Steps per row are uniform in [0, min(sequence_length, max_sequence_steps)], the same for all
// sub-features of a sequence; in FG_NONE and FG_DAG data, with and without a signal.
TEST(GenData, MaxSequenceStepsIsHonoured) {
  auto without_sequence_groups = [](protos::EasyRecConfig config) {
    auto* groups = config.mutable_model_config()->mutable_feature_groups();
    for (int g = groups->size() - 1; g >= 0; --g) {
      if (groups->Get(g).group_type() == protos::SEQUENCE) groups->DeleteSubrange(g, 1);
    }
    return config;
  };
  struct Case {
    std::string what;
    protos::EasyRecConfig config;
    std::vector<std::string> features;  // sub-features of one sequence
    int max_steps;                      // --max_sequence_steps
    int expected;                       // the most steps a row gets
  };
  const std::vector<std::string> mock = {"click_50_seq__id_2", "click_50_seq__id_3",
                                         "click_50_seq__raw_1", "click_50_seq__raw_2"};
  const std::vector<std::string> taobao = {"click_50_seq__adgroup_id", "click_50_seq__cate_id",
                                           "click_50_seq__brand"};
  // A dense sub-feature of 3 values per step: Parquet LIST<LIST<DOUBLE>>.
  const std::string wide =
      R"({"feature_configs[sequence_feature.sequence_name=click_50_seq])"
      R"(.sequence_feature.features[3].raw_feature.value_dim": 3})";
  const std::vector<Case> cases = {
      {"FG_NONE parquet", Config("multi_tower_din_mock.config", "{}"), mock, 8, 8},
      {"FG_NONE parquet value_dim 3", Config("multi_tower_din_mock.config", wide), mock, 8, 8},
      {"FG_NONE parquet 30", Config("multi_tower_din_mock.config", "{}"), mock, 30, 30},
      // sequence_length 50 caps the steps.
      {"FG_NONE csv 80", Config("multi_tower_din_mock.config", kCsv), mock, 80, 50},
      {"FG_DAG 12", Config("multi_tower_din_taobao.config", kCsv), taobao, 12, 12},
      {"FG_DAG without groups 12",
       without_sequence_groups(Config("multi_tower_din_taobao.config", kParquet)), taobao, 12, 12},
  };
  ASSERT_EQ(
      cases[1].config.feature_configs(8).sequence_feature().features(3).raw_feature().value_dim(),
      3);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    testing::TempDir dir;
    auto result = Generate(c.config, dir.File("data"), 3000, 500, SequenceOptions(c.max_steps));
    auto rows = ReadBack(c.config, result.train_pattern, "", c.features);
    ASSERT_EQ(rows.size, 3000);
    int32_t most = 0;
    int64_t total = 0;
    std::vector<int64_t> counts(c.expected + 1, 0);
    for (int64_t r = 0; r < rows.size; ++r) {
      const int32_t n = rows.steps.at(c.features[0])[r];
      for (const auto& f : c.features) ASSERT_EQ(rows.steps.at(f)[r], n) << f << " row " << r;
      ASSERT_LE(n, c.expected) << "row " << r;
      most = std::max(most, n);
      total += n;
      ++counts[n];
    }
    EXPECT_EQ(most, c.expected);
    // Uniform over [0, expected] (FG_DAG fills an empty sparse sequence with one default step).
    EXPECT_NEAR(static_cast<double>(total) / rows.size, c.expected / 2.0, 0.1 * c.expected + 0.2);
    EXPECT_GT(counts[c.expected], rows.size / (c.expected + 1) / 2);
  }
}

// Bad values of the sequence flags fail naming the flag, before anything is written.
TEST(GenData, SequenceFlagsAreValidated) {
  testing::TempDir dir;
  auto config = Config("multi_tower_din_mock.config", "{}");
  config.mutable_model_config()->clear_train_metrics();  // decay_step: not supported yet
  SavePipelineConfig(config, dir.File("pipeline.config"));
  auto run = [&](const std::string& flag) {
    return GenDataMain({"--pipeline_config_path=" + dir.File("pipeline.config"),
                        "--output_dir=" + dir.File("data"), "--train_rows=100", "--eval_rows=50",
                        flag});
  };
  EXPECT_TZREC_ERROR(run("--max_sequence_steps=0"),
                     "--max_sequence_steps must be in [1, 10000], got 0");
  EXPECT_TZREC_ERROR(run("--max_sequence_steps=-3"), "--max_sequence_steps must be in [1, 10000]");
  EXPECT_TZREC_ERROR(run("--max_sequence_steps=100001"),
                     "--max_sequence_steps must be in [1, 10000]");
  EXPECT_TZREC_ERROR(run("--max_sequence_steps=many"), "--max_sequence_steps must be an integer");
  EXPECT_TZREC_ERROR(run("--sequence_signal_variance=-0.5"),
                     "--sequence_signal_variance must be a finite number >= 0, got -0.5");
  EXPECT_TZREC_ERROR(run("--sequence_signal_variance=nan"), "--sequence_signal_variance must be");
  EXPECT_TZREC_ERROR(run("--sequence_signal_variance=inf"), "--sequence_signal_variance must be");
  EXPECT_TZREC_ERROR(run("--sequence_signal_variance=strong"),
                     "--sequence_signal_variance must be a number, got 'strong'");
  EXPECT_TZREC_ERROR(run("--sequence_pool_size=1"),
                     "--sequence_pool_size must be in [2, 1000000], got 1");
  EXPECT_TZREC_ERROR(run("--sequence_pool_size=x"), "--sequence_pool_size must be an integer");
  EXPECT_FALSE(PathExists(dir.File("data/oracle.json")));
  // The library call checks the same options.
  GenDataOptions gen = SequenceOptions(0);
  gen.output_dir = dir.File("data");
  EXPECT_TZREC_ERROR(GenerateMockData(Config("multi_tower_din_mock.config", "{}"), gen),
                     "--max_sequence_steps must be in [1, 10000], got 0");

  // --help lists the flags; good values run and print the blind oracle per label.
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(GenDataMain({"--help"}), 0);
  std::string help = ::testing::internal::GetCapturedStdout();
  for (const char* flag :
       {"--sequence_signal_variance", "--max_sequence_steps", "--sequence_pool_size"}) {
    EXPECT_NE(help.find(flag), std::string::npos) << flag << "\n" << help;
  }
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(GenDataMain({"--pipeline_config_path=" + dir.File("pipeline.config"),
                         "--output_dir=" + dir.File("data"), "--train_rows=400", "--eval_rows=200",
                         "--num_files=1", "--max_sequence_steps=50", "--sequence_signal_variance=2",
                         "--sequence_pool_size=100"}),
            0);
  std::fflush(stdout);
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("oracle_auc_without_sequence_clk="), std::string::npos) << out;
  auto json = OracleJson(dir.File("data"));
  EXPECT_DOUBLE_EQ(json["sequence_signal"]["variance"].get<double>(), 2.0);
}

// Oracle AUCs, match rates and the label-rate gaps of the planted signal (SignalStats) at 100k
// rows, 50 steps (not run by default: prints the numbers).
TEST(GenData, DISABLED_MeasureSequenceSignal) {
  for (const auto& [name, edits] : std::vector<std::pair<std::string, std::string>>{
           {"multi_tower_din_mock.config", "{}"},
           {"multi_tower_din_taobao.config", kParquet},
           {"dbmtl_has_sequence_mock.config", "{}"}}) {
    for (double variance : {1.0, 0.0}) {
      testing::TempDir dir;
      auto config = Config(name, edits);
      const GenDataOptions gen = SequenceOptions(50, variance);
      auto result = Generate(config, dir.File("data"), 100000, 20000, gen);
      std::printf("%s variance %.1f:", name.c_str(), variance);
      for (const auto& label : result.labels) {
        std::printf(" %s oracle_auc %.4f without_sequence %.4f positive_rate %.4f;",
                    label.label.c_str(), label.oracle_auc, label.oracle_auc_without_sequence,
                    label.positive_rate);
      }
      std::printf(" match_rate %.4f\n", result.sequence_match_rate);
      if (variance == 0.0) continue;
      auto stats = ReadSignal(config, result, gen, result.labels[0].label);
      std::printf("  %s: %s\n", result.labels[0].label.c_str(), Describe(stats).c_str());
    }
  }
}

// Oracle AUCs and positive rates at 20k rows (not run by default: prints the numbers).
TEST(GenData, DISABLED_Measure20k) {
  for (const auto& [name, edits] : std::vector<std::pair<std::string, std::string>>{
           {"mmoe_taobao.config", kParquet}, {"dbmtl_taobao.config", kParquet},
           {"ple_taobao.config", kParquet}, {"dbmtl_taobao_jrc.config", kParquet}}) {
    testing::TempDir dir;
    auto result = Generate(Config(name, edits), dir.File("data"), 20000, 20000);
    for (const auto& label : result.labels) {
      std::printf("%s %s (tower %s): oracle_auc %.4f positive_rate %.4f\n", name.c_str(),
                  label.label.c_str(), label.tower.c_str(), label.oracle_auc, label.positive_rate);
    }
  }
}

}  // namespace
}  // namespace tzrec
