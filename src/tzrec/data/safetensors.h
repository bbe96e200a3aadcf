// The safetensors file format (Hugging Face's): an 8-byte little-endian header length, a JSON
// header giving each tensor's dtype, shape and byte range in the data that follows, optional
// "__metadata__" string pairs, then the data, every byte of it belonging to exactly one tensor.
// Exported weights and embedding tables use it: it is simple, mmap-able, and Python reads it
// with the safetensors package or a few lines of json + numpy. LibTorch-free: a tensor is a
// dtype, a shape and its bytes.
//
// The writer orders tensors by element size (largest first), then by name, so that with the
// header padded to 8 bytes every tensor starts at a multiple of its element size: a mapped
// file can be read in place as float / int64 arrays.
//
// Thread-safety: WriteSafetensors is reentrant; a SafetensorsFile is immutable once opened
// and may be read from any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tzrec {

enum class SafetensorsDtype { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// "F32", "I64", ... as the format spells them.
const char* SafetensorsDtypeName(SafetensorsDtype dtype);
size_t SafetensorsDtypeSize(SafetensorsDtype dtype);
// False for a name the format does not define (or one we do not read: F8 types, U16-U64).
bool ParseSafetensorsDtype(const std::string& name, SafetensorsDtype* dtype);

// One tensor: `data` holds product(shape) elements of `dtype`, little-endian, row-major.
struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
};

// Writes `tensors` and `metadata` to `path` atomically (a temp file fsync'ed and renamed).
// Fails naming the tensor on an empty or duplicate name, a negative dimension, or a byte
// count that does not match its shape and dtype.
void WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// A safetensors file mapped read-only. Open() checks everything before anything is used: the
// header length against the file, the JSON, every dtype, shape and byte range (within the
// data, sized as shape and dtype say, no overlaps, no bytes outside a tensor). Errors name the
// file and the tensor.
class SafetensorsFile {
 public:
  static SafetensorsFile Open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Tensor names, sorted.
  std::vector<std::string> names() const;
  // nullptr when there is no tensor of that name; `data` points into the mapping, which lives
  // as long as any copy of this SafetensorsFile.
  const SafetensorsTensor* Find(const std::string& name) const;
  // As Find, but a missing name fails naming the file.
  const SafetensorsTensor& Get(const std::string& name) const;

 private:
  std::string path_;
  std::shared_ptr<const void> mapping_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, SafetensorsTensor> tensors_;
};

}  // namespace tzrec
