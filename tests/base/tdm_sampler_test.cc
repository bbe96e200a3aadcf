// tdm_sampler (input/tdm_sampler.h) on trees tdm_init_tree builds: positives are each row's
// ancestors on the kept levels, negatives stay on their level, never the row's own node and
// unique per row and level; node weights set the draw frequencies (chi-square); remain_ratio
// keeps as many middle levels as it says, in the probability_type's proportions; the layout
// and config errors.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/features/feature.h"
#include "tzrec/fg/feature_generator.h"
#include "tzrec/input/dataset.h"
#include "tzrec/input/tdm_sampler.h"
#include "tzrec/tools/tdm_tree.h"

namespace tzrec {
namespace {

using testing::TempDir;

// A binary tree of `items` leaves (ids 1..items, two categories) written under dir/tree.
TdmTree WriteTree(const TempDir& dir, int64_t items) {
  std::vector<TdmTree::Leaf> leaves;
  for (int64_t i = 1; i <= items; ++i) {
    TdmTree::Leaf leaf;
    leaf.id = i;
    leaf.cate = i % 2 ? "odd" : "even";
    leaf.attrs = {StrCat(i % 3)};
    leaves.push_back(leaf);
  }
  TdmTree tree(std::move(leaves), 2, {false}, {});
  tree.SetAttrNames({"cate_id"}, {});
  tree.WriteNodeEdgeTables(dir.File("tree"), ",");
  return tree;
}

protos::TDMSampler SamplerConfig(const TempDir& dir, std::vector<uint32_t> layer_num_sample) {
  protos::TDMSampler config;
  config.set_item_input_path(dir.File("tree/node_table.txt"));
  config.set_edge_input_path(dir.File("tree/edge_table.txt"));
  config.set_predict_edge_input_path(dir.File("tree/predict_edge_table.txt"));
  config.add_attr_fields("cate_id");
  config.set_item_id_field("item_id");
  config.set_attr_delimiter(",");
  for (uint32_t n : layer_num_sample) config.add_layer_num_sample(n);
  return config;
}

TEST(TdmSampler, PositivesAreAncestorsAndNegativesStayOnTheirLevel) {
  TempDir dir;
  const TdmTree tree = WriteTree(dir, 20);  // 6 levels: 1, 2, 4, 8, 16, 32 codes
  ASSERT_EQ(tree.levels().size(), 6u);
  const std::vector<uint32_t> per_level = {0, 1, 1, 2, 3, 4};
  TdmSampler sampler(SamplerConfig(dir, per_level), "data_config.tdm_sampler");
  EXPECT_EQ(sampler.attr_fields(), (std::vector<std::string>{"tree_level", "item_id", "cate_id"}));
  std::map<int64_t, int64_t> code_of;  // node id -> code
  for (const auto& level : tree.levels()) {
    for (int64_t code : level) code_of[tree.node(code).id] = code;
  }
  std::mt19937_64 rng(5);
  const std::vector<int64_t> rows = {3, 17, 3, 20, 1};
  const TdmSample sample = sampler.Sample(rows, rng);
  EXPECT_EQ(sample.kept_levels, (std::vector<int>{1, 2, 3, 4}));
  ASSERT_EQ(sample.positives_per_row, 4);
  ASSERT_EQ(sample.negatives_per_row, 1 + 1 + 2 + 3 + 4);
  ASSERT_EQ(sample.positives.size(), rows.size() * 4);
  ASSERT_EQ(sample.negatives.size(), rows.size() * 11);
  const SamplerItemTable& nodes = sampler.nodes();
  for (size_t r = 0; r < rows.size(); ++r) {
    SCOPED_TRACE(rows[r]);
    // Ancestors parent last: levels 1..4 of the leaf's path.
    std::vector<int64_t> path = tree.Ancestors(code_of.at(rows[r]));  // parent first, root last
    std::reverse(path.begin(), path.end());                          // root first
    std::vector<int64_t> own(6);
    for (int level = 0; level < 5; ++level) own[level] = tree.node(path[level]).id;
    own[5] = rows[r];
    for (int p = 0; p < 4; ++p) {
      EXPECT_EQ(nodes.id(sample.positives[r * 4 + p]), own[p + 1]);
      EXPECT_EQ(sampler.level(sample.positives[r * 4 + p]), p + 1);
    }
    size_t k = r * 11;
    for (int level = 1; level <= 5; ++level) {
      std::set<int64_t> seen;
      for (uint32_t i = 0; i < per_level[level]; ++i, ++k) {
        const uint32_t node = sample.negatives[k];
        EXPECT_EQ(sampler.level(node), level);
        EXPECT_NE(nodes.id(node), own[level]);
        EXPECT_TRUE(seen.insert(nodes.id(node)).second) << "negative " << nodes.id(node) << " twice";
      }
    }
  }
  // Rows of the sampled nodes: the attributes the data has, tree_level left out here.
  const RecordBatch records = sampler.NodeRows({sample.positives[0], sample.negatives[0]}, {"item_id", "cate_id", "user_id"});
  ASSERT_EQ(records.num_rows(), 2u);
  ASSERT_EQ(records.columns.size(), 2u);
  EXPECT_EQ(records.Find("item_id")->TextAt(0), std::to_string(nodes.id(sample.positives[0])));
  EXPECT_EQ(records.Find("tree_level"), nullptr);
}

TEST(TdmSampler, NodeWeightsSetTheDrawFrequencies) {
  TempDir dir;
  WriteTree(dir, 8);  // 4 levels: 1, 2, 4, 8 nodes
  // Level 2 (4 nodes) reweighted 1, 2, 3, 4 in table order; one negative per row there.
  std::vector<std::string> lines = Split(Trim(ReadFileToString(dir.File("tree/node_table.txt"))), "\n");
  std::map<int64_t, double> weight;
  int level_two = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> cells = Split(lines[i], "\t");
    if (!StartsWith(cells[2], "2,")) continue;
    cells[1] = std::to_string(++level_two);
    int64_t id = 0;
    ASSERT_TRUE(ParseInt64(cells[0], &id));
    weight[id] = level_two;
    lines[i] = Join(cells, "\t");
  }
  ASSERT_EQ(level_two, 4);
  testing::WriteFile(dir.File("tree/node_table.txt"), Join(lines, "\n") + "\n");
  TdmSampler sampler(SamplerConfig(dir, {0, 0, 1, 0}), "data_config.tdm_sampler");
  std::mt19937_64 rng(9);
  // The row's own level-2 node is excluded: draws follow the other three's weights.
  const std::vector<int64_t> rows(4000, 1);
  const TdmSample sample = sampler.Sample(rows, rng);
  const int64_t own = sampler.nodes().id(sample.positives[1]);
  std::map<int64_t, int64_t> counts;
  for (size_t r = 0; r < rows.size(); ++r) ++counts[sampler.nodes().id(sample.negatives[r])];
  EXPECT_EQ(counts.count(own), 0u);
  double total_weight = 0;
  for (const auto& [id, w] : weight) total_weight += id == own ? 0 : w;
  double chi2 = 0;
  for (const auto& [id, w] : weight) {
    if (id == own) continue;
    const double expected = rows.size() * w / total_weight;
    chi2 += (counts[id] - expected) * (counts[id] - expected) / expected;
  }
  EXPECT_LT(chi2, 13.8);  // 2 degrees of freedom, p = 0.001
}

TEST(TdmSampler, RemainRatioKeepsMiddleLevelsByTheirProbability) {
  TempDir dir;
  WriteTree(dir, 32);  // 6 levels, middle levels 1..4
  protos::TDMSampler config = SamplerConfig(dir, {0, 1, 1, 1, 1, 2});
  config.set_remain_ratio(0.5);
  config.set_probability_type("ARITHMETIC");
  TdmSampler sampler(config, "data_config.tdm_sampler");
  std::mt19937_64 rng(3);
  std::map<int, int> kept;
  const int batches = 3000;
  for (int b = 0; b < batches; ++b) {
    const TdmSample sample = sampler.Sample({5, 9}, rng);
    ASSERT_EQ(sample.kept_levels.size(), 2u);  // round(0.5 * 4)
    EXPECT_LT(sample.kept_levels[0], sample.kept_levels[1]);
    EXPECT_EQ(sample.positives_per_row, 2);
    EXPECT_EQ(sample.negatives_per_row, 1 + 1 + 2);
    for (int p = 0; p < 2; ++p) EXPECT_EQ(sampler.level(sample.positives[p]), sample.kept_levels[p]);
    EXPECT_EQ(sampler.level(sample.negatives[2]), 5);  // the leaf level last
    for (int level : sample.kept_levels) ++kept[level];
  }
  // The first pick follows 1:2:3:4, so deeper levels are kept more often.
  EXPECT_LT(kept[1], kept[2]);
  EXPECT_LT(kept[2], kept[3]);
  EXPECT_LT(kept[3], kept[4]);
}

TEST(TdmSampler, RetrievalWalksThePredictEdges) {
  TempDir dir;
  const TdmTree tree = WriteTree(dir, 20);
  TdmSampler walk(SamplerConfig(dir, {0, 1, 1, 2, 3, 4}), "data_config.tdm_sampler", TdmTreeUse::kRetrieve);
  const SamplerItemTable& nodes = walk.nodes();
  size_t count = 0;
  const uint32_t* root = walk.Children(walk.entry_node(), &count);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(nodes.id(root[0]), tree.node(0).id);
  EXPECT_EQ(walk.level(walk.entry_node()), -1);
  // Every node's children are the tree's, in code order, a level further down.
  for (const auto& level : tree.levels()) {
    for (int64_t code : level) {
      const int64_t index = nodes.Find(tree.node(code).id);
      ASSERT_GE(index, 0);
      const uint32_t* children = walk.Children(static_cast<uint32_t>(index), &count);
      ASSERT_EQ(count, tree.node(code).children.size()) << code;
      for (size_t c = 0; c < count; ++c) {
        EXPECT_EQ(nodes.id(children[c]), tree.node(tree.node(code).children[c]).id);
        EXPECT_EQ(walk.level(children[c]), walk.level(static_cast<uint32_t>(index)) + 1);
      }
    }
  }
  // Retrieval needs the predict edges and the entry node; training draws are refused.
  protos::TDMSampler no_edges = SamplerConfig(dir, {0, 1, 1, 2, 3, 4});
  no_edges.clear_predict_edge_input_path();
  EXPECT_TZREC_ERROR(TdmSampler(no_edges, "data_config.tdm_sampler", TdmTreeUse::kRetrieve),
                   "data_config.tdm_sampler.predict_edge_input_path is required for retrieval");
  std::mt19937_64 rng(1);
  EXPECT_THROW(walk.Sample({3}, rng), std::exception);
}

TEST(TdmSampler, ConfigAndDataErrors) {
  TempDir dir;
  WriteTree(dir, 8);
  EXPECT_TZREC_ERROR(TdmSampler(SamplerConfig(dir, {1, 1, 1, 1}), "data_config.tdm_sampler"),
                     "data_config.tdm_sampler.layer_num_sample[0] must be 0");
  EXPECT_TZREC_ERROR(TdmSampler(SamplerConfig(dir, {0, 1, 1}), "data_config.tdm_sampler"),
                     "is on level 3 but layer_num_sample has 3 entries");
  EXPECT_TZREC_ERROR(TdmSampler(SamplerConfig(dir, {0, 2, 1, 1}), "data_config.tdm_sampler"),
                     "data_config.tdm_sampler.layer_num_sample[1] = 2: level 1 has 2 nodes");
  protos::TDMSampler bad_type = SamplerConfig(dir, {0, 1, 1, 1});
  bad_type.set_probability_type("GEOMETRIC");
  EXPECT_TZREC_ERROR(TdmSampler(bad_type, "data_config.tdm_sampler"), "probability_type: 'GEOMETRIC'");
  TdmSampler sampler(SamplerConfig(dir, {0, 1, 1, 1}), "data_config.tdm_sampler");
  std::mt19937_64 rng(1);
  EXPECT_TZREC_ERROR(sampler.Sample({1, 99}, rng), "item 99 is not a leaf of the tree (not in the node table)");
  const int64_t root = sampler.nodes().id(0) == -1 ? sampler.nodes().id(1) : sampler.nodes().id(0);
  EXPECT_TZREC_ERROR(sampler.Sample({root}, rng), "is not a leaf of the tree (a node on level 0)");
  // A leaf without its edges.
  const std::string edges = ReadFileToString(dir.File("tree/edge_table.txt"));
  std::string pruned;
  for (const std::string& line : Split(edges, "\n")) {
    if (!StartsWith(line, "3\t") && !line.empty()) pruned += line + "\n";
  }
  testing::WriteFile(dir.File("tree/pruned_edge_table.txt"), pruned);  // another path: tables are cached by path
  protos::TDMSampler pruned_config = SamplerConfig(dir, {0, 1, 1, 1});
  pruned_config.set_edge_input_path(dir.File("tree/pruned_edge_table.txt"));
  TdmSampler no_edges(pruned_config, "data_config.tdm_sampler");
  EXPECT_TZREC_ERROR(no_edges.Sample({3}, rng), "leaf 3 has no ancestor on level 1");
}

// The dataset grows each batch as expand_tdm_sample: B rows, then each row's ancestors (label
// 1), then its negatives (label 0); item features come from the sampled nodes' attributes,
// user features and sample weights repeat their row's.
TEST(TdmSampler, DatasetExpandsEachBatch) {
  TempDir dir;
  const TdmTree tree = WriteTree(dir, 8);  // 4 levels
  std::string data = "user_id,item_id,cate_id,w,clk\n";
  for (int r = 0; r < 6; ++r) data += StrCat(50 + r, ",", r + 1, ",", (r + 1) % 3, ",", r, ".5,", r % 2, "\n");
  testing::WriteFile(dir.File("train.csv"), data);
  auto config = ParsePipelineConfigText(R"(
    data_config { dataset_type: CsvDataset with_header: true label_fields: "clk" sample_weight_fields: "w"
                  batch_size: 4 tdm_sampler { attr_fields: "cate_id" item_id_field: "item_id" attr_delimiter: ","
                  layer_num_sample: [0, 1, 1, 2] } }
    feature_configs { id_feature { feature_name: "user_id" num_buckets: 100 embedding_dim: 4 } }
    feature_configs { id_feature { feature_name: "item_id" num_buckets: 100 embedding_dim: 4 } }
    feature_configs { id_feature { feature_name: "cate_id" hash_bucket_size: 10 embedding_dim: 4 } }
  )", "test");
  *config.mutable_data_config()->mutable_tdm_sampler() = SamplerConfig(dir, {0, 1, 1, 2});
  auto features = CreateFeatures(config.feature_configs(), config.data_config());
  std::vector<const Feature*> views;
  for (const auto& f : features) {
    EXPECT_EQ(f->data_group(), "__BASE__");
    views.push_back(f.get());
  }
  Dataset dataset(config.data_config(), views, dir.File("train.csv"), DatasetMode::kTrain, 7);
  ASSERT_NE(dataset.tdm_sampler(), nullptr);
  EXPECT_EQ(dataset.sampler(), nullptr);
  auto stream = dataset.Open(0);
  ParsedBatch batch;
  std::vector<int64_t> rows_per_batch;
  std::map<int64_t, int64_t> code_of;
  for (const auto& level : tree.levels()) {
    for (int64_t code : level) code_of[tree.node(code).id] = code;
  }
  while (stream->Next(&batch)) {
    // B rows, 2 ancestors each (levels 1, 2), 1 + 1 + 2 negatives each.
    const int64_t b = batch.size / (1 + 2 + 4);
    ASSERT_EQ(batch.size, b * 7);
    rows_per_batch.push_back(b);
    const SparseValues& items = batch.sparse.at("item_id");
    const SparseValues& users = batch.sparse.at("user_id");
    ASSERT_EQ(items.values.size(), static_cast<size_t>(batch.size));
    ASSERT_EQ(users.values.size(), static_cast<size_t>(batch.size));
    const std::vector<float>& labels = batch.labels.at("clk");
    const std::vector<float>& weights = batch.sample_weights.at("w");
    for (int64_t r = 0; r < b; ++r) {
      const int64_t leaf = items.values[r];
      std::vector<int64_t> ancestors = tree.Ancestors(code_of.at(leaf));  // parent first
      for (int p = 0; p < 2; ++p) {
        const int64_t row = b + r * 2 + p;
        EXPECT_EQ(items.values[row], tree.node(ancestors[1 - p]).id);  // level 1, then level 2
        EXPECT_EQ(users.values[row], users.values[r]);
        EXPECT_EQ(labels[row], 1.0f);
        EXPECT_EQ(weights[row], weights[r]);
      }
      for (int n = 0; n < 4; ++n) {
        const int64_t row = 3 * b + r * 4 + n;
        EXPECT_EQ(users.values[row], users.values[r]);
        EXPECT_EQ(labels[row], 0.0f);
        EXPECT_NE(items.values[row], leaf);
      }
    }
    EXPECT_TRUE(batch.id_columns.empty());
  }
  EXPECT_EQ(rows_per_batch, (std::vector<int64_t>{4, 2}));

  // A feature reading a node attribute and a user column cannot be generated for a node.
  auto mixed = ParsePipelineConfigText(R"(
    data_config { dataset_type: CsvDataset with_header: true label_fields: "clk" batch_size: 4 fg_mode: FG_DAG }
    feature_configs { id_feature { feature_name: "user_id" expression: "user:user_id" num_buckets: 100 embedding_dim: 4 } }
    feature_configs { combo_feature { feature_name: "user_cate" expression: ["user:user_id", "item:cate_id"]
                                      hash_bucket_size: 100 embedding_dim: 4 } }
  )", "test");
  *mixed.mutable_data_config()->mutable_tdm_sampler() = SamplerConfig(dir, {0, 1, 1, 2});
  auto mixed_features = CreateFeatures(mixed.feature_configs(), mixed.data_config());
  std::vector<const Feature*> mixed_views;
  for (const auto& f : mixed_features) mixed_views.push_back(f.get());
  auto generator = std::make_shared<const fg::FeatureGenerator>(fg::DescribeFeatures(mixed.feature_configs(), protos::FG_DAG),
                                                                protos::FG_DAG);
  EXPECT_TZREC_ERROR(Dataset(mixed.data_config(), mixed_views, dir.File("train.csv"), DatasetMode::kTrain, 7, generator),
                     "data_config.tdm_sampler: feature 'user_cate' reads the tree nodes' attributes (cate_id) and other columns (user_id)");
}

}  // namespace
}  // namespace tzrec
