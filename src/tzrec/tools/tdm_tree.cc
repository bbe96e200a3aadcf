#include "tzrec/tools/tdm_tree.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <unordered_map>

#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/parquet/parquet_writer.h"
#include "tzrec/input/sampler.h"
#include "tzrec/tools/faiss_index.h"

namespace tzrec {
namespace {

// The shortest text that reads back as `value` (Python's repr of a float).
std::string ShortestDouble(double value) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";  // 2 -> "2.0", as Python
  return text;
}

// A cell as attribute text ("" for null); doubles without the 6-digit rounding of TextAt.
std::string CellText(const Column& column, size_t row) {
  if (column.IsNull(row)) return "";
  if (column.type == ColumnType::kDouble) return ShortestDouble(column.doubles[row]);
  return column.TextAt(row);
}

// The most frequent non-empty value; ties go to the smallest number (`numeric`) or to the
// first seen. "" when every value is empty.
std::string Mode(const std::vector<const std::string*>& values, bool numeric) {
  std::unordered_map<std::string_view, std::pair<int64_t, size_t>> counts;  // count, first seen
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i]->empty()) continue;
    auto [it, inserted] = counts.try_emplace(*values[i], 0, i);
    ++it->second.first;
  }
  const std::string* best = nullptr;
  std::pair<int64_t, size_t> best_count{0, 0};
  double best_number = 0;
  for (const auto& [text, count] : counts) {
    double number = 0;
    if (numeric) ParseDouble(text, &number);
    bool better = !best || count.first > best_count.first;
    if (best && count.first == best_count.first) {
      better = numeric ? number < best_number : count.second < best_count.second;
    }
    if (better) {
      best = values[count.second];
      best_count = count;
      best_number = number;
    }
  }
  return best ? *best : std::string();
}

// Mean of the non-empty values (rounded half to even for integer columns); "" when none.
std::string Mean(const std::vector<const std::string*>& values, bool integer) {
  double sum = 0;
  int64_t count = 0;
  for (const std::string* text : values) {
    double value = 0;
    if (text->empty() || !ParseDouble(*text, &value)) continue;
    sum += value;
    ++count;
  }
  if (count == 0) return "";
  const double mean = sum / static_cast<double>(count);
  if (integer) return std::to_string(static_cast<int64_t>(std::nearbyint(mean)));  // FE_TONEAREST: half to even
  return ShortestDouble(mean);
}

bool AllMatch(const std::vector<TdmTree::Leaf>& leaves, size_t column, bool raw, bool (*parse)(std::string_view)) {
  for (const auto& leaf : leaves) {
    const std::string& text = raw ? leaf.raw_attrs[column] : leaf.attrs[column];
    if (!text.empty() && !parse(text)) return false;
  }
  return true;
}

bool IsInteger(std::string_view text) {
  int64_t value = 0;
  return ParseInt64(text, &value);
}

bool IsNumber(std::string_view text) {
  double value = 0;
  return ParseDouble(text, &value);
}

}  // namespace

TdmTree::TdmTree(std::vector<Leaf> leaves, int64_t n_cluster, const std::vector<bool>& numeric_attrs,
                 const std::vector<bool>& integer_raw_attrs)
    : n_cluster_(n_cluster) {
  if (n_cluster < 2) Fail("tdm tree: --n_cluster must be >= 2, got ", n_cluster);
  if (leaves.size() < 2) Fail("tdm tree: at least 2 items are needed, got ", leaves.size());
  std::stable_sort(leaves.begin(), leaves.end(), [](const Leaf& a, const Leaf& b) {
    return a.cate != b.cate ? a.cate < b.cate : a.id < b.id;
  });
  const int64_t n = n_cluster;
  const int64_t count = static_cast<int64_t>(leaves.size());
  // Codes: the i-th of n runs of node `code` is n * code + n - i.
  std::vector<int64_t> codes(leaves.size(), -1);
  std::vector<std::tuple<int64_t, int64_t, int64_t>> stack = {{0, count, 0}};
  while (!stack.empty()) {
    auto [start, end, code] = stack.back();
    stack.pop_back();
    if (end <= start) continue;
    if (end == start + 1) {
      codes[start] = code;
      continue;
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t left = start + i * (end - start) / n;
      const int64_t right = start + (i + 1) * (end - start) / n;
      stack.emplace_back(left, right, n * code + n - i);
    }
  }
  Build(std::move(leaves), std::move(codes), numeric_attrs, integer_raw_attrs);
}

