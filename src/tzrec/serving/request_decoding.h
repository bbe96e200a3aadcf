// Turning serving requests into features: JSON rows (raw input columns) into a RecordBatch for
// feature generation, and KServe v2 tensors (generated features in TorchEasyRec's input names)
// into a ParsedBatch. Everything a client can get wrong is a RequestError with the HTTP status
// and a message naming the row, column or input; nothing unchecked reaches the model.
// Stateless functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "tzrec/common/error.h"
#include "tzrec/data/parsed_batch.h"
#include "tzrec/data/record_batch.h"
#include "tzrec/pipeline/pipeline.h"

namespace tzrec {

// A request the client got wrong: answered with `status` and the message.
struct RequestError : Error {
  RequestError(int status, const std::string& message) : Error(message), status(status) {}
  int status;
};

// JSON row objects as text columns: every key seen becomes a column (a row without it has a
// null there); numbers and strings become their text, arrays LIST cells whose items are joined
// by `list_separator` (as the Parquet reader presents LIST columns). `source` names the rows
// in errors.
RecordBatch RowsToRecords(const std::vector<const nlohmann::json*>& rows,
                          const std::string& list_separator, const std::string& source);

// A rank request's rows as text columns without building them as JSON rows: each of
// `user_features` repeated for every item, `item_id_column` holding `item_ids`, and each
// `context_features` array (one value per item, checked). A column named twice is an error.
RecordBatch RankToRecords(const nlohmann::json& user_features, const std::string& item_id_column,
                          const nlohmann::json& item_ids, const nlohmann::json& context_features,
                          const std::string& list_separator);

// KServe v2 `{"inputs": [{"name", "shape", "datatype", "data"}, ...]}` -> the features of
// `pipeline`: `<f>.values` (ids, or dense values [rows, dim]), `<f>.lengths` (ids per row; for
// sequences steps per row), `<f>.weights`, `<f>.key_lengths` (ids per step of multi-value
// sequences, default 1). Counts, id ranges and finiteness are checked.
ParsedBatch TensorsToParsed(const Pipeline& pipeline, const nlohmann::json& body);

}  // namespace tzrec
