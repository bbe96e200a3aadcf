// Interprets a Parquet schema: leaf columns with their level structure, and which top-level
// fields map to which leaves in a shape this reader can assemble.
//
// Supported top-level shapes: a primitive; LIST<primitive> and LIST<LIST<primitive>> in the
// standard 3-level layout or the legacy 2-level layouts (including a bare repeated primitive);
// MAP<primitive, primitive>. Structs, lists of maps or structs, and deeper lists are recorded
// as unsupported with a reason, so a file can still be read when such a column is not
// requested.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tzrec/data/parquet/parquet_format.h"
#include "tzrec/data/record_batch.h"

namespace tzrec {
namespace parquet {

struct LeafColumn {
  std::vector<std::string> path;  // from the top-level field down
  PhysicalType type = PhysicalType::kInt32;
  int32_t type_length = 0;
  int max_def = 0;
  int max_rep = 0;
  // For each repeated ancestor, outermost first (index j-1 for repetition level j):
  // a list at that level is non-null when def >= list_def[j-1], and has an entry (the
  // repeated node itself is present) when def >= entry_def[j-1].
  std::vector<int> list_def;
  std::vector<int> entry_def;
  bool zero_extend_int32 = false;  // UINT_8/16/32 stored in INT32
  std::string unsupported;         // non-empty: why this leaf's type cannot be read

  std::string DottedPath() const;
};

struct TopLevelField {
  std::string name;
  std::vector<int> leaves;  // indices into ParquetSchema::leaves(), schema order
  std::string unsupported;  // non-empty: reason, e.g. "struct columns"
  int list_depth = 0;       // 0 = primitive
  bool is_map = false;      // leaves = {key, value}
  bool nullable = true;     // the row value may be null
  ColumnType output_type = ColumnType::kString;  // nested fields come out as text
};

class ParquetSchema {
 public:
  // Fails on a malformed tree (bad child counts, missing root, too deep).
  explicit ParquetSchema(const std::vector<SchemaElement>& elements);

  const std::vector<LeafColumn>& leaves() const { return leaves_; }
  const std::vector<TopLevelField>& fields() const { return fields_; }
  // -1 when absent.
  int FindField(const std::string& name) const;

 private:
  struct Node {
    const SchemaElement* element;
    std::vector<int> children;
  };
  int BuildTree(const std::vector<SchemaElement>& elements, size_t* next, int depth);
  void CollectLeaves(int node, std::vector<std::string>* path, int def, int rep,
                     std::vector<int>* list_def, std::vector<int>* entry_def, TopLevelField* field);
  void Classify(int node, TopLevelField* field);
  // Follows a LIST-annotated group to its element; returns the element node or -1 with
  // field->unsupported set.
  int ListElement(int list_node, TopLevelField* field);

  std::vector<Node> nodes_;
  std::vector<LeafColumn> leaves_;
  std::vector<TopLevelField> fields_;
};

}  // namespace parquet
}  // namespace tzrec
