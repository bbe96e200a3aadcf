// tdm_cluster_tree (tools/tdm_cluster_tree.h): the balanced recursive k-means puts items with
// alike embeddings under one ancestor, splits every node into near-equal halves whatever the
// clusters' sizes, gives the same codes on any number of threads, and writes tables the
// tdm_sampler reads; trees from given codes reject codes that are not leaves.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/input/tdm_sampler.h"
#include "tzrec/tools/tdm_cluster_tree.h"

namespace tzrec {
namespace {

using testing::TempDir;

// `sizes[b]` items around (x[b], 0, ...) with small noise, in `dim` dimensions.
std::vector<float> Blobs(const std::vector<int>& sizes, const std::vector<float>& x, int64_t dim,
                         std::vector<int>* blob_of) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> noise(0.0f, 0.05f);
  std::vector<float> out;
  for (size_t b = 0; b < sizes.size(); ++b) {
    for (int i = 0; i < sizes[b]; ++i) {
      for (int64_t d = 0; d < dim; ++d) out.push_back((d == 0 ? x[b] : 0.0f) + noise(rng));
      blob_of->push_back(static_cast<int>(b));
    }
  }
  return out;
}

// The ancestor of `code` at depth `depth` (root 0 at depth 0).
int64_t AncestorAt(int64_t code, int64_t n, int depth) {
  std::vector<int64_t> path = {code};
  while (code > 0) {
    code = (code - 1) / n;
    path.push_back(code);
  }
  return path[path.size() - 1 - depth];
}

TEST(TdmClusterTree, AlikeItemsShareAncestors) {
  std::vector<int> blob_of;
  // Pairs of near blobs far from each other: the root splits the pairs, depth 1 the blobs.
  const std::vector<float> embeddings = Blobs({8, 8, 8, 8}, {0, 3, 30, 33}, 4, &blob_of);
  const std::vector<int64_t> codes = ClusterTdmCodes(embeddings, 32, 4, 2, 1);
  // Four blobs of 8 in a binary tree: each blob is one subtree at depth 2.
  std::map<int64_t, std::set<int>> blobs_under;
  for (size_t i = 0; i < codes.size(); ++i) blobs_under[AncestorAt(codes[i], 2, 2)].insert(blob_of[i]);
  ASSERT_EQ(blobs_under.size(), 4u);
  for (const auto& [ancestor, blobs] : blobs_under) EXPECT_EQ(blobs.size(), 1u) << ancestor;
  // 32 items: a complete tree, every leaf at depth 5.
  for (int64_t code : codes) {
    EXPECT_GE(code, 31);
    EXPECT_LT(code, 63);
  }
  EXPECT_EQ(std::set<int64_t>(codes.begin(), codes.end()).size(), 32u);
}

TEST(TdmClusterTree, SplitsAreBalancedAndThreadCountDoesNotMatter) {
  // Blobs of 13 and 5: the root's children still get 9 items each (overflow nearest first).
  std::vector<int> blob_of;
  const std::vector<float> embeddings = Blobs({13, 5}, {0, 10}, 3, &blob_of);
  const std::vector<int64_t> codes = ClusterTdmCodes(embeddings, 18, 3, 2, 1);
  std::map<int64_t, int> under;
  for (int64_t code : codes) ++under[AncestorAt(code, 2, 1)];
  ASSERT_EQ(under.size(), 2u);
  EXPECT_EQ(under.begin()->second, 9);
  EXPECT_EQ(under.rbegin()->second, 9);
  EXPECT_EQ(ClusterTdmCodes(embeddings, 18, 3, 2, 3), codes);
  // Three children per node; odd counts leave the remainder with cluster 0.
  const std::vector<int64_t> ternary = ClusterTdmCodes(embeddings, 18, 3, 3, 2);
  std::map<int64_t, int> thirds;
  for (int64_t code : ternary) ++thirds[AncestorAt(code, 3, 1)];
  ASSERT_EQ(thirds.size(), 3u);
  for (const auto& [child, count] : thirds) EXPECT_EQ(count, 6) << child;
}

TEST(TdmClusterTree, WritesTablesTheSamplerReads) {
  TempDir dir;
  std::vector<int> blob_of;
  const std::vector<float> embeddings = Blobs({6, 6, 5}, {0, 10, 20}, 3, &blob_of);
  std::string csv = "item_id,cate_id,price,item_emb\n";
  for (int i = 0; i < 17; ++i) {
    std::string emb;
    for (int d = 0; d < 3; ++d) emb += (d ? "," : "") + StrCat(embeddings[i * 3 + d]);
    csv += StrCat(100 + i, ",c", blob_of[i], ",", i, ",\"", emb, "\"\n");
  }
  testing::WriteFile(dir.File("items.csv"), csv);
  TdmClusterOptions options;
  options.tree.item_input_path = dir.File("items.csv");
  options.tree.item_id_field = "item_id";
  options.tree.attr_fields = {"cate_id"};
  options.tree.raw_attr_fields = {"price"};
  options.parallel = 2;
  const TdmTree tree = BuildClusteredTdmTree(options);
  EXPECT_EQ(tree.levels().back().size(), 17u);
  ASSERT_EQ(tree.levels().size(), 6u);  // 17 leaves need 5 splits
  tree.WriteNodeEdgeTables(dir.File("tree"), ",");
  protos::TDMSampler config;
  config.set_item_input_path(dir.File("tree/node_table.txt"));
  config.set_edge_input_path(dir.File("tree/edge_table.txt"));
  config.set_predict_edge_input_path(dir.File("tree/predict_edge_table.txt"));
  config.add_attr_fields("cate_id");
  config.add_attr_fields("price");
  config.set_item_id_field("item_id");
  config.set_attr_delimiter(",");
  for (int level = 0; level < 6; ++level) config.add_layer_num_sample(level ? 1 : 0);
  TdmSampler sampler(config, "data_config.tdm_sampler");
  std::mt19937_64 rng(3);
  const TdmSample sample = sampler.Sample({100, 116}, rng);
  EXPECT_EQ(sample.positives_per_row, 4);
  // Non-leaf nodes carry their leaves' modes and means, as tdm_init_tree's.
  EXPECT_EQ(tree.node(0).raw_attrs[0], "8");  // mean of 0..16

  // The command takes TorchEasyRec's flags and writes the same tables.
  EXPECT_EQ(TdmClusterTreeMain({"--item_input_path", dir.File("items.csv"), "--item_id_field", "item_id",
                                "--embedding_field=item_emb", "--attr_fields=cate_id", "--raw_attr_fields=price",
                                "--node_edge_output_file", dir.File("cli_tree"), "--tree_output_dir", dir.File("cli_tree"),
                                "--parallel=1", "--n_cluster=2"}),
            0);
  EXPECT_EQ(ReadFileToString(dir.File("cli_tree/node_table.txt")), ReadFileToString(dir.File("tree/node_table.txt")));
  EXPECT_TRUE(PathExists(dir.File("cli_tree/serving_tree")));

  EXPECT_TZREC_ERROR(ClusterTdmCodes(embeddings, 1, 3, 2, 1), "at least 2 items are needed");
  testing::WriteFile(dir.File("bad.csv"), "item_id,item_emb\n1,\"0.5,x\"\n2,\"1,2\"\n");
  options.tree.item_input_path = dir.File("bad.csv");
  options.tree.attr_fields.clear();
  options.tree.raw_attr_fields.clear();
  EXPECT_TZREC_ERROR(BuildClusteredTdmTree(options), "column 'item_emb'");
}

TEST(TdmTree, GivenCodesMustBeLeaves) {
  auto leaves = [] {
    std::vector<TdmTree::Leaf> out(3);
    for (int i = 0; i < 3; ++i) out[i].id = i + 1;
    return out;
  };
  // Codes 3, 4 (children of 1) and 2: leaf 2 moves down to the last level (code 5).
  const TdmTree tree(leaves(), {3, 4, 2}, 2, {}, {});
  ASSERT_EQ(tree.levels().size(), 3u);
  EXPECT_EQ(tree.levels().back(), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(tree.node(5).id, 3);
  EXPECT_TZREC_ERROR(TdmTree(leaves(), {3, 3, 2}, 2, {}, {}), "leaf code 3 given twice");
  EXPECT_TZREC_ERROR(TdmTree(leaves(), {3, 1, 2}, 2, {}, {}), "leaf code 1 is an ancestor of leaf code 3");
}

}  // namespace
}  // namespace tzrec