TdmTree::TdmTree(std::vector<Leaf> leaves, std::vector<int64_t> codes, int64_t n_cluster,
                 const std::vector<bool>& numeric_attrs, const std::vector<bool>& integer_raw_attrs)
    : n_cluster_(n_cluster) {
  if (n_cluster < 2) Fail("tdm tree: --n_cluster must be >= 2, got ", n_cluster);
  if (leaves.size() < 2) Fail("tdm tree: at least 2 items are needed, got ", leaves.size());
  TZREC_CHECK(codes.size() == leaves.size(), "one code per leaf");
  std::vector<int64_t> sorted = codes;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    TZREC_CHECK(sorted[i] > 0, "tdm tree: leaf code ", sorted[i], " (the root is no leaf)");
    TZREC_CHECK(i == 0 || sorted[i] != sorted[i - 1], "tdm tree: leaf code ", sorted[i], " given twice");
  }
  // No leaf may be another's ancestor.
  for (int64_t code : sorted) {
    for (int64_t ancestor : Ancestors(code)) {
      TZREC_CHECK(!std::binary_search(sorted.begin(), sorted.end(), ancestor), "tdm tree: leaf code ", ancestor,
                  " is an ancestor of leaf code ", code);
    }
  }
  Build(std::move(leaves), std::move(codes), numeric_attrs, integer_raw_attrs);
}

void TdmTree::Build(std::vector<Leaf> leaves, std::vector<int64_t> codes, const std::vector<bool>& numeric_attrs,
                    const std::vector<bool>& integer_raw_attrs) {
  std::vector<int64_t> ids;
  for (const auto& leaf : leaves) ids.push_back(leaf.id);
  std::sort(ids.begin(), ids.end());
  for (size_t i = 1; i < ids.size(); ++i) {
    if (ids[i] == ids[i - 1]) Fail("tdm tree: item id ", ids[i], " appears twice");
  }
  if (ids.front() < 0) Fail("tdm tree: item ids must be >= 0 (-1 stands for the root), got ", ids.front());
  const int64_t n = n_cluster_;
  const int64_t count = static_cast<int64_t>(leaves.size());
  // Every leaf on the last level (the deepest a run reached): a shallower leaf moves to its
  // leftmost descendant there.
  auto depth = [&](int64_t code) { return static_cast<int64_t>(Ancestors(code).size()); };
  int64_t last_level = 0;
  for (int64_t code : codes) last_level = std::max(last_level, depth(code));
  int64_t max_code = 0, max_item_id = 0;
  for (size_t i = 0; i < leaves.size(); ++i) {
    for (int64_t d = depth(codes[i]); d < last_level; ++d) codes[i] = codes[i] * n + 1;
    max_code = std::max(max_code, codes[i]);
    max_item_id = std::max(max_item_id, leaves[i].id);
  }
  if (max_code >= (int64_t{1} << 31)) Fail("tdm tree: ", count, " items with n_cluster ", n, " need codes beyond 2^31");
  index_.assign(max_code + 1, -1);
  // Each non-leaf node's leaves in leaf order (for modes and means).
  std::map<int64_t, std::vector<size_t>> members;
  for (size_t i = 0; i < leaves.size(); ++i) {
    for (int64_t code : Ancestors(codes[i])) members[code].push_back(i);
  }
  for (const auto& [code, leaf_indices] : members) {
    Node node;
    node.code = code;
    node.id = max_item_id + code + 1;
    const size_t attrs = leaves.front().attrs.size(), raws = leaves.front().raw_attrs.size();
    std::vector<const std::string*> column(leaf_indices.size());
    for (size_t a = 0; a < attrs; ++a) {
      for (size_t j = 0; j < leaf_indices.size(); ++j) column[j] = &leaves[leaf_indices[j]].attrs[a];
      node.attrs.push_back(Mode(column, numeric_attrs[a]));
    }
    for (size_t a = 0; a < raws; ++a) {
      for (size_t j = 0; j < leaf_indices.size(); ++j) column[j] = &leaves[leaf_indices[j]].raw_attrs[a];
      node.raw_attrs.push_back(Mean(column, integer_raw_attrs[a]));
    }
    index_[code] = static_cast<int32_t>(nodes_.size());
    nodes_.push_back(std::move(node));
  }
  for (size_t i = 0; i < leaves.size(); ++i) {
    Node node;
    node.code = codes[i];
    node.id = leaves[i].id;
    node.leaf = true;
    node.attrs = std::move(leaves[i].attrs);
    node.raw_attrs = std::move(leaves[i].raw_attrs);
    index_[codes[i]] = static_cast<int32_t>(nodes_.size());
    nodes_.push_back(std::move(node));
  }
  for (size_t a = 0; a < nodes_.front().attrs.size(); ++a) attr_names_.push_back(StrCat("attr_", a));
  for (size_t a = 0; a < nodes_.front().raw_attrs.size(); ++a) raw_attr_names_.push_back(StrCat("raw_attr_", a));
  for (int64_t code = 0; code <= max_code; ++code) {
    if (index_[code] < 0) continue;
    Node& node = nodes_[index_[code]];
    node.level = static_cast<int>(Ancestors(code).size());
    if (static_cast<size_t>(node.level) >= levels_.size()) levels_.resize(node.level + 1);
    levels_[node.level].push_back(code);
    if (code > 0) nodes_[index_[(code - 1) / n]].children.push_back(code);
  }
}

