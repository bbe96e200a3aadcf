// Tensor archives: {name: tensor} dicts in the zip layout of torch.save (Python's torch.load
// reads them), written durably with a size and CRC-32 the checkpoint's meta.json records, and
// read back with every tensor record checked against its storage before anything touches it.
//
// Why the checks: the unpickler takes a tensor's offset, sizes and strides from the file as
// they are, so a crafted or damaged file (a `fine_tune_checkpoint` from elsewhere) could make
// a later copy read outside the storage. Thread-safe (no shared state).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

namespace tzrec {

struct FileDigest {
  int64_t size = 0;
  uint32_t crc32 = 0;
};
FileDigest DigestOf(const std::string& bytes);

// Writes `tensors` to `path` (temp file, fsync, rename; the caller syncs the directory).
FileDigest WriteTensorArchive(const std::string& path, const std::map<std::string, at::Tensor>& tensors);

// Parses archive bytes; `where` names the file in errors. Fails on anything but a dict of
// string -> tensor whose records all lie within their storages.
std::map<std::string, at::Tensor> ParseTensorArchive(const std::string& bytes, const std::string& where);

// Fails naming `what` unless the tensor's offset, sizes and strides stay inside its storage
// and the storage holds whole elements of its dtype.
void ValidateTensorStorage(const at::Tensor& tensor, const std::string& what);

}  // namespace tzrec
