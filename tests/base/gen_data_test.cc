// gen_data for multi-task configs: one label per task tower from the hidden model, dependent
// (conversion-style) tasks, softmax and regression towers, per-label oracles in oracle.json,
// and pooled grouping keys (grouped_auc grouping_key, jrc_loss session_name); the
// target/history signal of sequence groups, sequence steps and flags, and unchanged output for
// configs without sequence groups.
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

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

// Label rates of the rows whose history repeats the target (some step has every paired
// attribute of the first signal sequence equal to the query's) and of the others, from the
// rows read back (after feature generation for FG configs).
struct MatchStats {
  int64_t rows = 0, matched = 0;
  double rate_matched = 0.0, rate_unmatched = 0.0;
  double mean_steps = 0.0;
  int32_t max_steps = 0;
};

MatchStats SequenceMatchStats(const protos::EasyRecConfig& config, const GenDataResult& result,
                              const std::string& pattern, const std::string& label) {
  MatchStats stats;
  EXPECT_FALSE(result.sequence_pairs.empty());
  if (result.sequence_pairs.empty()) return stats;
  const std::string& first = result.sequence_pairs[0].second;
  const size_t separator = first.find("__");  // grouped sub-features share the prefix
  const std::string prefix = separator == std::string::npos ? first : first.substr(0, separator + 2);
  std::vector<std::pair<std::string, std::string>> pairs;
  std::vector<std::string> names;
  for (const auto& [query, history] : result.sequence_pairs) {
    if (history.rfind(prefix, 0) != 0) continue;
    pairs.emplace_back(query, history);
    names.push_back(query);
    names.push_back(history);
  }
  auto rows = ReadBack(config, pattern, "", names);
  const auto& labels = rows.labels.at(label);
  int64_t positives_matched = 0, positives_unmatched = 0, steps = 0;
  for (int64_t r = 0; r < rows.size; ++r) {
    const int32_t n = rows.steps.at(first)[r];
    steps += n;
    stats.max_steps = std::max(stats.max_steps, n);
    bool matched = false;
    for (int32_t t = 0; t < n && !matched; ++t) {
      bool all = true;
      for (const auto& [query, history] : pairs) {
        const auto& q = rows.ids.at(query)[r];
        const auto& h = rows.ids.at(history)[r];
        EXPECT_EQ(q.size(), 1u) << query << " row " << r;
        EXPECT_EQ(static_cast<int32_t>(h.size()), n) << history << " row " << r;
        all = all && q.size() == 1 && t < static_cast<int32_t>(h.size()) && h[t] == q[0];
      }
      matched = all;
    }
    stats.matched += matched;
    (matched ? positives_matched : positives_unmatched) += labels[r] > 0.5f;
  }
  stats.rows = rows.size;
  stats.mean_steps = static_cast<double>(steps) / std::max<int64_t>(1, rows.size);
  stats.rate_matched = static_cast<double>(positives_matched) / std::max<int64_t>(1, stats.matched);
  stats.rate_unmatched =
      static_cast<double>(positives_unmatched) / std::max<int64_t>(1, rows.size - stats.matched);
  return stats;
}

GenDataOptions SequenceOptions(int max_sequence_steps, double variance = 1.0) {
  GenDataOptions gen;
  gen.max_sequence_steps = max_sequence_steps;
  gen.sequence_signal_variance = variance;
  return gen;
}

