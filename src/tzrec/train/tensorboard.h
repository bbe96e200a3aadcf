// TensorBoard event files: scalars written as TensorFlow's `Event` / `Summary` protobuf messages
// (encoded here by their field numbers) in TFRecord framing (length and data, each followed by
// its masked CRC-32C), so TensorBoard, tf.data and torch's readers read them.
// Thread-safety: one writer per thread (the trainer writes from its own thread).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace tzrec {

// CRC-32C (Castagnoli) of `size` bytes. Debian 12 packages no C/C++ CRC-32C library
// (python3-crc32c only), so it is computed here with a 256-entry table.
uint32_t Crc32c(const void* data, size_t size);

class EventWriter {
 public:
  // Creates `dir` if needed and a new events.out.tfevents.<seconds>.<host>.<pid> file in it,
  // starting with the file-version event TensorBoard expects.
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  // One scalar at `step`, flushed at once (TensorBoard reads files as they grow).
  void AddScalar(const std::string& tag, double value, int64_t step);
  // A histogram of `count` values (TensorFlow's HistogramProto over its default exponential
  // buckets: edges +-1e-12 * 1.1^k up to 1e20, empty buckets at both ends left out, as torch's
  // SummaryWriter writes them). Non-finite values are not counted.
  void AddHistogram(const std::string& tag, const float* values, int64_t count, int64_t step);
  const std::string& path() const { return path_; }

 private:
  void WriteRecord(const std::string& data);
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace tzrec