void TdmTree::SetAttrNames(std::vector<std::string> attrs, std::vector<std::string> raw_attrs) {
  TZREC_CHECK(attrs.size() == nodes_.front().attrs.size() && raw_attrs.size() == nodes_.front().raw_attrs.size(),
              "one name per attribute");
  attr_names_ = std::move(attrs);
  raw_attr_names_ = std::move(raw_attrs);
}

const TdmTree::Node& TdmTree::node(int64_t code) const {
  TZREC_CHECK(code >= 0 && code < static_cast<int64_t>(index_.size()) && index_[code] >= 0, "no tree node ", code);
  return nodes_[index_[code]];
}

std::vector<int64_t> TdmTree::Ancestors(int64_t code) const {
  std::vector<int64_t> out;
  while (code > 0) {
    code = (code - 1) / n_cluster_;
    out.push_back(code);
  }
  return out;
}

void TdmTree::WriteNodeEdgeTables(const std::string& dir, const std::string& attr_delimiter) const {
  MakeDirs(dir);
  auto feature = [&](const Node& node, const std::string& level) {
    std::string text = level + attr_delimiter + std::to_string(node.id);
    if (!node.attrs.empty()) text += attr_delimiter + Join(node.attrs, attr_delimiter);
    if (!node.raw_attrs.empty()) {
      std::vector<std::string> raws = node.raw_attrs;
      for (auto& raw : raws) {
        if (raw.empty()) raw = "0";  // a null raw attribute is written as 0 (TorchEasyRec)
      }
      text += attr_delimiter + Join(raws, attr_delimiter);
    }
    return text;
  };
  const Node& root = node(0);
  std::string nodes = "id:int64\tweight:float\tfeature:string\n";
  nodes += "-1\t1.0\t" + feature(root, "-1") + "\n";
  std::string edges = "src_id:int64\tdst_id:int64\tweight:float\n";
  std::string predict_edges = "src_id:int64\tdst_id:int64\tweight:float\n";
  predict_edges += "-1\t" + std::to_string(root.id) + "\t1.0\n";
  for (size_t level = 0; level < levels_.size(); ++level) {
    for (int64_t code : levels_[level]) {
      const Node& n = node(code);
      nodes += std::to_string(n.id) + "\t1.0\t" + feature(n, std::to_string(level)) + "\n";
      for (int64_t child : n.children) predict_edges += StrCat(n.id, "\t", node(child).id, "\t1.0\n");
    }
  }
  // Every leaf (all on the last level) to each ancestor but the root.
  for (int64_t code : levels_.back()) {
    const std::vector<int64_t> ancestors = Ancestors(code);
    for (size_t a = 0; a + 1 < ancestors.size(); ++a) edges += StrCat(node(code).id, "\t", node(ancestors[a]).id, "\t1.0\n");
  }
  // Node features for serving: id, attributes as text, raw attributes as numbers.
  std::vector<ParquetFieldSpec> fields = {ParquetFieldSpec::Plain("item_id", ParquetType::kInt64, false)};
  std::vector<ParquetColumn> columns(1);
  columns[0].name = columns[0].values.name = "item_id";
  columns[0].values.type = ColumnType::kInt64;
  for (size_t a = 0; a < attr_names_.size(); ++a) {
    fields.push_back(ParquetFieldSpec::Plain(attr_names_[a], ParquetType::kString));
    columns.emplace_back().name = attr_names_[a];
    columns.back().values.name = attr_names_[a];
  }
  for (size_t a = 0; a < raw_attr_names_.size(); ++a) {
    fields.push_back(ParquetFieldSpec::Plain(raw_attr_names_[a], ParquetType::kDouble));
    columns.emplace_back().name = raw_attr_names_[a];
    columns.back().values.name = raw_attr_names_[a];
    columns.back().values.type = ColumnType::kDouble;
  }
  for (const auto& level : levels_) {
    for (int64_t code : level) {
      const Node& n = node(code);
      columns[0].values.ints.push_back(n.id);
      columns[0].values.valid.push_back(1);
      for (size_t a = 0; a < attr_names_.size(); ++a) columns[1 + a].values.AppendString(n.attrs[a], !n.attrs[a].empty());
      for (size_t a = 0; a < raw_attr_names_.size(); ++a) {
        Column& column = columns[1 + attr_names_.size() + a].values;
        double value = 0;
        const bool valid = !n.raw_attrs[a].empty() && ParseDouble(n.raw_attrs[a], &value);
        column.doubles.push_back(value);
        column.valid.push_back(valid ? 1 : 0);
      }
    }
  }
  MakeDirs(JoinPath(dir, "node_feature"));
  ParquetFileWriter writer(JoinPath(dir, "node_feature/part-0.parquet"), fields);
  writer.Write(columns);
  writer.Close();
  WriteFileAtomic(JoinPath(dir, "node_table.txt"), nodes);
  WriteFileAtomic(JoinPath(dir, "edge_table.txt"), edges);
  WriteFileAtomic(JoinPath(dir, "predict_edge_table.txt"), predict_edges);
}

