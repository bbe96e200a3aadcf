// `tzrec predict` (TorchEasyRec's tzrec.predict): scores CSV or Parquet rows with an export
// directory or a checkpoint and writes the model outputs plus reserved input columns.
//
// Each rank reads its share of the input (tzrec launch / torchrun), runs feature generation in
// the dataset's reader threads, the forward on its main thread, and hands the rows to a writer
// thread, so reading, scoring and writing overlap. Output: `part-<rank>.csv` or
// `part-<rank>.parquet` in predict_output_path, columns = the model outputs (sorted by name, or
// --output_columns in that order) then the reserved columns. Parts are written into a hidden
// staging directory and moved into place only when every rank has finished without error.
// Not thread-safe: one Predict per process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tzrec/batch/batch.h"
#include "tzrec/features/feature.h"

namespace tzrec {

struct PredictOptions {
  std::string scripted_model_path;   // an export directory, or:
  std::string pipeline_config_path;  // a config plus
  std::string checkpoint_path;       // a checkpoint (default: latest in model_dir)
  std::string predict_input_path;
  std::string predict_output_path;
  std::string reserved_columns;  // comma-separated input columns; ALL_COLUMNS = every column
  std::string output_columns;    // comma-separated model outputs; default all, sorted
  int64_t batch_size = 0;        // 0: data_config.batch_size
  int predict_threads = 0;       // intra-op threads of the forward; 0: the runtime's default
  std::string dataset_type;      // default: data_config.dataset_type
  std::string writer_type;       // CsvWriter / ParquetWriter; default from the dataset type
  int64_t predict_steps = 0;     // 0: every batch
  std::string edit_config_json;
  int debug_level = 0;           // > 0: a last column "__features__" with the generated features
};

// The output column --debug_level adds.
inline constexpr char kFeatureDumpColumn[] = "__features__";

// The generated features of each row of `batch` as TorchEasyRec's predict --debug_level dumps
// them: "<feature>:<values> | <feature>:<values> ..." in feature order, ids and dense values
// joined by ",", weighted ids as sorted "id:weight" items, sequence steps joined by the
// feature's sequence_delim; numbers in their shortest round-trip form (numpy's str).
std::vector<std::string> FeatureDump(const Batch& batch, const std::vector<const Feature*>& features);

// Returns the number of rows this rank wrote.
int64_t Predict(const PredictOptions& options);

int PredictMain(const std::vector<std::string>& args);

}  // namespace tzrec
