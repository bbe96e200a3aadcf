#include "tzrec/train/tensor_archive.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <vector>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"

namespace tzrec {
namespace {

uint32_t Crc32(uint32_t crc, const void* data, size_t size) {
  const auto* bytes = static_cast<const Bytef*>(data);
  while (size > 0) {
    const uInt chunk = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
    crc = static_cast<uint32_t>(crc32(crc, bytes, chunk));
    bytes += chunk;
    size -= chunk;
  }
  return crc;
}

}  // namespace

FileDigest DigestOf(const std::string& bytes) {
  return {static_cast<int64_t>(bytes.size()), Crc32(0, bytes.data(), bytes.size())};
}

FileDigest WriteTensorArchive(const std::string& path, const std::map<std::string, at::Tensor>& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& kv : tensors) {
    // Pickling a view writes its whole storage: tables are views into one fused buffer.
    const at::Tensor& t = kv.second;
    bool owns_storage = t.is_contiguous() && t.storage_offset() == 0 &&
                        t.storage().nbytes() == static_cast<size_t>(t.numel()) * t.element_size();
    dict.insert(kv.first, owns_storage ? t : t.clone(at::MemoryFormat::Contiguous));
  }
  // The same archive torch::jit::pickle_save builds (and torch.load reads), but streamed to
  // the file: pickle_save assembles it in memory first, which doubled peak RSS at every save
  // of a large table.
  std::vector<char> pickle_bytes;
  torch::jit::Pickler pickler(
      [&](const char* data, size_t size) { pickle_bytes.insert(pickle_bytes.end(), data, data + size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  std::string tmp = TempSiblingPath(path);
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  if (!file) Fail("cannot write '", tmp, "'");
  bool write_failed = false;
  FileDigest digest;
  try {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) -> size_t {
      if (size > 0 && std::fwrite(data, 1, size, file) != size) write_failed = true;
      digest.crc32 = Crc32(digest.crc32, data, size);
      digest.size += static_cast<int64_t>(size);
      return size;
    });
    torch::jit::writeArchiveAndTensors("data", pickle_bytes.data(), pickle_bytes.size(),
                                       pickler.tensorData(), writer);
    writer.writeEndOfFile();
  } catch (...) {
    std::fclose(file);
    std::remove(tmp.c_str());
    throw;
  }
  // fsync before the rename: a power loss must not leave a complete-looking empty file.
  if (std::fflush(file) != 0 || ::fsync(fileno(file)) != 0) write_failed = true;
  if (std::fclose(file) != 0 || write_failed) {
    std::remove(tmp.c_str());
    Fail("cannot write '", path, "' (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    Fail("cannot move '", tmp, "' to '", path, "'");
  }
  return digest;
}

void ValidateTensorStorage(const at::Tensor& t, const std::string& what) {
  if (!t.defined()) Fail(what, ": undefined tensor");
  if (!t.device().is_cpu() || !t.has_storage()) Fail(what, ": not a CPU tensor with storage");
  const int64_t offset = t.storage_offset();
  if (offset < 0) Fail(what, ": negative storage offset ", offset);
  const int64_t item = static_cast<int64_t>(t.element_size());
  const int64_t nbytes = static_cast<int64_t>(t.storage().nbytes());
  if (item <= 0 || nbytes % item != 0) {
    Fail(what, ": storage of ", nbytes, " bytes does not hold whole ", t.scalar_type(), " elements");
  }
  // Index one past the furthest element: offset + sum((size_d - 1) * stride_d) + 1.
  int64_t end = offset + 1;
  bool empty = false;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t size = t.sizes()[d], stride = t.strides()[d];
    if (size < 0 || stride < 0) Fail(what, ": negative size or stride in ", t.sizes(), " / ", t.strides());
    if (size == 0) empty = true;
    int64_t reach = 0;
    if (size > 0 && (__builtin_mul_overflow(size - 1, stride, &reach) ||
                     __builtin_add_overflow(end, reach, &end))) {
      Fail(what, ": sizes ", t.sizes(), " and strides ", t.strides(), " overflow");
    }
  }
  int64_t end_bytes = 0;
  if (!empty && (__builtin_mul_overflow(end, item, &end_bytes) || end_bytes > nbytes)) {
    Fail(what, ": tensor of sizes ", t.sizes(), " at offset ", offset,
         " reaches past its storage of ", nbytes, " bytes");
  }
  if (!empty && nbytes > 0 && t.storage().data() == nullptr) Fail(what, ": storage has no data");
}

std::map<std::string, at::Tensor> ParseTensorArchive(const std::string& bytes, const std::string& where) {
  c10::IValue value;
  try {
    value = torch::jit::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    Fail("cannot read tensor file '", where, "': ", e.what());
  }
  if (!value.isGenericDict()) Fail("tensor file '", where, "' is not a dict of tensors");
  std::map<std::string, at::Tensor> out;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor()) {
      Fail("tensor file '", where, "' has an entry that is not string -> tensor");
    }
    const std::string& name = entry.key().toStringRef();
    at::Tensor tensor = entry.value().toTensor();
    ValidateTensorStorage(tensor, StrCat("tensor file '", where, "': [", name, "]"));
    out[name] = tensor;
  }
  return out;
}

}  // namespace tzrec
