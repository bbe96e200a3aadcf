#include "tzrec/serving/output_part.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/config/edit_config.h"

namespace tzrec {

std::vector<std::string> CommaList(const std::string& text) {
  std::vector<std::string> out;
  for (const std::string& item : Split(text, ",")) {
    std::string trimmed(Trim(item));
    if (!trimmed.empty()) out.push_back(trimmed);
  }
  return out;
}

std::function<void(protos::EasyRecConfig*)> ScoringConfigEdits(std::string edit_config_json, int64_t batch_size,
                                                              std::string dataset_type) {
  return [=](protos::EasyRecConfig* config) {
    if (!edit_config_json.empty()) EditConfigJson(config, edit_config_json);
    if (batch_size > 0) config->mutable_data_config()->set_batch_size(batch_size);
    if (!dataset_type.empty()) {
      protos::DatasetType type;
      if (!protos::DatasetType_Parse(dataset_type, &type)) Fail("--dataset_type=", dataset_type, ": unknown dataset type");
      config->mutable_data_config()->set_dataset_type(type);
    }
  };
}

bool WritesParquet(const std::string& writer_type, const protos::DataConfig& data) {
  std::string type = writer_type;
  if (type.empty()) type = data.dataset_type() == protos::ParquetDataset ? "ParquetWriter" : "CsvWriter";
  if (type != "CsvWriter" && type != "ParquetWriter") {
    Fail("--writer_type=", type, ": not supported (CsvWriter, ParquetWriter)");
  }
  return type == "ParquetWriter";
}

OutputPart::OutputPart(const std::string& output_dir, int rank, const std::string& ext, const std::string& tag)
    : output_dir_(output_dir) {
  const std::string name = StrCat("part-", rank, ".", ext);
  final_path_ = JoinPath(output_dir, name);
  if (PathExists(final_path_)) Fail("--predict_output_path: '", final_path_, "' exists already (choose another directory)");
  staging_ = JoinPath(output_dir, StrCat(".", tag, "-rank-", rank));
  staged_path_ = JoinPath(staging_, name);
}

const std::string& OutputPart::Stage() {
  MakeDirs(output_dir_);
  RemoveAll(staging_);
  MakeDirs(staging_);
  staged_ = true;
  return staged_path_;
}

OutputPart::~OutputPart() {
  if (staged_) RemoveAll(staging_);
}

void OutputPart::Commit(std::exception_ptr failure, Collectives* comm, const std::string& what) {
  std::vector<double> failed = {failure ? 1.0 : 0.0};
  if (comm) comm->AllReduceSum(&failed);
  if (failure || failed[0] > 0) {
    RemoveAll(staging_);
    staged_ = false;
    if (failure) std::rethrow_exception(failure);
    Fail(what, " failed on ", static_cast<int>(failed[0]), " other rank(s); nothing committed");
  }
  if (std::rename(staged_path_.c_str(), final_path_.c_str()) != 0) {
    Fail("cannot move ", staged_path_, " to ", final_path_, ": ", std::strerror(errno));
  }
  RemoveAll(staging_);
  staged_ = false;
  SyncDirectory(output_dir_);
}

}  // namespace tzrec
