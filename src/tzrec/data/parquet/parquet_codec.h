// Page compression codecs: UNCOMPRESSED, SNAPPY, GZIP, ZSTD and LZ4_RAW.
//
// Decompression takes the size the page header promises and fails (tzrec::Error without a
// file name; callers add it) unless the codec produces exactly that many bytes, so a corrupt
// page can neither overrun the output buffer nor pass as short data. Other codecs (LZO,
// BROTLI, Hadoop-framed LZ4) fail with "not supported yet".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tzrec/data/parquet/parquet_format.h"

namespace tzrec {
namespace parquet {

bool CodecSupported(Codec codec);

// Replaces `*out` with the decompressed bytes.
void Decompress(Codec codec, const uint8_t* data, size_t size, size_t uncompressed_size,
                std::string* out);

// Appends the compressed form of `data` to `*out`. `level` 0 = the codec's default.
void Compress(Codec codec, const char* data, size_t size, int level, std::string* out);

}  // namespace parquet
}  // namespace tzrec
