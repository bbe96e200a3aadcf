#include "tzrec/data/parquet/parquet_schema.h"

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/data/parquet/parquet_encoding.h"

namespace tzrec {
namespace parquet {
namespace {

// Real schemas nest a few levels; the limit keeps recursion (and uint8 levels) safe.
constexpr int kMaxSchemaDepth = 32;

bool IsList(const SchemaElement& e) {
  return e.converted_type == kConvertedList || e.logical_type == kLogicalList;
}

bool IsMap(const SchemaElement& e) {
  return e.converted_type == kConvertedMap || e.converted_type == kConvertedMapKeyValue ||
         e.logical_type == kLogicalMap;
}

// Why a leaf cannot be read, or "" when it can.
std::string LeafTypeProblem(const SchemaElement& e) {
  if (e.converted_type == kConvertedDecimal || e.logical_type == kLogicalDecimal) {
    return "DECIMAL columns";
  }
  if (e.converted_type == kConvertedInterval) return "INTERVAL columns";
  switch (e.type) {
    case PhysicalType::kBoolean:
    case PhysicalType::kInt32:
    case PhysicalType::kFloat:
    case PhysicalType::kDouble:
    case PhysicalType::kByteArray: return "";
    case PhysicalType::kInt64:
      if (e.converted_type == kConvertedUint64 ||
          (e.logical_type == kLogicalInteger && !e.logical_int_signed)) {
        return "unsigned INT64 (UINT_64) columns";
      }
      return "";
    case PhysicalType::kInt96: return "INT96 (legacy timestamp) columns";
    case PhysicalType::kFixedLenByteArray: return "FIXED_LEN_BYTE_ARRAY columns";
  }
  return StrCat("physical type #", static_cast<int32_t>(e.type));
}

}  // namespace

std::string LeafColumn::DottedPath() const { return Join(path, "."); }

ParquetSchema::ParquetSchema(const std::vector<SchemaElement>& elements) {
  if (elements.empty()) Fail("corrupt Parquet metadata: empty schema");
  if (elements[0].has_type) Fail("corrupt Parquet metadata: schema root is not a group");
  nodes_.resize(elements.size());
  size_t next = 0;
  BuildTree(elements, &next, 0);
  if (next != elements.size()) {
    Fail("corrupt Parquet metadata: schema has ", elements.size() - next,
         " elements outside the tree");
  }
  for (int child : nodes_[0].children) {
    TopLevelField field;
    field.name = nodes_[child].element->name;
    std::vector<std::string> path;
    std::vector<int> list_def, entry_def;
    CollectLeaves(child, &path, 0, 0, &list_def, &entry_def, &field);
    Classify(child, &field);
    fields_.push_back(std::move(field));
  }
}

int ParquetSchema::BuildTree(const std::vector<SchemaElement>& elements, size_t* next, int depth) {
  if (depth > kMaxSchemaDepth) {
    Fail("corrupt Parquet metadata: schema nested deeper than ", kMaxSchemaDepth);
  }
  if (*next >= elements.size()) Fail("corrupt Parquet metadata: schema ends inside a group");
  int index = static_cast<int>((*next)++);
  const SchemaElement& element = elements[index];
  nodes_[index].element = &element;
  if (element.has_type) {
    if (element.num_children > 0) {
      Fail("corrupt Parquet metadata: schema element '", element.name,
           "' has both a type and children");
    }
    return index;
  }
  if (element.num_children < 0 ||
      static_cast<size_t>(element.num_children) > elements.size() - *next) {
    Fail("corrupt Parquet metadata: schema group '", element.name, "' claims ",
         element.num_children, " children");
  }
  if (element.has_repetition && static_cast<int32_t>(element.repetition) > 2) {
    Fail("corrupt Parquet metadata: schema element '", element.name, "' has repetition type ",
         static_cast<int32_t>(element.repetition));
  }
  for (int32_t i = 0; i < element.num_children; ++i) {
    nodes_[index].children.push_back(BuildTree(elements, next, depth + 1));
  }
  return index;
}

void ParquetSchema::CollectLeaves(int node, std::vector<std::string>* path, int def, int rep,
                                  std::vector<int>* list_def, std::vector<int>* entry_def,
                                  TopLevelField* field) {
  const SchemaElement& e = *nodes_[node].element;
  path->push_back(e.name);
  Repetition repetition = e.has_repetition ? e.repetition : Repetition::kRequired;
  if (static_cast<int32_t>(repetition) < 0 || static_cast<int32_t>(repetition) > 2) {
    Fail("corrupt Parquet metadata: schema element '", e.name, "' has repetition type ",
         static_cast<int32_t>(repetition));
  }
  bool repeated = repetition == Repetition::kRepeated;
  if (repetition == Repetition::kOptional) ++def;
  if (repeated) {
    list_def->push_back(def);
    ++def;
    ++rep;
    entry_def->push_back(def);
  }
  if (e.has_type) {
    LeafColumn leaf;
    leaf.path = *path;
    leaf.type = e.type;
    leaf.type_length = e.type_length;
    leaf.max_def = def;
    leaf.max_rep = rep;
    leaf.list_def = *list_def;
    leaf.entry_def = *entry_def;
    leaf.zero_extend_int32 =
        e.type == PhysicalType::kInt32 &&
        (e.converted_type == kConvertedUint8 || e.converted_type == kConvertedUint16 ||
         e.converted_type == kConvertedUint32 ||
         (e.logical_type == kLogicalInteger && !e.logical_int_signed));
    leaf.unsupported = LeafTypeProblem(e);
    field->leaves.push_back(static_cast<int>(leaves_.size()));
    leaves_.push_back(std::move(leaf));
  } else {
    for (int child : nodes_[node].children) {
      CollectLeaves(child, path, def, rep, list_def, entry_def, field);
    }
  }
  if (repeated) {
    list_def->pop_back();
    entry_def->pop_back();
  }
  path->pop_back();
}

int ParquetSchema::ListElement(int list_node, TopLevelField* field) {
  const Node& list = nodes_[list_node];
  if (list.children.size() != 1) {
    field->unsupported = StrCat("LIST groups with ", list.children.size(), " children");
    return -1;
  }
  int repeated = list.children[0];
  const SchemaElement& rep = *nodes_[repeated].element;
  if (!rep.has_repetition || rep.repetition != Repetition::kRepeated) {
    field->unsupported = "LIST groups without a repeated child";
    return -1;
  }
  if (rep.has_type) return repeated;  // legacy 2-level list: the repeated leaf is the element
  // Legacy rules: a repeated group with several fields, or named "array" / "<list>_tuple",
  // is itself the element, i.e. a struct.
  if (nodes_[repeated].children.size() != 1 || rep.name == "array" ||
      rep.name == list.element->name + "_tuple") {
    field->unsupported = "lists of structs";
    return -1;
  }
  return nodes_[repeated].children[0];
}

void ParquetSchema::Classify(int node, TopLevelField* field) {
  const SchemaElement& e = *nodes_[node].element;
  field->nullable = e.has_repetition && e.repetition == Repetition::kOptional;
  int expected_leaves = 1;
  int expected_rep = 0;
  if (e.has_type) {
    if (e.has_repetition && e.repetition == Repetition::kRepeated) {
      field->list_depth = 1;  // legacy: a bare repeated primitive is a non-null list
      expected_rep = 1;
    }
  } else if (IsList(e)) {
    int current = node;
    int depth = 0;
    while (true) {
      int element = ListElement(current, field);
      if (element < 0) return;
      ++depth;
      const SchemaElement& item = *nodes_[element].element;
      if (item.has_type) break;
      if (IsList(item)) {
        current = element;
        continue;
      }
      field->unsupported = IsMap(item) ? "lists of maps" : "lists of structs";
      return;
    }
    if (depth > 2) {
      field->unsupported = "lists nested deeper than two levels";
      return;
    }
    field->list_depth = depth;
    expected_rep = depth;
  } else if (IsMap(e)) {
    const Node& map = nodes_[node];
    bool ok = map.children.size() == 1;
    if (ok) {
      const Node& entries = nodes_[map.children[0]];
      ok = !entries.element->has_type && entries.element->has_repetition &&
           entries.element->repetition == Repetition::kRepeated && entries.children.size() == 2 &&
           nodes_[entries.children[0]].element->has_type &&
           nodes_[entries.children[1]].element->has_type;
    }
    if (!ok) {
      field->unsupported = "MAP columns other than MAP<primitive, primitive>";
      return;
    }
    field->is_map = true;
    expected_leaves = 2;
    expected_rep = 1;
  } else {
    field->unsupported = e.has_repetition && e.repetition == Repetition::kRepeated
                             ? "repeated groups (lists of structs)"
                             : "struct columns";
    return;
  }
  if (static_cast<int>(field->leaves.size()) != expected_leaves) {
    field->unsupported = "nested columns of this layout";
    return;
  }
  for (int leaf_index : field->leaves) {
    const LeafColumn& leaf = leaves_[leaf_index];
    if (leaf.max_rep != expected_rep) {
      field->unsupported = "nested columns of this layout";
      return;
    }
    if (!leaf.unsupported.empty()) {
      field->unsupported = leaf.unsupported;
      return;
    }
  }
  field->output_type = field->list_depth > 0 || field->is_map
                           ? ColumnType::kString
                           : OutputTypeOf(leaves_[field->leaves[0]].type);
}

int ParquetSchema::FindField(const std::string& name) const {
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (fields_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace parquet
}  // namespace tzrec
