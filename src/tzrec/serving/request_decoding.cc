#include "tzrec/serving/request_decoding.h"

#include <cmath>
#include <map>
#include <set>

#include "tzrec/common/strings.h"

namespace tzrec {
namespace {

using Json = nlohmann::json;

// Appends one JSON value as the text of a row's cell. Arrays become LIST cells (items joined
// by `list_separator`, as the Parquet reader presents LIST columns).
void AppendCell(const Json& value, const std::string& column, const std::string& list_separator,
                Column* out) {
  auto scalar_text = [&](const Json& v) -> std::string {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_number_integer() || v.is_number_unsigned() || v.is_number_float()) return v.dump();
    if (v.is_boolean()) return v.get<bool>() ? "1" : "0";
    throw RequestError(400, StrCat("column '", column, "': expected a number, string or array, got ",
                                   v.type_name()));
  };
  if (value.is_null()) {
    out->AppendString("", false);
    return;
  }
  const int depth = value.is_array() ? 1 : 0;
  if (out->size() > 0 && out->list_depth != depth) {
    throw RequestError(400, StrCat("column '", column, "': mixes arrays and single values"));
  }
  out->list_depth = depth;
  if (!value.is_array()) {
    out->AppendString(scalar_text(value), true);
    return;
  }
  out->list_separator = list_separator;
  std::string text;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i].is_array() || value[i].is_object() || value[i].is_null()) {
      throw RequestError(400, StrCat("column '", column, "': array items must be numbers or strings"));
    }
    if (i) text += list_separator;
    text += scalar_text(value[i]);
  }
  out->AppendString(text, true);
}

}  // namespace

// Rows as columns: every key seen becomes a column; a row without it has a null there.
RecordBatch RowsToRecords(const std::vector<const Json*>& rows, const std::string& list_separator,
                          const std::string& source) {
  RecordBatch records;
  records.source = source;
  std::map<std::string, size_t> index;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (!rows[r]->is_object()) {
      throw RequestError(400, StrCat(source, ": row ", r, " is not a JSON object"));
    }
    for (const auto& [key, value] : rows[r]->items()) {
      auto it = index.find(key);
      if (it == index.end()) {
        Column column;
        column.name = key;
        for (size_t k = 0; k < r; ++k) column.AppendString("", false);
        records.columns.push_back(std::move(column));
        it = index.emplace(key, records.columns.size() - 1).first;
      }
      Column& column = records.columns[it->second];
      if (column.size() > r) throw RequestError(400, StrCat(source, ": row ", r, " repeats '", key, "'"));
      AppendCell(value, key, list_separator, &column);
    }
    for (Column& column : records.columns) {
      if (column.size() == r) column.AppendString("", false);
    }
    records.line_numbers.push_back(static_cast<int64_t>(r));
  }
  return records;
}

RecordBatch RankToRecords(const Json& user_features, const std::string& item_id_column,
                          const Json& item_ids, const Json& context_features,
                          const std::string& list_separator) {
  if (!user_features.is_object()) throw RequestError(400, "user_features: expected an object");
  if (!context_features.is_object()) throw RequestError(400, "context_features: expected an object");
  if (!item_ids.is_array() || item_ids.empty()) throw RequestError(400, "item_ids: a non-empty array is required");
  const size_t items = item_ids.size();
  RecordBatch records;
  records.source = "rank request";
  std::set<std::string> names;
  auto add_column = [&](const std::string& name, const std::string& where) -> Column& {
    if (!names.insert(name).second) {
      throw RequestError(400, StrCat(where, ": column '", name, "' is given twice (user_features, ",
                                     "item_id_column and context_features name distinct columns)"));
    }
    records.columns.emplace_back();
    records.columns.back().name = name;
    return records.columns.back();
  };
  for (const auto& [key, value] : user_features.items()) {
    Column one;
    AppendCell(value, "user_features." + key, list_separator, &one);
    Column& column = add_column(key, "user_features");
    column.list_depth = one.list_depth;
    column.list_separator = one.list_separator;
    const std::string_view cell = one.StringAt(0);
    for (size_t i = 0; i < items; ++i) column.AppendString(cell, one.valid[0] != 0);
  }
  Column& ids = add_column(item_id_column, "item_id_column");
  for (const auto& id : item_ids) AppendCell(id, "item_ids", list_separator, &ids);
  for (const auto& [key, values] : context_features.items()) {
    if (!values.is_array() || values.size() != items) {
      throw RequestError(400, StrCat("context_features.", key, ": expected an array of ", items,
                                     " values (one per item)"));
    }
    Column& column = add_column(key, "context_features");
    for (const auto& value : values) AppendCell(value, "context_features." + key, list_separator, &column);
  }
  for (size_t i = 0; i < items; ++i) records.line_numbers.push_back(static_cast<int64_t>(i));
  return records;
}

