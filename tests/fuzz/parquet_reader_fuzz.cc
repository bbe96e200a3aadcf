// libFuzzer target for the Parquet reader: any bytes must either read or fail with
// tzrec::Error; crashes, sanitizer reports, other exceptions and runaway memory are bugs.
//
// Built and run by tests/fuzz/run_parquet_fuzz.sh (clang++ -fsanitize=fuzzer,address,undefined);
// not part of the CMake build.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "tzrec/common/error.h"
#include "tzrec/data/parquet/parquet_format.h"
#include "tzrec/data/parquet/parquet_reader.h"

namespace {

// The reader sizes buffers from the footer's row and value counts, as any Parquet reader
// must, so a mutated count can legitimately ask for gigabytes. Only read data when the
// counts are modest; the footer and schema are always exercised.
bool CountsAreModest(const std::string& path) {
  std::string bytes;
  {
    FILE* file = std::fopen(path.c_str(), "rb");
    if (!file) return false;
    char buffer[4096];
    size_t got;
    while ((got = std::fread(buffer, 1, sizeof(buffer), file)) > 0) bytes.append(buffer, got);
    std::fclose(file);
  }
  uint32_t footer_length;
  std::memcpy(&footer_length, bytes.data() + bytes.size() - 8, 4);
  tzrec::parquet::FileMetaData metadata = tzrec::parquet::DecodeFileMetaData(
      reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size() - 8 - footer_length,
      footer_length);
  for (const auto& group : metadata.row_groups) {
    if (group.num_rows > 100000) return false;
    for (const auto& chunk : group.columns) {
      if (chunk.meta_data.num_values > 1000000) return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The reader takes a path; an in-memory file avoids disk I/O per input.
  static int fd = memfd_create("parquet_fuzz", 0);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) abort();
  try {
    tzrec::ParquetReadOptions options;
    // Without CRC checks mutated page bytes reach the decoders instead of stopping at the CRC.
    options.verify_checksums = size > 0 && (data[size / 2] & 1);
    tzrec::ParquetFileReader reader(path, options);  // validated the footer
    if (!CountsAreModest(path)) return 0;
    for (int g = 0; g < reader.num_row_groups(); ++g) {
      try {
        tzrec::RecordBatch batch;
        reader.ReadRowGroup(g, &batch);
      } catch (const tzrec::Error&) {
      }
    }
    tzrec::RecordBatch batch;
    reader.SetRowRange(reader.num_rows() / 3, reader.num_rows());
    while (reader.Next(7, &batch)) {
    }
  } catch (const tzrec::Error&) {
    // Rejecting bad input with a message is the expected outcome.
  }
  return 0;
}
