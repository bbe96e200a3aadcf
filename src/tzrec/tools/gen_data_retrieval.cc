#include "tzrec/tools/gen_data_retrieval.h"

#include <google/protobuf/descriptor.h>

#include <algorithm>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/parquet/parquet_writer.h"
#include "tzrec/tools/tdm_tree.h"

namespace tzrec {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// The set member of data_config's `sampler` oneof, or null.
const Message* SamplerConfig(const protos::DataConfig& data, std::string* name) {
  const auto* oneof = data.GetDescriptor()->FindOneofByName("sampler");
  const FieldDescriptor* which = data.GetReflection()->GetOneofFieldDescriptor(data, oneof);
  if (!which) return nullptr;
  *name = which->name();
  return &data.GetReflection()->GetMessage(data, which);
}

std::string StringOf(const Message& msg, const char* field) {
  const FieldDescriptor* fd = msg.GetDescriptor()->FindFieldByName(field);
  return fd ? msg.GetReflection()->GetString(msg, fd) : std::string();
}

// The model's user tower group (`<model>.user_tower.input`), or "" when the model has none.
std::string UserTowerGroup(const protos::ModelConfig& model) {
  const auto* oneof = model.GetDescriptor()->FindOneofByName("model");
  const FieldDescriptor* which = model.GetReflection()->GetOneofFieldDescriptor(model, oneof);
  if (!which || which->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return "";
  const Message& member = model.GetReflection()->GetMessage(model, which);
  const FieldDescriptor* tower = member.GetDescriptor()->FindFieldByName("user_tower");
  if (!tower || tower->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) return "";
  return StringOf(member.GetReflection()->GetMessage(member, tower), "input");
}

}  // namespace

std::unique_ptr<RetrievalPlan> RetrievalPlan::Create(
    const protos::EasyRecConfig& config, const std::vector<std::unique_ptr<Feature>>& features,
    const std::vector<fg::FeatureInfo>& infos, const std::vector<std::string>& columns,
    const std::function<Cells(std::mt19937_64&)>& draw_row, uint64_t seed, RetrievalPlanOptions options) {
  std::string sampler_name;
  const Message* sampler = SamplerConfig(config.data_config(), &sampler_name);
  if (!sampler) return nullptr;
  std::unique_ptr<RetrievalPlan> plan(new RetrievalPlan());
  plan->tdm_ = sampler_name == "tdm_sampler";
  if (plan->tdm_) {
    // As many items as fill a binary tree of layer_num_sample's levels (L levels hold up to
    // 2^(L-1) leaves), at most 4096.
    plan->tdm_levels_ = config.data_config().tdm_sampler().layer_num_sample_size();
    int64_t leaves = 1;
    for (int64_t level = 1; level < plan->tdm_levels_ && leaves < 4096; ++level) leaves *= 2;
    options.items = std::max<int64_t>(leaves, options.clusters + 1);
  }
  plan->options_ = options;
  const std::string where = "data_config." + sampler_name;
  const FieldDescriptor* attrs = sampler->GetDescriptor()->FindFieldByName("attr_fields");
  for (int i = 0; i < sampler->GetReflection()->FieldSize(*sampler, attrs); ++i) {
    plan->attr_fields_.push_back(sampler->GetReflection()->GetRepeatedString(*sampler, attrs, i));
  }
  plan->attr_delimiter_ = StringOf(*sampler, "attr_delimiter");
  plan->item_id_column_ = StringOf(*sampler, "item_id_field");
  auto is_column = [&](const std::string& name) {
    return std::find(columns.begin(), columns.end(), name) != columns.end();
  };
  if (!is_column(plan->item_id_column_)) {
    Fail("gen_data: ", where, ".item_id_field '", plan->item_id_column_, "' is not a data column");
  }
  // Input columns of each feature, and which ones are sparse with enough ids for a cluster.
  const bool fg = !infos.empty();
  std::map<std::string, std::vector<std::string>> columns_of;  // feature -> columns
  for (const auto& f : features) {
    if (!fg) {
      columns_of[f->name()] = {f->name()};
      continue;
    }
    for (const auto& info : infos) {
      if (info.name != f->name()) continue;
      for (const auto& input : info.inputs) {
        if (input.side != fg::Side::kConst && input.side != fg::Side::kFeature && !input.is_sequence) {
          columns_of[f->name()].push_back(input.column);
        }
      }
    }
  }
  auto clusters_fit = [&](const Feature& f) {
    return f.is_sparse() && !f.is_sequence() && f.num_embeddings() > options.clusters;
  };
  for (const auto& attr : plan->attr_fields_) {
    if (is_column(attr)) plan->item_columns_.push_back(attr);
  }
  // Item features: a negative sampler's (features reading its attr_fields), or TDM's (same
  // columns, though TDM keeps them in __BASE__).
  auto is_item = [&](const Feature& f) {
    if (f.negative()) return true;
    if (!plan->tdm_) return false;
    for (const auto& column : columns_of[f.name()]) {
      if (column == plan->item_id_column_ ||
          std::count(plan->attr_fields_.begin(), plan->attr_fields_.end(), column)) {
        return true;
      }
    }
    return false;
  };
  for (const auto& f : features) {
    if (!is_item(*f) || !clusters_fit(*f)) continue;
    for (const auto& column : columns_of[f->name()]) {
      if (plan->category_column_.empty() && column != plan->item_id_column_ && is_column(column)) {
        plan->category_column_ = column;
      }
    }
  }
  // User columns: the user tower group's features (else every feature that is not an item one).
  const std::string user_group = UserTowerGroup(config.model_config());
  std::set<std::string> user_features;
  for (const auto& group : config.model_config().feature_groups()) {
    if (!user_group.empty() && group.group_name() != user_group) continue;
    user_features.insert(group.feature_names().begin(), group.feature_names().end());
  }
  std::set<std::string> labels(config.data_config().label_fields().begin(),
                               config.data_config().label_fields().end());
  std::vector<const Feature*> sparse_users;
  for (const auto& f : features) {
    if (is_item(*f) || f->is_sequence() || !user_features.count(f->name())) continue;
    bool added = false;
    for (const auto& column : columns_of[f->name()]) {
      if (!is_column(column) || labels.count(column) || std::count(plan->item_columns_.begin(), plan->item_columns_.end(), column) ||
          std::count(plan->user_columns_.begin(), plan->user_columns_.end(), column)) {
        continue;
      }
      plan->user_columns_.push_back(column);
      added = true;
    }
    if (added && f->is_sparse()) sparse_users.push_back(f.get());
  }
  plan->user_id_column_ = StringOf(*sampler, "user_id_field");
  if (plan->user_id_column_.empty() && !sparse_users.empty()) {
    plan->user_id_column_ = columns_of[sparse_users.front()->name()].front();
  }
  if (plan->user_id_column_.empty() || !is_column(plan->user_id_column_)) {
    Fail("gen_data: ", where, ": no user id column to plant the retrieval signal on (set user_id_field, or ",
         "give the user tower's group a sparse feature)");
  }
  if (std::find(plan->user_columns_.begin(), plan->user_columns_.end(), plan->user_id_column_) ==
      plan->user_columns_.end()) {
    plan->user_columns_.push_back(plan->user_id_column_);
  }
  for (const Feature* f : sparse_users) {
    const std::string& column = columns_of[f->name()].front();
    if (column != plan->user_id_column_ && clusters_fit(*f)) {
      plan->segment_column_ = column;
      break;
    }
  }

  // History columns: "<sequence>__<item attribute column>" read by a non-negative sequence feature.
  for (const auto& f : features) {
    if (!f->is_sequence() || f->negative()) continue;
    std::vector<std::string> inputs = {f->name()};
    if (fg) {
      inputs.clear();
      for (const auto& info : infos) {
        if (info.name != f->name()) continue;
        for (const auto& input : info.inputs) {
          if (input.side != fg::Side::kConst && input.side != fg::Side::kFeature) inputs.push_back(input.column);
        }
      }
    }
    for (const auto& column : inputs) {
      const size_t split = column.rfind("__");
      if (split == std::string::npos || split == 0 || !is_column(column)) continue;
      const std::string attribute = column.substr(split + 2);
      const bool item_attribute = attribute == plan->item_id_column_ ||
                                  std::count(plan->item_columns_.begin(), plan->item_columns_.end(), attribute);
      if (!item_attribute || f->sequence_delim().empty()) continue;
      auto& history = plan->histories_[column.substr(0, split)];
      bool known = false;
      for (const auto& h : history) known = known || h.column == column;
      if (!known) history.push_back({column, attribute, f->sequence_delim()});
    }
  }

  // Item ids 1..items must fit every (non-sequence) feature that reads the item id column.
  for (const auto& f : features) {
    if (f->is_sequence() || !f->is_sparse() || f->num_embeddings() <= 1) continue;
    const auto& cols = columns_of[f->name()];
    if (std::find(cols.begin(), cols.end(), plan->item_id_column_) == cols.end()) continue;
    options.items = std::min(options.items, f->num_embeddings() - 1);
  }
  if (options.items < options.clusters) {
    Fail("gen_data: the item id feature of ", where, " has ", options.items + 1, " ids; at least ",
         options.clusters + 1, " are needed to plant the retrieval signal");
  }
  plan->options_ = options;

  std::mt19937_64 rng(seed ^ 0x7e7e7e7eULL);
  plan->cluster_items_.resize(options.clusters);
  for (int64_t i = 1; i <= options.items; ++i) {
    Cells drawn = draw_row(rng);
    Cells item;
    for (const auto& column : plan->item_columns_) item[column] = drawn[column];
    item[plan->item_id_column_] = std::to_string(i);
    const int64_t cluster = i % options.clusters;
    if (!plan->category_column_.empty()) item[plan->category_column_] = std::to_string(cluster + 1);
    plan->item_cells_.push_back(std::move(item));
    plan->cluster_items_[cluster].push_back(i);
  }
  for (int64_t u = 1; u <= options.users; ++u) {
    Cells drawn = draw_row(rng);
    Cells user;
    for (const auto& column : plan->user_columns_) user[column] = drawn[column];
    user[plan->user_id_column_] = std::to_string(u);
    if (!plan->segment_column_.empty()) user[plan->segment_column_] = std::to_string(u % options.clusters + 1);
    plan->user_cells_.push_back(std::move(user));
  }
  return plan;
}

void RetrievalPlan::Apply(std::mt19937_64& rng, Cells* cells) {
  const int64_t user = static_cast<int64_t>(rng() % static_cast<uint64_t>(options_.users)) + 1;
  const auto& members = cluster_items_[user % options_.clusters];
  const bool in_cluster = std::uniform_real_distribution<double>(0, 1)(rng) < options_.in_cluster_rate;
  const int64_t item = in_cluster && !members.empty()
                           ? members[rng() % members.size()]
                           : static_cast<int64_t>(rng() % static_cast<uint64_t>(options_.items)) + 1;
  for (const auto& [column, value] : user_cells_[user - 1]) (*cells)[column] = value;
  for (const auto& [column, value] : item_cells_[item - 1]) (*cells)[column] = value;
  edges_.emplace(user, item);
  for (const auto& [sequence, columns] : histories_) {
    // As many steps as the drawn row's first column has.
    const std::string& drawn = (*cells)[columns.front().column];
    const int64_t steps = drawn.empty() ? 0 : static_cast<int64_t>(Split(drawn, columns.front().delim).size());
    std::vector<int64_t> items;
    for (int64_t t = 0; t < steps; ++t) {
      const bool near = std::uniform_real_distribution<double>(0, 1)(rng) < options_.in_cluster_rate;
      items.push_back(near && !members.empty() ? members[rng() % members.size()]
                                               : static_cast<int64_t>(rng() % static_cast<uint64_t>(options_.items)) + 1);
    }
    for (const auto& h : columns) {
      std::string text;
      for (size_t t = 0; t < items.size(); ++t) {
        if (t) text += h.delim;
        text += h.attribute == item_id_column_ ? std::to_string(items[t]) : item_cells_[items[t] - 1].at(h.attribute);
      }
      (*cells)[h.column] = text;
    }
  }
}

std::map<std::string, std::string> RetrievalPlan::WriteTables(const std::string& dir) const {
  MakeDirs(dir);
  std::map<std::string, std::string> paths;
  if (tdm_) {
    // The items' tree, grouped by category (tdm_init_tree's tables); every attr_field a
    // categorical attribute, so the node table's attributes keep attr_fields' order.
    std::vector<TdmTree::Leaf> leaves;
    for (int64_t i = 1; i <= options_.items; ++i) {
      TdmTree::Leaf leaf;
      leaf.id = i;
      const Cells& cells = item_cells_[i - 1];
      auto cell = [&](const std::string& column) {
        auto it = cells.find(column);
        return it == cells.end() ? std::string() : it->second;
      };
      leaf.cate = category_column_.empty() ? std::string() : cell(category_column_);
      for (const auto& attr : attr_fields_) {
        if (attr != "tree_level" && attr != item_id_column_) leaf.attrs.push_back(cell(attr));
      }
      leaves.push_back(std::move(leaf));
    }
    std::vector<std::string> names;
    for (const auto& attr : attr_fields_) {
      if (attr != "tree_level" && attr != item_id_column_) names.push_back(attr);
    }
    TdmTree tree(std::move(leaves), 2, std::vector<bool>(names.size(), false), {});
    tree.SetAttrNames(names, {});
    if (tdm_levels_ != static_cast<int64_t>(tree.levels().size())) {
      LOG_WARNING << "gen_data: the TDM tree of " << options_.items << " items has " << tree.levels().size()
                  << " levels; data_config.tdm_sampler.layer_num_sample has " << tdm_levels_
                  << " entries (one per level): edit it to " << tree.levels().size() << " entries to train";
    }
    const std::string tree_dir = JoinPath(dir, "tdm_tree");
    tree.WriteNodeEdgeTables(tree_dir, attr_delimiter_.empty() ? "," : attr_delimiter_);
    tree.WriteServingTree(tree_dir);
    paths["serving_tree"] = JoinPath(tree_dir, "serving_tree");
    // The items with their data columns (text), what predict through the export's embedding/
    // directory reads before tdm_cluster_tree.
    std::vector<std::string> columns = {item_id_column_};
    for (const auto& column : item_columns_) {
      if (std::find(columns.begin(), columns.end(), column) == columns.end()) columns.push_back(column);
    }
    RecordBatch items;
    std::vector<ParquetFieldSpec> fields;
    for (const auto& column : columns) {
      fields.push_back(ParquetFieldSpec::Plain(column, ParquetType::kString));
      Column& out = items.columns.emplace_back();
      out.name = column;
      for (int64_t i = 1; i <= options_.items; ++i) {
        auto it = item_cells_[i - 1].find(column);
        out.AppendString(it == item_cells_[i - 1].end() ? std::string() : it->second, it != item_cells_[i - 1].end());
      }
    }
    for (int64_t i = 1; i <= options_.items; ++i) items.line_numbers.push_back(i);
    const std::string item_path = JoinPath(dir, "item_data/part-0.parquet");
    MakeDirs(JoinPath(dir, "item_data"));
    ParquetFileWriter writer(item_path, fields);
    writer.Write(items);
    writer.Close();
    paths["item_data"] = item_path;
    paths["node_table"] = JoinPath(tree_dir, "node_table.txt");
    paths["edge_table"] = JoinPath(tree_dir, "edge_table.txt");
    paths["predict_edge_table"] = JoinPath(tree_dir, "predict_edge_table.txt");
    return paths;
  }
  auto write = [&](const std::string& name, const std::string& content) {
    const std::string path = JoinPath(dir, name + ".txt");
    WriteFileAtomic(path, content);
    paths[name] = path;
  };
  std::string items = "id:int64\tweight:float\tattrs:string\n";
  for (int64_t i = 1; i <= options_.items; ++i) {
    std::string attrs;
    for (size_t a = 0; a < attr_fields_.size(); ++a) {
      if (a) attrs += attr_delimiter_;
      auto it = item_cells_[i - 1].find(attr_fields_[a]);
      if (it != item_cells_[i - 1].end()) attrs += it->second;
    }
    items += std::to_string(i) + "\t" + std::to_string(1 + i % 3) + "\t" + attrs + "\n";
  }
  write("item_table", items);
  std::string users = "id:int64\tweight:float\n";
  for (int64_t u = 1; u <= options_.users; ++u) users += std::to_string(u) + "\t1\n";
  write("user_table", users);
  std::string pos = "userid:int64\titemid:int64\tweight:float\n";
  for (const auto& [user, item] : edges_) pos += std::to_string(user) + "\t" + std::to_string(item) + "\t1\n";
  write("pos_edge_table", pos);
  std::string hard = "userid:int64\titemid:int64\tweight:float\n";
  for (int64_t u = 1; u <= options_.users; ++u) {
    const auto& next = cluster_items_[(u + 1) % options_.clusters];
    for (size_t k = 0; k < std::min<size_t>(3, next.size()); ++k) {
      const int64_t item = next[(u * 7 + k * 13) % next.size()];
      hard += std::to_string(u) + "\t" + std::to_string(item) + "\t1\n";
    }
  }
  write("hard_neg_edge_table", hard);
  return paths;
}

}  // namespace tzrec
