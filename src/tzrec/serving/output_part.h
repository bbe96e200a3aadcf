// What the commands that score input files and write one part per rank share (predict,
// tdm_retrieval): their config overrides, the writer type, and the part file that becomes
// visible only when every rank has finished without error.
//
// Thread safety: an OutputPart is used by one thread.
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "tzrec/common/collectives.h"
#include "tzrec/protos/pipeline.pb.h"

namespace tzrec {

// The non-empty, trimmed items of a comma-separated flag value.
std::vector<std::string> CommaList(const std::string& text);

// Applies --edit_config_json, --batch_size (> 0) and --dataset_type (non-empty) to a config.
std::function<void(protos::EasyRecConfig*)> ScoringConfigEdits(std::string edit_config_json, int64_t batch_size,
                                                              std::string dataset_type);

// Whether --writer_type (CsvWriter, ParquetWriter; "": from the dataset type) writes Parquet.
bool WritesParquet(const std::string& writer_type, const protos::DataConfig& data);

// part-<rank>.<ext> of `output_dir`, written at staged_path() in a hidden staging directory.
class OutputPart {
 public:
  // Fails when the part exists already; `tag` names the staging directory (".<tag>-rank-<r>").
  // Creates nothing yet.
  OutputPart(const std::string& output_dir, int rank, const std::string& ext, const std::string& tag);
  ~OutputPart();
  // Creates the output and staging directories; returns where to write the part.
  const std::string& Stage();
  const std::string& final_path() const { return final_path_; }
  // Collective (every rank calls it): moves the part into place when no rank failed, else
  // removes it and rethrows `failure` (or fails naming the ranks that did).
  void Commit(std::exception_ptr failure, Collectives* comm, const std::string& what);

 private:
  std::string output_dir_, staging_, staged_path_, final_path_;
  bool staged_ = false;
};

}  // namespace tzrec
