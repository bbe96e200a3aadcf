// DatasetReader: how one dataset type (data_config.dataset_type) splits input files over the
// reader threads of every rank and opens their row sources. Registered by the enum value name
// ("CsvDataset", "ParquetDataset") with the data_config fields only that type reads.
//
// Thread safety: created once per Dataset and immutable; Open may be called for every epoch.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "tzrec/common/registry.h"
#include "tzrec/data/data_position.h"
#include "tzrec/data/row_source.h"
#include "tzrec/input/dataset.h"

namespace tzrec {

class DatasetReader {
 public:
  virtual ~DatasetReader() = default;
  // One row source per reader thread of this rank, for one pass over the data.
  virtual std::vector<std::unique_ptr<RowSource>> Open(int64_t epoch,
                                                       const DataloaderState* resume) const = 0;
};

// `options` is complete except that the reader may lower num_workers (it is the reader's to
// set, e.g. one thread per CSV file); files and columns are resolved.
using DatasetReaderFactory = std::function<std::unique_ptr<DatasetReader>(
    const protos::DataConfig& data_config, DatasetOptions* options)>;
// Slot: the dataset_type enum of tzrec.protos.DataConfig.
Registry<DatasetReaderFactory>& DatasetReaderRegistry();

}  // namespace tzrec
