// BatchStream: one pass over a Dataset handing out Batches (tensors) instead of ParsedBatches.
// The conversion borrows the parsed vectors (batch.h), so it costs no copy. Used by one thread.
#pragma once

#include <memory>

#include "tzrec/batch/batch.h"
#include "tzrec/input/dataset.h"

namespace tzrec {

class BatchStream {
 public:
  BatchStream(const Dataset& dataset, int64_t epoch, const DataloaderState* resume = nullptr)
      : stream_(dataset.Open(epoch, resume)) {}
  // Returns false when the pass is complete.
  bool Next(Batch* out) {
    ParsedBatch parsed;
    if (!stream_->Next(&parsed)) return false;
    *out = ToBatch(std::move(parsed));
    return true;
  }
  // See ParsedBatchStream::set_interrupt.
  void set_interrupt(const std::atomic<bool>* flag) { stream_->set_interrupt(flag); }

 private:
  std::unique_ptr<ParsedBatchStream> stream_;
};

}  // namespace tzrec
