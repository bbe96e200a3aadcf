#include "tzrec/data/parquet/parquet_codec.h"

#include <lz4.h>
#include <snappy-c.h>
#include <zlib.h>
// For ZSTD_findDecompressedSize/ZSTD_decompressBound (exported by the shared library too).
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <cstring>
#include <limits>

#include "tzrec/common/error.h"

namespace tzrec {
namespace parquet {
namespace {

// A page may not claim more output than its codec can possibly produce from its input:
// this stops a corrupt size from allocating gigabytes before decompression fails.
void CheckExpansion(Codec codec, size_t size, size_t uncompressed_size, uint64_t max_ratio) {
  if (uncompressed_size > static_cast<uint64_t>(size) * max_ratio + 1024) {
    Fail(CodecName(codec), " page claims ", uncompressed_size, " uncompressed bytes from only ",
         size, " compressed bytes");
  }
}

void InflateGzip(const uint8_t* data, size_t size, size_t expected, std::string* out) {
  // One spare byte of room tells "exactly the stated size" from "more than stated".
  out->resize(expected + 1);
  z_stream stream{};
  // 32 + MAX_WBITS: detect gzip or zlib framing (some writers emit zlib by mistake).
  if (inflateInit2(&stream, 32 + MAX_WBITS) != Z_OK) Fail("GZIP: cannot initialise zlib");
  stream.next_in = const_cast<Bytef*>(data);
  stream.avail_in = static_cast<uInt>(size);
  stream.next_out = reinterpret_cast<Bytef*>(out->data());
  stream.avail_out = static_cast<uInt>(out->size());
  int rc;
  while (true) {
    rc = inflate(&stream, Z_FINISH);
    if (rc == Z_OK && stream.avail_out > 0) continue;
    // Concatenated gzip members are legal.
    if (rc == Z_STREAM_END && stream.avail_in > 0 && stream.avail_out > 0) {
      if (inflateReset(&stream) != Z_OK) break;
      continue;
    }
    break;
  }
  size_t produced = out->size() - stream.avail_out;
  inflateEnd(&stream);
  if (rc == Z_STREAM_END || produced > expected) {
    if (produced != expected) {
      Fail("GZIP page decompresses to ", produced > expected ? "more than " : "", produced,
           " bytes, header states ", expected);
    }
    out->resize(expected);
    return;
  }
  if (rc == Z_BUF_ERROR) Fail("GZIP page is truncated");
  Fail("GZIP page is corrupt (zlib error ", rc, ")");
}

}  // namespace

bool CodecSupported(Codec codec) {
  switch (codec) {
    case Codec::kUncompressed:
    case Codec::kSnappy:
    case Codec::kGzip:
    case Codec::kZstd:
    case Codec::kLz4Raw: return true;
    default: return false;
  }
}

void Decompress(Codec codec, const uint8_t* data, size_t size, size_t uncompressed_size,
                std::string* out) {
  if (uncompressed_size > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    Fail("page claims ", uncompressed_size, " uncompressed bytes");
  }
  switch (codec) {
    case Codec::kUncompressed:
      if (size != uncompressed_size) {
        Fail("UNCOMPRESSED page has ", size, " bytes but its header states ", uncompressed_size);
      }
      out->assign(reinterpret_cast<const char*>(data), size);
      return;
    case Codec::kSnappy: {
      size_t length = 0;
      if (snappy_uncompressed_length(reinterpret_cast<const char*>(data), size, &length) !=
          SNAPPY_OK) {
        Fail("SNAPPY page is corrupt (bad length header)");
      }
      if (length != uncompressed_size) {
        Fail("SNAPPY page decompresses to ", length, " bytes, header states ", uncompressed_size);
      }
      out->resize(length);
      size_t produced = length;
      if (snappy_uncompress(reinterpret_cast<const char*>(data), size, out->data(), &produced) !=
              SNAPPY_OK ||
          produced != length) {
        Fail("SNAPPY page is corrupt");
      }
      return;
    }
    case Codec::kGzip:
      CheckExpansion(codec, size, uncompressed_size, 1032);  // deflate's maximum ratio
      InflateGzip(data, size, uncompressed_size, out);
      return;
    case Codec::kZstd: {
      unsigned long long known = ZSTD_findDecompressedSize(data, size);
      if (known == ZSTD_CONTENTSIZE_ERROR) Fail("ZSTD page is corrupt (bad frame header)");
      if (known != ZSTD_CONTENTSIZE_UNKNOWN && known != uncompressed_size) {
        Fail("ZSTD page decompresses to ", known, " bytes, header states ", uncompressed_size);
      }
      unsigned long long bound = ZSTD_decompressBound(data, size);
      if (bound == ZSTD_CONTENTSIZE_ERROR || uncompressed_size > bound) {
        Fail("ZSTD page cannot hold the ", uncompressed_size, " bytes its header states");
      }
      out->resize(uncompressed_size);
      size_t produced = ZSTD_decompress(out->data(), out->size(), data, size);
      if (ZSTD_isError(produced)) Fail("ZSTD page is corrupt: ", ZSTD_getErrorName(produced));
      if (produced != uncompressed_size) {
        Fail("ZSTD page decompresses to ", produced, " bytes, header states ", uncompressed_size);
      }
      return;
    }
    case Codec::kLz4Raw: {
      CheckExpansion(codec, size, uncompressed_size, 255);  // LZ4's maximum ratio
      if (size > static_cast<size_t>(std::numeric_limits<int>::max()))
        Fail("LZ4_RAW page too large");
      out->resize(uncompressed_size);
      int produced = LZ4_decompress_safe(reinterpret_cast<const char*>(data), out->data(),
                                         static_cast<int>(size), static_cast<int>(out->size()));
      if (produced < 0) Fail("LZ4_RAW page is corrupt");
      if (static_cast<size_t>(produced) != uncompressed_size) {
        Fail("LZ4_RAW page decompresses to ", produced, " bytes, header states ",
             uncompressed_size);
      }
      return;
    }
    default: break;
  }
  Fail("compression codec ", CodecName(codec), " is not supported yet");
}

void Compress(Codec codec, const char* data, size_t size, int level, std::string* out) {
  size_t start = out->size();
  switch (codec) {
    case Codec::kUncompressed: out->append(data, size); return;
    case Codec::kSnappy: {
      size_t capacity = snappy_max_compressed_length(size);
      out->resize(start + capacity);
      if (snappy_compress(data, size, out->data() + start, &capacity) != SNAPPY_OK) {
        Fail("SNAPPY compression failed");
      }
      out->resize(start + capacity);
      return;
    }
    case Codec::kGzip: {
      z_stream stream{};
      if (deflateInit2(&stream, level == 0 ? Z_DEFAULT_COMPRESSION : level, Z_DEFLATED,
                       16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        Fail("GZIP: cannot initialise zlib");
      }
      size_t capacity = deflateBound(&stream, size);
      out->resize(start + capacity);
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
      stream.avail_in = static_cast<uInt>(size);
      stream.next_out = reinterpret_cast<Bytef*>(out->data() + start);
      stream.avail_out = static_cast<uInt>(capacity);
      int rc = deflate(&stream, Z_FINISH);
      size_t produced = stream.total_out;
      deflateEnd(&stream);
      if (rc != Z_STREAM_END) Fail("GZIP compression failed (zlib error ", rc, ")");
      out->resize(start + produced);
      return;
    }
    case Codec::kZstd: {
      size_t capacity = ZSTD_compressBound(size);
      out->resize(start + capacity);
      size_t produced = ZSTD_compress(out->data() + start, capacity, data, size, level);
      if (ZSTD_isError(produced)) Fail("ZSTD compression failed: ", ZSTD_getErrorName(produced));
      out->resize(start + produced);
      return;
    }
    case Codec::kLz4Raw: {
      if (size > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) Fail("LZ4_RAW page too large");
      int capacity = LZ4_compressBound(static_cast<int>(size));
      out->resize(start + capacity);
      int produced =
          LZ4_compress_default(data, out->data() + start, static_cast<int>(size), capacity);
      if (produced <= 0) Fail("LZ4_RAW compression failed");
      out->resize(start + produced);
      return;
    }
    default: break;
  }
  Fail("writing compression codec ", CodecName(codec), " is not supported yet");
}

}  // namespace parquet
}  // namespace tzrec
