// CsvDataset: whole files are the unit of work, as in TorchEasyRec's CSV reader: file i goes
// to global reader i % (world_size * num_workers); with shuffle the file order is shuffled per
// epoch (same seed on every rank). Reads delimiter, with_header, input_fields /
// input_fields_str.
#include <algorithm>
#include <random>

#include "tzrec/common/error.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/input/dataset_reader.h"

namespace tzrec {
namespace {

ColumnType ColumnTypeForField(const std::string& field_name, const std::string& type_name,
                              const std::string& where) {
  std::string t = type_name;
  std::transform(t.begin(), t.end(), t.begin(), ::toupper);
  if (t == "INT32" || t == "INT64" || t == "INT" || t == "BIGINT") return ColumnType::kInt64;
  if (t == "FLOAT" || t == "DOUBLE") return ColumnType::kDouble;
  if (t == "STRING") return ColumnType::kString;
  Fail(where, ": input field '", field_name, "' of type ", type_name,
       " is not supported yet for CsvDataset");
}

class CsvDatasetReader : public DatasetReader {
 public:
  CsvDatasetReader(const protos::DataConfig& data_config, DatasetOptions* options)
      : options_(*options) {
    csv_.delimiter = ParseCsvDelimiter(data_config.delimiter());
    csv_.with_header = data_config.with_header();
    ResolveCsvSchema(data_config, &csv_);
    const size_t files = options->files.size();
    if (files < static_cast<size_t>(options->world_size) && options->mode == DatasetMode::kTrain) {
      Fail("input path '", options->input_path, "' has ", files, " CSV files but the job has ",
           options->world_size, " ranks; CSV data is split by whole files, so it needs at least one "
           "file per rank");
    }
    // Evaluation may leave ranks without a file: their metrics simply add nothing.
    const size_t per_rank = std::max<size_t>(1, files / static_cast<size_t>(options->world_size));
    if (static_cast<size_t>(options->num_workers) > per_rank) {
      LOG_INFO << "num_workers reduced from " << options->num_workers << " to " << per_rank
               << " (one reader per file)";
      options->num_workers = static_cast<int>(per_rank);
    }
    csv_.wanted_columns = options->columns;
    options_ = *options;
  }

  std::vector<std::unique_ptr<RowSource>> Open(int64_t epoch,
                                               const DataloaderState* resume) const override {
    std::vector<std::string> files = options_.files;
    if (options_.shuffle) {
      std::mt19937_64 rng(options_.seed * 1000003ULL + static_cast<uint64_t>(epoch));
      std::shuffle(files.begin(), files.end(), rng);
    }
    const int workers = options_.num_workers;
    const size_t readers = static_cast<size_t>(options_.world_size) * workers;
    std::vector<std::unique_ptr<RowSource>> sources;
    for (int w = 0; w < workers; ++w) {
      std::vector<std::string> mine;
      for (size_t i = static_cast<size_t>(options_.rank) * workers + w; i < files.size(); i += readers) {
        mine.push_back(files[i]);
      }
      sources.push_back(MakeCsvRowSource(std::move(mine), csv_, resume));
    }
    return sources;
  }

 private:
  DatasetOptions options_;
  CsvOptions csv_;
};

std::unique_ptr<DatasetReader> MakeCsvReader(const protos::DataConfig& data_config,
                                             DatasetOptions* options) {
  return std::make_unique<CsvDatasetReader>(data_config, options);
}

}  // namespace

std::vector<InputFieldSpec> DeclaredInputFields(const protos::DataConfig& data_config) {
  std::vector<InputFieldSpec> fields;
  if (!data_config.input_fields_str().empty()) {
    // "name:TYPE;name:TYPE;", spaces ignored.
    for (auto entry : SplitView(data_config.input_fields_str(), ";")) {
      std::string item;
      for (char c : entry) {
        if (c != ' ') item += c;
      }
      if (item.empty()) continue;
      size_t colon = item.find(':');
      if (colon == std::string::npos) {
        Fail("data_config.input_fields_str: '", item, "' is not name:TYPE");
      }
      fields.push_back({item.substr(0, colon), item.substr(colon + 1), "data_config.input_fields_str"});
    }
    return fields;
  }
  for (int i = 0; i < data_config.input_fields_size(); ++i) {
    const auto& field = data_config.input_fields(i);
    fields.push_back({field.input_name(),
                      field.has_input_type() ? protos::FieldType_Name(field.input_type()) : std::string(),
                      StrCat("data_config.input_fields[", i, "]")});
  }
  return fields;
}

void ResolveCsvSchema(const protos::DataConfig& data_config, CsvOptions* options) {
  options->column_names.clear();
  options->column_types.clear();
  for (const InputFieldSpec& field : DeclaredInputFields(data_config)) {
    options->column_names.push_back(field.name);
    if (!field.type.empty()) {
      options->column_types[field.name] = ColumnTypeForField(field.name, field.type, field.where);
    }
  }
}

TZREC_REGISTER(DatasetReaderRegistry(), "CsvDataset", MakeCsvReader, "delimiter", "with_header",
               "input_fields.*", "input_fields_str");

}  // namespace tzrec