// KServe v2 request tensors -> the features they encode, in TorchEasyRec's input names:
// `<f>.values` (ids, INT64, or dense values, FP32 [rows, dim]), `<f>.lengths` (INT64: ids per
// row; for sequences steps per row), optional `<f>.weights` (FP32, weighted features) and
// `<f>.key_lengths` (INT64, ids per step of multi-value sequences; default 1). Everything is
// checked (counts, id ranges, finite values) before the model sees it.
ParsedBatch TensorsToParsed(const Pipeline& pipeline, const Json& body) {
  if (!body.is_object() || !body.contains("inputs") || !body["inputs"].is_array()) {
    throw RequestError(400, "expected {\"inputs\": [{\"name\", \"shape\", \"datatype\", \"data\"}, ...]}");
  }
  std::map<std::string, const Json*> inputs;
  for (const auto& input : body["inputs"]) {
    if (!input.is_object() || !input.contains("name") || !input["name"].is_string() ||
        !input.contains("data") || !input["data"].is_array()) {
      throw RequestError(400, "inputs: every input needs a string name and a data array");
    }
    inputs[input["name"].get<std::string>()] = &input;
  }
  auto numbers = [&](const std::string& name, bool required) -> const Json* {
    auto it = inputs.find(name);
    if (it == inputs.end()) {
      if (required) throw RequestError(400, StrCat("inputs: '", name, "' is missing"));
      return nullptr;
    }
    for (const auto& v : (*it->second)["data"]) {
      if (!v.is_number()) throw RequestError(400, StrCat("inputs: '", name, "' holds a non-number"));
    }
    return &(*it->second)["data"];
  };
  auto lengths_of = [&](const std::string& name, bool required) {
    std::vector<int32_t> lengths;
    const Json* data = numbers(name, required);
    if (!data) return lengths;
    for (const auto& v : *data) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1 << 30)) {
        throw RequestError(400, StrCat("inputs: '", name, "' must hold non-negative integers"));
      }
      lengths.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    return lengths;
  };
  auto sum = [](const std::vector<int32_t>& v) {
    int64_t total = 0;
    for (int32_t x : v) total += x;
    return total;
  };
  ParsedBatch parsed;
  int64_t rows = -1;
  auto check_rows = [&](int64_t n, const std::string& name) {
    if (rows < 0) rows = n;
    if (n != rows) throw RequestError(400, StrCat("inputs: '", name, "' has ", n, " rows, others ", rows));
  };
  for (const Feature* feature : pipeline.FeaturePointers()) {
    const std::string& f = feature->name();
    if (feature->is_sparse()) {
      SparseValues sparse;
      sparse.sequence = feature->is_sequence();
      sparse.lengths = lengths_of(f + ".lengths", true);
      check_rows(static_cast<int64_t>(sparse.lengths.size()), f + ".lengths");
      int64_t ids = sum(sparse.lengths);
      if (sparse.sequence) {
        sparse.key_lengths = lengths_of(f + ".key_lengths", false);
        if (sparse.key_lengths.empty()) sparse.key_lengths.assign(ids, 1);
        if (static_cast<int64_t>(sparse.key_lengths.size()) != ids) {
          throw RequestError(400, StrCat("inputs: '", f, ".key_lengths' needs one entry per step (", ids, ")"));
        }
        ids = sum(sparse.key_lengths);
      }
      const Json& values = *numbers(f + ".values", true);
      if (static_cast<int64_t>(values.size()) != ids) {
        throw RequestError(400, StrCat("inputs: '", f, ".values' has ", values.size(), " ids, its lengths say ", ids));
      }
      for (const auto& v : values) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= feature->id_limit()) {
          throw RequestError(400, StrCat("inputs: '", f, ".values': id ", v.dump(), " out of range [0, ",
                                         feature->id_limit(), ")"));
        }
        sparse.values.push_back(v.get<int64_t>());
      }
      if (const Json* weights = numbers(f + ".weights", feature->weighted())) {
        if (weights->size() != values.size()) {
          throw RequestError(400, StrCat("inputs: '", f, ".weights' needs one weight per id"));
        }
        for (const auto& w : *weights) {
          const double x = w.get<double>();
          if (!std::isfinite(x)) throw RequestError(400, StrCat("inputs: '", f, ".weights' is not finite"));
          sparse.weights.push_back(static_cast<float>(x));
        }
      }
      parsed.sparse[f] = std::move(sparse);
    } else {
      DenseValues dense;
      dense.dim = feature->value_dim();
      dense.sequence = feature->is_sequence();
      int64_t count;
      if (dense.sequence) {
        dense.lengths = lengths_of(f + ".lengths", true);
        check_rows(static_cast<int64_t>(dense.lengths.size()), f + ".lengths");
        count = sum(dense.lengths) * dense.dim;
      } else {
        count = -1;
      }
      const Json& values = *numbers(f + ".values", true);
      if (!dense.sequence) {
        if (values.size() % static_cast<size_t>(dense.dim) != 0) {
          throw RequestError(400, StrCat("inputs: '", f, ".values' is not [rows, ", dense.dim, "]"));
        }
        check_rows(static_cast<int64_t>(values.size()) / dense.dim, f + ".values");
        count = static_cast<int64_t>(values.size());
      }
      if (static_cast<int64_t>(values.size()) != count) {
        throw RequestError(400, StrCat("inputs: '", f, ".values' has ", values.size(), " values, expected ", count));
      }
      for (const auto& v : values) {
        const double x = v.get<double>();
        if (!std::isfinite(x)) throw RequestError(400, StrCat("inputs: '", f, ".values' is not finite"));
        dense.values.push_back(static_cast<float>(x));
      }
      parsed.dense[f] = std::move(dense);
    }
  }
  if (rows <= 0) throw RequestError(400, "inputs: no rows");
  parsed.size = rows;
  return parsed;
}

}  // namespace tzrec