void TdmTree::WriteServingTree(const std::string& dir) const {
  MakeDirs(dir);
  std::string text = StrCat(levels_.size(), " ", n_cluster_, "\n");
  for (const auto& level : levels_) {
    for (int64_t code : level) text += StrCat(code, " ", node(code).id, "\n");
  }
  WriteFileAtomic(JoinPath(dir, "serving_tree"), text);
}

std::vector<TdmTree::Leaf> ReadTdmLeaves(const TdmTreeOptions& options, const std::vector<std::string>& extra_columns,
                                         const std::function<void(const RecordBatch&, size_t)>& on_row,
                                         std::vector<bool>* numeric, std::vector<bool>* integer) {
  if (options.item_id_field.empty()) Fail("--item_id_field is required");
  for (const auto& attr : options.attr_fields) {
    if (attr == options.item_id_field) Fail("--attr_fields: the item id field '", attr, "' is not an attribute");
  }
  std::vector<std::string> columns = {options.item_id_field};
  if (!options.cate_id_field.empty()) columns.push_back(options.cate_id_field);
  for (const auto& list : {options.attr_fields, options.raw_attr_fields, extra_columns}) {
    for (const auto& name : list) {
      if (std::find(columns.begin(), columns.end(), name) == columns.end()) columns.push_back(name);
    }
  }
  std::vector<TdmTree::Leaf> leaves;
  ForEachTableBatch(options.item_input_path, options.reader_type, columns, 4096, [&](const RecordBatch& batch) {
    const Column* id = batch.Find(options.item_id_field);
    const Column* cate = options.cate_id_field.empty() ? nullptr : batch.Find(options.cate_id_field);
    for (size_t row = 0; row < batch.num_rows(); ++row) {
      TdmTree::Leaf leaf;
      leaf.id = IdAt(batch, *id, row, "--item_id_field '" + options.item_id_field + "'");
      if (cate) leaf.cate = CellText(*cate, row);
      for (const auto& name : options.attr_fields) leaf.attrs.push_back(CellText(*batch.Find(name), row));
      for (const auto& name : options.raw_attr_fields) {
        leaf.raw_attrs.push_back(CellText(*batch.Find(name), row));
        double value = 0;
        if (!leaf.raw_attrs.back().empty() && !ParseDouble(leaf.raw_attrs.back(), &value)) {
          Fail(batch.RowLocation(row), ": --raw_attr_fields column '", name, "' holds '", leaf.raw_attrs.back(),
               "', not a number");
        }
      }
      if (on_row) on_row(batch, row);
      leaves.push_back(std::move(leaf));
    }
  });
  if (numeric) {
    numeric->assign(options.attr_fields.size(), false);
    for (size_t a = 0; a < numeric->size(); ++a) (*numeric)[a] = AllMatch(leaves, a, false, IsNumber);
  }
  if (integer) {
    integer->assign(options.raw_attr_fields.size(), false);
    for (size_t a = 0; a < integer->size(); ++a) (*integer)[a] = AllMatch(leaves, a, true, IsInteger);
  }
  return leaves;
}

