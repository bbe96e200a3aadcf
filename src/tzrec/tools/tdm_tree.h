// TDM's item tree and `tzrec tdm_init_tree` (TorchEasyRec's tools/tdm/init_tree.py): items
// become the leaves of a complete n_cluster-ary tree, grouped by category, and the tree is
// written in the tables TDM training, retrieval and serving read.
//
// Building (TorchEasyRec's TreeGenerator and TreeBuilder): leaves are sorted by (category text,
// item id) and split recursively into n_cluster near-equal runs, the i-th run of node `code`
// taking code n * code + n - i (so the first run gets the highest code); a leaf shallower than
// the deepest one moves down to its leftmost descendant (code * n + 1) until it is on the last
// level. Node `code`'s parent is (code - 1) / n. (TorchEasyRec moves leaves down until their code
// reaches n^L - 1, L the fewest levels with n^L >= items: the same for n_cluster 2, but for more
// children it leaves some leaves a level short, without the edges that make their ancestors
// positives; we keep every leaf on the last level.) A
// non-leaf node's id is max item id + code + 1; its attributes are the mode of its leaves'
// (text: the most frequent non-empty value, ties to the first in leaf order; numeric columns:
// ties to the smallest) and its raw attributes their mean (rounded half to even for integer
// columns).
//
// Output, under `node_edge_output_file` (a directory):
//   node_table.txt          id:int64 | weight:float | feature:string, feature = level, id,
//                           attrs..., raw attrs... joined by attr_delimiter, nodes in level
//                           order (codes ascending); first a node -1 standing for the root
//                           (GraphLearn's entry point)
//   edge_table.txt          src_id:int64 | dst_id:int64 | weight:float, each leaf to every
//                           ancestor but the root (tdm_sampler's positives)
//   predict_edge_table.txt  -1 to the root, then every parent to its children (beam search)
//   node_feature/part-0.parquet  item id, attrs (text), raw attrs (double) of every node
// and under `tree_output_dir` (optional) `serving_tree`: "<levels> <n_cluster>", then
// "<code> <id>" per node in level order.
//
// Thread safety: a TdmTree is immutable after construction.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tzrec/data/record_batch.h"

namespace tzrec {

struct TdmTreeOptions {
  std::string item_input_path;  // comma-separated globs, CSV with a header or Parquet
  std::string item_id_field;
  std::string cate_id_field;
  std::vector<std::string> attr_fields;      // categorical attributes (modes)
  std::vector<std::string> raw_attr_fields;  // numeric attributes (means)
  std::string attr_delimiter = ",";
  std::string node_edge_output_file;  // directory of the node and edge tables
  std::string tree_output_dir;        // directory of serving_tree ("" for none)
  int64_t n_cluster = 2;
  std::string reader_type;  // CsvReader, ParquetReader or "" (by extension)
};

class TdmTree {
 public:
  struct Leaf {
    int64_t id = 0;
    std::string cate;
    std::vector<std::string> attrs;      // "" for null
    std::vector<std::string> raw_attrs;  // "" for null
  };
  struct Node {
    int64_t code = 0;
    int64_t id = 0;
    int level = 0;
    bool leaf = false;
    std::vector<std::string> attrs;
    std::vector<std::string> raw_attrs;
    std::vector<int64_t> children;  // codes, ascending
  };

  // `numeric_attrs[i]`: attribute column i holds numbers (modes break ties by value);
  // `integer_raw_attrs[i]`: raw attribute column i holds integers (means are rounded).
  TdmTree(std::vector<Leaf> leaves, int64_t n_cluster, const std::vector<bool>& numeric_attrs,
          const std::vector<bool>& integer_raw_attrs);
  // The tree of leaves with the codes `codes` (tdm_cluster_tree's), each leaf then moved to
  // the last level as above. Codes must be distinct, > 0, and no leaf another's ancestor.
  TdmTree(std::vector<Leaf> leaves, std::vector<int64_t> codes, int64_t n_cluster,
          const std::vector<bool>& numeric_attrs, const std::vector<bool>& integer_raw_attrs);

  int64_t n_cluster() const { return n_cluster_; }
  // Levels, root first; each the codes of its nodes, ascending.
  const std::vector<std::vector<int64_t>>& levels() const { return levels_; }
  const Node& node(int64_t code) const;
  // Codes of `code`'s ancestors, parent first, root last.
  std::vector<int64_t> Ancestors(int64_t code) const;

  // Column names of the attributes in node_feature (default attr_<i> / raw_attr_<i>).
  void SetAttrNames(std::vector<std::string> attrs, std::vector<std::string> raw_attrs);
  void WriteNodeEdgeTables(const std::string& dir, const std::string& attr_delimiter) const;
  void WriteServingTree(const std::string& dir) const;

 private:
  void Build(std::vector<Leaf> leaves, std::vector<int64_t> codes, const std::vector<bool>& numeric_attrs,
             const std::vector<bool>& integer_raw_attrs);

  int64_t n_cluster_;
  std::vector<int32_t> index_;  // code -> position in nodes_, -1 when absent
  std::vector<Node> nodes_;
  std::vector<std::vector<int64_t>> levels_;
  std::vector<std::string> attr_names_, raw_attr_names_;
};

// The items of `options.item_input_path` as leaves (category, attributes, raw attributes as
// text; raw attributes must be numbers); `on_row`, when set, also sees each row, which holds
// `extra_columns` too. `numeric` / `integer` (set when not null): per attribute column, whether
// all its values are numbers, per raw attribute column whether all are integers.
std::vector<TdmTree::Leaf> ReadTdmLeaves(const TdmTreeOptions& options, const std::vector<std::string>& extra_columns,
                                         const std::function<void(const RecordBatch&, size_t)>& on_row,
                                         std::vector<bool>* numeric, std::vector<bool>* integer);

// Reads the items of `options` and builds their tree.
TdmTree BuildTdmTree(const TdmTreeOptions& options);

int TdmInitTreeMain(const std::vector<std::string>& args);

}  // namespace tzrec
