#include "tzrec/train/tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>
#include <chrono>
#include <cstring>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"

namespace tzrec {
namespace {

const std::array<uint32_t, 256>& Crc32cTable() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected 0x1EDC6F41
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// TFRecord's masking, so that a CRC of data holding CRCs stays well distributed.
uint32_t MaskedCrc(const void* data, size_t size) {
  const uint32_t crc = Crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Protobuf wire format, as far as Event and Summary need it.
void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
void PutTag(std::string* out, int field, int wire_type) { PutVarint(out, static_cast<uint64_t>(field) << 3 | wire_type); }
template <typename T>
void PutFixed(std::string* out, T v) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // little-endian x86, as the wire format
  out->append(bytes, sizeof(T));
}
void PutBytes(std::string* out, int field, const std::string& bytes) {
  PutTag(out, field, 2);
  PutVarint(out, bytes.size());
  out->append(bytes);
}

double WallTime() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary = 5.
std::string EventHeader(int64_t step) {
  std::string event;
  PutTag(&event, 1, 1);
  PutFixed<double>(&event, WallTime());
  PutTag(&event, 2, 0);
  PutVarint(&event, static_cast<uint64_t>(step));
  return event;
}

}  // namespace

uint32_t Crc32c(const void* data, size_t size) {
  const auto& table = Crc32cTable();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

EventWriter::EventWriter(const std::string& dir) {
  MakeDirs(dir);
  path_ = JoinPath(dir, StrCat("events.out.tfevents.", static_cast<int64_t>(WallTime()), ".", HostName(), ".",
                               static_cast<int64_t>(getpid())));
  file_ = std::fopen(path_.c_str(), "ab");
  if (!file_) Fail("cannot write TensorBoard events to '", path_, "': ", std::strerror(errno));
  std::string event = EventHeader(0);
  PutBytes(&event, 3, "brain.Event:2");
  WriteRecord(event);
}

EventWriter::~EventWriter() {
  if (file_) std::fclose(file_);
}

void EventWriter::AddScalar(const std::string& tag, double value, int64_t step) {
  // Summary.Value: tag = 1, simple_value = 2 (float); Summary: value = 1 (repeated).
  std::string summary_value;
  PutBytes(&summary_value, 1, tag);
  PutTag(&summary_value, 2, 5);
  PutFixed<float>(&summary_value, static_cast<float>(value));
  std::string summary;
  PutBytes(&summary, 1, summary_value);
  std::string event = EventHeader(step);
  PutBytes(&event, 5, summary);
  WriteRecord(event);
}

void EventWriter::AddHistogram(const std::string& tag, const float* values, int64_t count, int64_t step) {
  // TensorFlow's default bucket edges, ascending: -DBL_MAX, -1e20.. -1e-12, 0, 1e-12 .. 1e20, DBL_MAX.
  static const std::vector<double> edges = [] {
    std::vector<double> positive;
    for (double v = 1e-12; v < 1e20; v *= 1.1) positive.push_back(v);
    std::vector<double> all = {-std::numeric_limits<double>::max()};
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), positive.begin(), positive.end());
    all.push_back(std::numeric_limits<double>::max());
    return all;
  }();
  // As TensorFlow's Histogram: bucket i holds the values in [edges[i-1], edges[i]).
  std::vector<double> counts(edges.size(), 0.0);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0.0, squares = 0.0, num = 0.0;
  for (int64_t i = 0; i < count; ++i) {
    const double v = values[i];
    if (!std::isfinite(v)) continue;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    squares += v * v;
    num += 1.0;
    counts[std::upper_bound(edges.begin(), edges.end(), v) - edges.begin()] += 1.0;
  }
  size_t first = 0, last = counts.size();
  while (first < last && counts[first] == 0.0) ++first;
  while (last > first && counts[last - 1] == 0.0) --last;
  // HistogramProto: min 1, max 2, num 3, sum 4, sum_squares 5 (doubles), bucket_limit 6 and
  // bucket 7 (packed doubles).
  std::string histo;
  const double fields[] = {num > 0 ? lo : 0.0, num > 0 ? hi : 0.0, num, sum, squares};
  for (int f = 0; f < 5; ++f) {
    PutTag(&histo, f + 1, 1);
    PutFixed<double>(&histo, fields[f]);
  }
  std::string limits, buckets;
  for (size_t i = first; i < last; ++i) {
    PutFixed<double>(&limits, edges[i]);
    PutFixed<double>(&buckets, counts[i]);
  }
  PutBytes(&histo, 6, limits);
  PutBytes(&histo, 7, buckets);
  // Summary.Value: tag = 1, histo = 5.
  std::string summary_value;
  PutBytes(&summary_value, 1, tag);
  PutBytes(&summary_value, 5, histo);
  std::string summary;
  PutBytes(&summary, 1, summary_value);
  std::string event = EventHeader(step);
  PutBytes(&event, 5, summary);
  WriteRecord(event);
}

void EventWriter::WriteRecord(const std::string& data) {
  std::string record;
  PutFixed<uint64_t>(&record, data.size());
  PutFixed<uint32_t>(&record, MaskedCrc(record.data(), 8));
  record.append(data);
  PutFixed<uint32_t>(&record, MaskedCrc(data.data(), data.size()));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    Fail("writing TensorBoard events to '", path_, "' failed: ", std::strerror(errno));
  }
}

}  // namespace tzrec