TdmTree BuildTdmTree(const TdmTreeOptions& options) {
  if (options.cate_id_field.empty()) Fail("--cate_id_field is required");
  std::vector<bool> numeric, integer;
  std::vector<TdmTree::Leaf> leaves = ReadTdmLeaves(options, {}, nullptr, &numeric, &integer);
  TdmTree tree(std::move(leaves), options.n_cluster, numeric, integer);
  tree.SetAttrNames(options.attr_fields, options.raw_attr_fields);
  return tree;
}

int TdmInitTreeMain(const std::vector<std::string>& args) {
  Flags flags("tdm_init_tree",
              "Builds TDM's item tree (leaves grouped by category) and writes its node, edge and "
              "predict-edge tables, node features and serving tree.",
              {{"item_input_path", "item table (CSV with a header or Parquet; comma-separated globs)"},
               {"item_id_field", "item id column"},
               {"cate_id_field", "category column (leaves are grouped by it)"},
               {"attr_fields", "comma-separated categorical attribute columns (non-leaf nodes: modes)"},
               {"raw_attr_fields", "comma-separated numeric attribute columns (non-leaf nodes: means)"},
               {"attr_delimiter", "delimiter of the node table's feature column", false, ","},
               {"tree_output_dir", "directory for serving_tree"},
               {"node_edge_output_file", "directory for the node and edge tables"},
               {"n_cluster", "branching factor of the tree", false, "2"},
               {"reader_type", "CsvReader or ParquetReader (default: by file extension)"},
               {"odps_data_quota_name", "MaxCompute quota (MaxCompute is not supported)"}});
  if (!flags.Parse(args)) return 0;
  TdmTreeOptions options;
  options.item_input_path = flags.Get("item_input_path");
  options.item_id_field = flags.Get("item_id_field");
  options.cate_id_field = flags.Get("cate_id_field");
  for (const auto& name : Split(flags.Get("attr_fields"), ",")) {
    if (!Trim(name).empty()) options.attr_fields.emplace_back(Trim(name));
  }
  for (const auto& name : Split(flags.Get("raw_attr_fields"), ",")) {
    if (!Trim(name).empty()) options.raw_attr_fields.emplace_back(Trim(name));
  }
  options.attr_delimiter = flags.Get("attr_delimiter");
  options.tree_output_dir = flags.Get("tree_output_dir");
  options.node_edge_output_file = flags.Get("node_edge_output_file");
  options.n_cluster = flags.GetInt("n_cluster");
  options.reader_type = flags.Get("reader_type");
  if (options.item_input_path.empty()) Fail("--item_input_path is required");
  if (options.node_edge_output_file.empty()) Fail("--node_edge_output_file is required");
  const TdmTree tree = BuildTdmTree(options);
  LOG_INFO << "tdm tree: " << tree.levels().back().size() << " items, " << tree.levels().size()
           << " levels, n_cluster " << tree.n_cluster();
  tree.WriteNodeEdgeTables(options.node_edge_output_file, options.attr_delimiter);
  if (!options.tree_output_dir.empty()) tree.WriteServingTree(options.tree_output_dir);
  LOG_INFO << "tdm tree: wrote " << options.node_edge_output_file;
  return 0;
}

}  // namespace tzrec
