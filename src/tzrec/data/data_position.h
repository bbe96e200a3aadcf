// Where rows came from, and how far training has consumed each source (exact resume).
//
// Every row a reader produces carries (source id, row index). The trainer max-merges the
// positions of each batch it has consumed into a DataloaderState, which checkpoints save as
// dataloader_state.json (TorchEasyRec's format: {source id: last consumed row, ...,
// "__epochs_completed__": n}) and --continue_train hands back to the dataset, which then
// reads only the rows after each source's position.
//
// Source ids: Parquet uses TorchEasyRec's "<input_path>:<first row of the reader's
// interval>" with rows counted over all files of the input path in order; CSV uses
// "<file>:0" with 0-based data rows of that file (whole files are the CSV unit of work).
// With data_config.shuffle the position is the largest consumed row, so rows still waiting
// in a shuffle buffer at checkpoint time are not revisited (as in TorchEasyRec). Our own
// extra keys (__tzrec_next_reader__, __tzrec_readers__) restore the reader rotation; other
// tools ignore them.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tzrec {

// Per-row positions of a batch: rows[i] came from sources[source[i]] at row index row[i].
struct RowPositions {
  std::vector<std::string> sources;
  std::vector<int32_t> source;
  std::vector<int64_t> row;
  // The stream's reader rotation after this batch (set by BatchStream::Next): resuming with
  // the same reader count continues the rotation, so the batch order matches an
  // uninterrupted run (without shuffle).
  int32_t next_reader = -1;
  int32_t readers = 0;
  // Event time of each row in seconds since the Unix epoch (a stream message's timestamp, -1
  // when unknown), or empty when no row has one (files).
  std::vector<double> event_time;

  size_t size() const { return row.size(); }
  // The latest event time of the rows, -1 when none has one.
  double MaxEventTime() const;
  // All rows [first, first + count) of one source.
  void AddRange(const std::string& source_id, int64_t first, int64_t count);
  void Append(const RowPositions& other);
  RowPositions Slice(int64_t begin, int64_t end) const;
};

class DataloaderState {
 public:
  // Records the rows of a consumed batch.
  void Consume(const RowPositions& positions);
  // An epoch finished: positions restart, the completed-epoch count grows.
  void FinishEpoch();
  // Another rank's state of the same epoch: positions max-merged (ranks read disjoint rows).
  // The reader round-robin position is per process, so it is dropped when they differ.
  void Merge(const DataloaderState& other);

  const std::map<std::string, int64_t>& consumed() const { return consumed_; }
  int64_t epochs_completed() const { return epochs_completed_; }
  // Event time (seconds) at the last checkpoint's save, TorchEasyRec's "__data_ts_watermark__":
  // event-time checkpointing continues from it after a resume. Negative when unset.
  double data_ts_watermark() const { return data_ts_watermark_; }
  void set_data_ts_watermark(double seconds) { data_ts_watermark_ = seconds; }
  int32_t next_reader() const { return next_reader_; }
  int32_t readers() const { return readers_; }
  bool empty() const { return consumed_.empty(); }

  std::string ToJson() const;
  // Fails naming `where` (a file) on malformed content.
  static DataloaderState FromJson(const std::string& text, const std::string& where);
  static constexpr const char* kFileName = "dataloader_state.json";

 private:
  std::map<std::string, int64_t> consumed_;
  int64_t epochs_completed_ = 0;
  int32_t next_reader_ = -1;
  int32_t readers_ = 0;
  double data_ts_watermark_ = -1.0;
};

// TorchEasyRec's row split: rows [0, total) into `slices` contiguous ranges, the first
// total % slices one row longer. With drop_redundant_bs_eq_one, a range whose length leaves
// exactly one row past full batches (while others end on a batch boundary) loses that row,
// so no reader is left with a 1-row batch in distributed training.
struct RowInterval {
  int64_t begin;
  int64_t end;
};
RowInterval SliceRows(int64_t total, int64_t slice, int64_t slices, int64_t batch_size,
                      bool drop_redundant_bs_eq_one);

// The rows still to read in an epoch: from a state's entries for `input_path`
// ("<input_path>:<start>" -> last consumed row) each original range [start, next start) keeps
// (consumed, next start). No entries: [0, total).
std::vector<RowInterval> RemainingIntervals(const DataloaderState* state,
                                            const std::string& input_path, int64_t total);

// Reader `slice` of `slices`: its share of `remaining` (split as SliceRows splits a count,
// then mapped back onto the intervals).
std::vector<RowInterval> WorkerIntervals(const std::vector<RowInterval>& remaining, int64_t slice,
                                         int64_t slices, int64_t batch_size,
                                         bool drop_redundant_bs_eq_one);

}  // namespace tzrec
