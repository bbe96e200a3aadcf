// TDM's item tree (tools/tdm_tree.h): leaf codes as TorchEasyRec's tree generator assigns them
// (computed by its algorithm for these items), every leaf on the last level, parents and ids,
// modes and means of non-leaf attributes, and the tables tdm_init_tree writes.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/parquet/parquet_reader.h"
#include "tzrec/tools/tdm_tree.h"

namespace tzrec {
namespace {

using testing::TempDir;
using testing::WriteFile;

TdmTree::Leaf MakeLeaf(int64_t id, const std::string& cate, std::vector<std::string> attrs = {},
                       std::vector<std::string> raw = {}) {
  TdmTree::Leaf leaf;
  leaf.id = id;
  leaf.cate = cate;
  leaf.attrs = std::move(attrs);
  leaf.raw_attrs = std::move(raw);
  return leaf;
}

std::map<int64_t, int64_t> LeafCodes(const TdmTree& tree) {
  std::map<int64_t, int64_t> codes;  // item id -> code
  for (int64_t code : tree.levels().back()) {
    EXPECT_TRUE(tree.node(code).leaf) << code;
    codes[tree.node(code).id] = code;
  }
  return codes;
}

TEST(TdmTree, BinaryCodesAreTorchEasyRecs) {
  // Sorted by (category, id): a3 a7 b5 b10 c1; runs split in halves, the first run taking the
  // higher code, then pulled down to level 3 (codes 7..14).
  const TdmTree tree({MakeLeaf(10, "b"), MakeLeaf(3, "a"), MakeLeaf(7, "a"), MakeLeaf(1, "c"), MakeLeaf(5, "b")}, 2, {},
                     {});
  EXPECT_EQ(LeafCodes(tree), (std::map<int64_t, int64_t>{{3, 13}, {7, 11}, {5, 9}, {10, 8}, {1, 7}}));
  ASSERT_EQ(tree.levels().size(), 4u);
  EXPECT_EQ(tree.levels()[0], std::vector<int64_t>{0});
  // Non-leaf ids: max item id (10) + code + 1; parents (code - 1) / 2.
  EXPECT_EQ(tree.node(0).id, 11);
  EXPECT_EQ(tree.node(3).id, 14);
  EXPECT_EQ(tree.node(3).children, (std::vector<int64_t>{7, 8}));
  EXPECT_EQ(tree.Ancestors(13), (std::vector<int64_t>{6, 2, 0}));
}

TEST(TdmTree, EveryLeafIsOnTheLastLevelWithItsAncestors) {
  for (const int64_t n : {2, 3, 4}) {
    for (const int64_t items : {2, 7, 10, 33, 100}) {
      SCOPED_TRACE(StrCat(n, " children, ", items, " items"));
      std::vector<TdmTree::Leaf> leaves;
      for (int64_t i = 1; i <= items; ++i) leaves.push_back(MakeLeaf(i * 3, std::string(1, static_cast<char>('a' + i % 5))));
      const TdmTree tree(leaves, n, {}, {});
      EXPECT_EQ(LeafCodes(tree).size(), static_cast<size_t>(items));
      std::set<int64_t> ids;
      for (size_t level = 0; level < tree.levels().size(); ++level) {
        for (int64_t code : tree.levels()[level]) {
          const TdmTree::Node& node = tree.node(code);
          EXPECT_EQ(node.level, static_cast<int>(level));
          EXPECT_EQ(node.leaf, level + 1 == tree.levels().size()) << code;
          EXPECT_EQ(node.leaf, node.children.empty()) << code;
          EXPECT_TRUE(ids.insert(node.id).second) << "id " << node.id << " twice";
          for (int64_t child : node.children) EXPECT_EQ((child - 1) / n, code);
          EXPECT_LE(node.children.size(), static_cast<size_t>(n));
        }
      }
      // As few levels as a balanced split needs (at most one more than log_n items).
      int64_t capacity = 1, levels = 1;
      while (capacity < items) capacity *= n, ++levels;
      EXPECT_GE(static_cast<int64_t>(tree.levels().size()), levels);
      EXPECT_LE(static_cast<int64_t>(tree.levels().size()), levels + 1);
    }
  }
}

TEST(TdmTree, NonLeafAttributesAreModesAndMeans) {
  // Four leaves under one root (n = 4): text mode "x" (tie with "y" goes to the first seen in
  // leaf order), numeric mode 2 (tie with 5 goes to the smaller), empty values skipped; raw
  // means 2.5 (float) and 2 (integers 1, 2, 3, 4: 2.5 rounds half to even).
  const TdmTree tree({MakeLeaf(1, "a", {"x", "5", ""}, {"1.5", "1"}), MakeLeaf(2, "a", {"y", "2", ""}, {"2.5", "2"}),
                      MakeLeaf(3, "b", {"x", "5", ""}, {"", "3"}), MakeLeaf(4, "b", {"y", "2", "z"}, {"3.5", "4"})},
                     4, {false, true, false}, {false, true});
  ASSERT_EQ(tree.levels().size(), 2u);
  const TdmTree::Node& root = tree.node(0);
  EXPECT_EQ(root.attrs, (std::vector<std::string>{"x", "2", "z"}));
  EXPECT_EQ(root.raw_attrs, (std::vector<std::string>{"2.5", "2"}));
}

TEST(TdmTree, InitTreeWritesTheTablesTdmReads) {
  TempDir dir;
  std::string items = "item_id,cate_id,brand,price\n";
  for (int i = 1; i <= 6; ++i) items += StrCat(i, ",c", i % 2, ",b", i % 3, ",", i, ".5\n");
  WriteFile(dir.File("items.csv"), items);
  const int rc = TdmInitTreeMain({"--item_input_path=" + dir.File("items.csv"), "--item_id_field=item_id",
                                    "--cate_id_field=cate_id", "--attr_fields=cate_id,brand", "--raw_attr_fields=price",
                                    "--node_edge_output_file=" + dir.File("tree"), "--tree_output_dir=" + dir.File("serving")});
  ASSERT_EQ(rc, 0);
  // 6 leaves, n = 2: levels of 1, 2, 4 and 8 codes, the leaves on level 3.
  const std::vector<std::string> nodes = Split(Trim(ReadFileToString(dir.File("tree/node_table.txt"))), "\n");
  EXPECT_EQ(nodes[0], "id:int64\tweight:float\tfeature:string");
  const int64_t root_id = 6 + 0 + 1;
  EXPECT_TRUE(StartsWith(nodes[1], StrCat("-1\t1.0\t-1,", root_id, ","))) << nodes[1];
  EXPECT_TRUE(StartsWith(nodes[2], StrCat(root_id, "\t1.0\t0,", root_id, ","))) << nodes[2];
  int64_t leaves = 0;
  for (size_t i = 2; i < nodes.size(); ++i) {
    const std::vector<std::string> cells = Split(nodes[i], "\t");
    ASSERT_EQ(cells.size(), 3u);
    const std::vector<std::string> feature = Split(cells[2], ",");
    ASSERT_EQ(feature.size(), 5u) << nodes[i];  // level, id, cate_id, brand, price
    EXPECT_EQ(feature[1], cells[0]);
    if (feature[0] == "3") {
      ++leaves;
      int64_t id = 0;
      ASSERT_TRUE(ParseInt64(cells[0], &id));
      EXPECT_EQ(feature[2], StrCat("c", id % 2));
      EXPECT_EQ(feature[4], StrCat(id, ".5"));
    }
  }
  EXPECT_EQ(leaves, 6);
  // Each leaf to its parent and grandparent (not the root): 12 edges.
  const std::vector<std::string> edges = Split(Trim(ReadFileToString(dir.File("tree/edge_table.txt"))), "\n");
  EXPECT_EQ(edges[0], "src_id:int64\tdst_id:int64\tweight:float");
  EXPECT_EQ(edges.size(), 1u + 12u);
  // -1 to the root, then one edge per non-root node.
  const std::vector<std::string> predict = Split(Trim(ReadFileToString(dir.File("tree/predict_edge_table.txt"))), "\n");
  EXPECT_EQ(predict[1], StrCat("-1\t", root_id, "\t1.0"));
  EXPECT_EQ(predict.size(), 1u + nodes.size() - 2);
  const std::vector<std::string> serving = Split(Trim(ReadFileToString(dir.File("serving/serving_tree"))), "\n");
  EXPECT_EQ(serving[0], "4 2");
  EXPECT_EQ(serving[1], StrCat("0 ", root_id));
  EXPECT_EQ(serving.size(), nodes.size() - 1);
  ParquetFileReader features(dir.File("tree/node_feature/part-0.parquet"), {});
  RecordBatch batch;
  ASSERT_TRUE(features.Next(100, &batch));
  EXPECT_EQ(batch.num_rows(), nodes.size() - 2);
  EXPECT_EQ(batch.Find("item_id")->ints[0], root_id);
  ASSERT_NE(batch.Find("brand"), nullptr);
  ASSERT_NE(batch.Find("price"), nullptr);

  EXPECT_TZREC_ERROR(TdmInitTreeMain({"--item_input_path=" + dir.File("items.csv"),
                                        "--item_id_field=item_id", "--cate_id_field=cate_id", "--n_cluster=1",
                                        "--node_edge_output_file=" + dir.File("tree2")}),
                     "--n_cluster must be >= 2");
  WriteFile(dir.File("dup.csv"), "item_id,cate_id\n1,a\n1,b\n");
  EXPECT_TZREC_ERROR(TdmInitTreeMain({"--item_input_path=" + dir.File("dup.csv"),
                                        "--item_id_field=item_id", "--cate_id_field=cate_id",
                                        "--node_edge_output_file=" + dir.File("tree3")}),
                     "item id 1 appears twice");
}

}  // namespace
}  // namespace tzrec