// Labels follow whether the history repeats the target item, through feature generation and
// in every format: FG_NONE Parquet (LIST per step) and CSV, FG_DAG Parquet, and a multi-task
// config with two nested sequence_groups (each task through the shared logit).
TEST(GenData, SequenceSignalRaisesLabelRateWhereHistoryHoldsTarget) {
  struct Case {
    std::string name, edits;
    std::vector<std::pair<std::string, std::string>> pairs;
    double gap;  // least label-rate difference (matched - unmatched)
  };
  const std::vector<Case> cases = {
      {"multi_tower_din_mock.config", "{}",
       {{"id_2", "click_50_seq__id_2"}, {"id_3", "click_50_seq__id_3"}}, 0.2},
      {"multi_tower_din_mock.config", kCsv,
       {{"id_2", "click_50_seq__id_2"}, {"id_3", "click_50_seq__id_3"}}, 0.2},
      {"multi_tower_din_taobao.config", kParquet,
       {{"adgroup_id", "click_50_seq__adgroup_id"}, {"cate_id", "click_50_seq__cate_id"},
        {"brand", "click_50_seq__brand"}}, 0.2},
      {"multi_tower_din_taobao.config",
       R"({"data_config.dataset_type": "CsvDataset", "data_config.with_header": true,
           "data_config.fg_mode": "FG_NORMAL"})",
       {{"adgroup_id", "click_50_seq__adgroup_id"}, {"cate_id", "click_50_seq__cate_id"},
        {"brand", "click_50_seq__brand"}}, 0.2},
      {"dbmtl_has_sequence_mock.config", kCsv,
       {{"id_2", "click_50_seq__id_2"}, {"id_3", "click_50_seq__id_3"},
        {"id_2", "buy_50_seq__id_2"}, {"id_3", "buy_50_seq__id_3"}}, 0.08},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name + " " + c.edits);
    testing::TempDir dir;
    auto config = Config(c.name, c.edits);
    auto result = Generate(config, dir.File("data"), 4000, 2000, SequenceOptions(20));
    EXPECT_EQ(result.sequence_pairs, c.pairs);
    EXPECT_GT(result.sequence_match_rate, 0.4);
    EXPECT_LT(result.sequence_match_rate, 0.6);
    auto stats = SequenceMatchStats(config, result, result.train_pattern, result.labels[0].label);
    ASSERT_EQ(stats.rows, 4000);
    // The data shows what the generator planted: about half the histories hold the target.
    EXPECT_NEAR(static_cast<double>(stats.matched) / stats.rows, result.sequence_match_rate,
                c.pairs.size() > 3 ? 0.1 : 0.02);
    EXPECT_GT(stats.rate_matched, stats.rate_unmatched + c.gap)
        << stats.rate_matched << " vs " << stats.rate_unmatched;
    EXPECT_LE(stats.max_steps, 20);
    for (const auto& label : result.labels) {
      // The oracle knows the match; without its term it is clearly worse.
      EXPECT_GT(label.oracle_auc, label.oracle_auc_without_sequence + 0.02) << label.label;
      EXPECT_GT(label.oracle_auc_without_sequence, 0.6) << label.label;
    }
    auto json = OracleJson(dir.File("data"));
    ASSERT_TRUE(json.contains("sequence_signal"));
    EXPECT_EQ(json["sequence_signal"]["pairs"].size(), c.pairs.size());
    EXPECT_EQ(json["sequence_signal"]["pairs"][0][1].get<std::string>(), c.pairs[0].second);
    EXPECT_NEAR(json["sequence_signal"]["match_rate"].get<double>(), result.sequence_match_rate,
                1e-9);
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
// few values (3 buckets: most long histories would match by chance) carries no signal.
// FG_DAG with hashed ids.
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
  auto result = Generate(config, dir.File("data"), 4000, 1000, SequenceOptions(30));
  const std::vector<std::pair<std::string, std::string>> expected = {{"item_id", "clicked"}};
  EXPECT_EQ(result.sequence_pairs, expected);
  auto stats = SequenceMatchStats(config, result, result.train_pattern, "clk");
  // Chance matches of one hashed attribute add a little to the planted half.
  EXPECT_NEAR(static_cast<double>(stats.matched) / stats.rows, result.sequence_match_rate, 0.01);
  EXPECT_GT(result.sequence_match_rate, 0.45);
  EXPECT_LT(result.sequence_match_rate, 0.6);
  EXPECT_GT(stats.rate_matched, stats.rate_unmatched + 0.2)
      << stats.rate_matched << " vs " << stats.rate_unmatched;
  EXPECT_EQ(stats.max_steps, 30);
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

// Oracle AUCs and the label rates with and without a match at 100k rows, 50 steps (not run by
// default: prints the numbers).
TEST(GenData, DISABLED_MeasureSequenceSignal) {
  for (const auto& [name, edits] : std::vector<std::pair<std::string, std::string>>{
           {"multi_tower_din_mock.config", "{}"},
           {"multi_tower_din_taobao.config", kParquet},
           {"dbmtl_has_sequence_mock.config", "{}"}}) {
    for (double variance : {1.0, 0.0}) {
      testing::TempDir dir;
      auto config = Config(name, edits);
      GenDataOptions gen;
      gen.max_sequence_steps = 50;
      gen.sequence_signal_variance = variance;
      auto result = Generate(config, dir.File("data"), 100000, 20000, gen);
      std::printf("%s variance %.1f:", name.c_str(), variance);
      for (const auto& label : result.labels) {
        std::printf(" %s oracle_auc %.4f without_sequence %.4f positive_rate %.4f;",
                    label.label.c_str(), label.oracle_auc, label.oracle_auc_without_sequence,
                    label.positive_rate);
      }
      std::printf(" match_rate %.4f\n", result.sequence_match_rate);
      if (variance == 0.0) continue;
      auto stats = SequenceMatchStats(config, result, result.train_pattern, result.labels[0].label);
      std::printf("  %s rows %lld: matched %.4f, label rate matched %.4f unmatched %.4f, mean "
                  "steps %.2f, max %d\n", result.labels[0].label.c_str(),
                  static_cast<long long>(stats.rows),
                  static_cast<double>(stats.matched) / stats.rows,
                  stats.rate_matched, stats.rate_unmatched, stats.mean_steps, stats.max_steps);
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
