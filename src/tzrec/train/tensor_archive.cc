#include "tzrec/train/tensor_archive.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/storage_context.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <utility>
#include <memory>
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

// The archive's bytes for LibTorch's zip reader, with reads clamped to the buffer. The reader
// torch::jit::pickle_load uses does not clamp: a crafted central directory made it copy past
// the end of the buffer (found by tests/fuzz/tensor_archive_fuzz.cc), so we never use it.
class BoundedReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BoundedReader(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    const size_t count = std::min<uint64_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, count);
    return count;
  }

 private:
  const std::string& bytes_;
};

uint64_t Le(const std::string& b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}

// Checks the zip central directory before LibTorch reads it: every record must be stored
// (torch.save does not compress) and lie inside the file. LibTorch allocates a record's
// declared size up front, so a crafted size would otherwise ask for any amount of memory.
// Returns [offset, size) of the "*/data.pkl" record's bytes (size 0 when there is none).
std::pair<size_t, size_t> CheckZipRecords(const std::string& b, const std::string& where) {
  std::pair<size_t, size_t> pickle{0, 0};
  const size_t n = b.size();
  auto bad = [&](const std::string& why) { Fail("tensor file '", where, "' is not a valid archive: ", why); };
  if (n < 22) bad("too short");
  size_t eocd = std::string::npos;
  for (size_t at = n - 22 + 1; at-- > 0 && n - at <= 22 + 65535;) {
    if (Le(b, at, 4) == 0x06054b50) {
      eocd = at;
      break;
    }
  }
  if (eocd == std::string::npos) bad("no end of central directory");
  uint64_t entries = Le(b, eocd + 10, 2), cd_size = Le(b, eocd + 12, 4), cd_offset = Le(b, eocd + 16, 4);
  if (entries == 0xffff || cd_size == 0xffffffff || cd_offset == 0xffffffff) {
    // Zip64: the locator sits right before the end record and points at the zip64 end record.
    if (eocd < 20 || Le(b, eocd - 20, 4) != 0x07064b50) bad("zip64 locator missing");
    const uint64_t z64 = Le(b, eocd - 20 + 8, 8);
    if (z64 > n || n - z64 < 56 || Le(b, z64, 4) != 0x06064b50) bad("zip64 end record missing");
    entries = Le(b, z64 + 32, 8);
    cd_size = Le(b, z64 + 40, 8);
    cd_offset = Le(b, z64 + 48, 8);
  }
  if (cd_offset > n || cd_size > n - cd_offset) bad("central directory outside the file");
  size_t at = cd_offset;
  const size_t cd_end = cd_offset + cd_size;
  for (uint64_t e = 0; e < entries; ++e) {
    if (at > cd_end || cd_end - at < 46 || Le(b, at, 4) != 0x02014b50) bad("damaged central directory");
    const uint64_t method = Le(b, at + 10, 2);
    uint64_t compressed = Le(b, at + 20, 4), size = Le(b, at + 24, 4);
    const uint64_t name_len = Le(b, at + 28, 2), extra_len = Le(b, at + 30, 2), comment_len = Le(b, at + 32, 2);
    uint64_t offset = Le(b, at + 42, 4);
    const size_t extra = at + 46 + name_len;
    if (extra + extra_len + comment_len > cd_end) bad("damaged central directory");
    for (size_t x = extra; x + 4 <= extra + extra_len;) {
      const uint64_t id = Le(b, x, 2), len = Le(b, x + 2, 2);
      if (x + 4 + len > extra + extra_len) bad("damaged extra field");
      if (id == 0x0001) {  // zip64 sizes, in this order, for the fields that overflowed
        size_t f = x + 4;
        auto take = [&](uint64_t& field) {
          if (field != 0xffffffff) return;
          if (f + 8 > x + 4 + len) bad("damaged zip64 field");
          field = Le(b, f, 8);
          f += 8;
        };
        take(size);
        take(compressed);
        take(offset);
      }
      x += 4 + len;
    }
    const std::string name = b.substr(at + 46, name_len);
    if (method != 0 || compressed != size) bad("record '" + name + "' is compressed");
    if (offset > n || size > n - offset) {
      bad(StrCat("record '", name, "' claims ", size, " bytes at offset ", offset, " of a ", n, "-byte file"));
    }
    if (name.size() >= 9 && name.compare(name.size() - 9, 9, "/data.pkl") == 0) {
      if (n - offset < 30 || Le(b, offset, 4) != 0x04034b50) bad("damaged local header of '" + name + "'");
      const uint64_t data = offset + 30 + Le(b, offset + 26, 2) + Le(b, offset + 28, 2);
      if (data > n || size > n - data) bad("record '" + name + "' outside the file");
      pickle = {data, size};
    }
    at = extra + extra_len + comment_len;
  }
  return pickle;
}

// Walks the pickle's opcodes before LibTorch's unpickler runs them: lengths must stay inside
// the pickle and memo indices below its size, because the unpickler reserves a declared string
// length (up to 4 GiB) and resizes its memo to a declared index (up to 2^32 entries) before
// looking further. Opcodes outside what torch.save writes are refused.
void CheckPickle(const std::string& b, size_t begin, size_t size, const std::string& where) {
  auto bad = [&](const std::string& why) { Fail("tensor file '", where, "': damaged pickle: ", why); };
  const size_t end = begin + size;
  size_t at = begin;
  auto need = [&](uint64_t bytes) {
    if (bytes > end - at) bad("an argument runs past the end");
  };
  // A length of `width` bytes, then that many bytes.
  auto skip_counted = [&](int width) {
    need(width);
    const uint64_t len = Le(b, at, width);
    at += width;
    need(len);
    at += len;
  };
  auto line = [&] {
    const size_t nl = b.find('\n', at);
    if (nl == std::string::npos || nl >= end) bad("an unterminated text argument");
    at = nl + 1;
  };
  while (at < end) {
    const unsigned char op = static_cast<unsigned char>(b[at++]);
    switch (op) {
      case '(': case '0': case '1': case '2': case 'N': case 'Q': case 'R': case 'a': case 'b':
      case 'd': case '}': case 'e': case 'l': case ']': case 's': case 't': case ')': case 'u':
      case 0x85: case 0x86: case 0x87: case 0x88: case 0x89: case 0x94:
        break;
      case '.':
        return;  // STOP
      case 'K': case 0x80: need(1); at += 1; break;
      case 'h': case 'q': need(1); at += 1; break;
      case 'M': need(2); at += 2; break;
      case 'J': need(4); at += 4; break;
      case 'j': case 'r': {
        need(4);
        if (Le(b, at, 4) > size) bad("a memo index beyond the pickle's size");
        at += 4;
        break;
      }
      case 'G': need(8); at += 8; break;
      case 'U': case 'C': case 0x8c: case 0x8a: skip_counted(1); break;  // 1-byte length
      case 'T': case 'B': case 'X': case 0x8b: skip_counted(4); break;    // 4-byte length
      case 'c': line(); line(); break;  // GLOBAL module\nname\n
      case 'I': case 'L': case 'F': case 'S': case 'V': case 'P': line(); break;
      case 'p': case 'g': {
        const size_t start = at;
        line();
        if (at - start > 20) bad("a memo index beyond the pickle's size");
        break;
      }
      default:
        bad(StrCat("unexpected opcode 0x", std::hex, static_cast<int>(op)));
    }
  }
  bad("no STOP opcode");
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
  const auto [pickle_at, pickle_size] = CheckZipRecords(bytes, where);
  if (pickle_size == 0) Fail("tensor file '", where, "' is not a valid archive: no data.pkl record");
  CheckPickle(bytes, pickle_at, pickle_size, where);
  c10::IValue value;
  try {
    caffe2::serialize::PyTorchStreamReader reader(std::make_shared<BoundedReader>(bytes));
    // Storages made here from their records' real sizes: left to itself the unpickler sizes a
    // storage by the element count the pickle declares, whatever the record holds, so a
    // crafted count made tensors that passed the bounds check read past their data (found by
    // tests/fuzz/tensor_archive_fuzz.cc).
    auto storages = std::make_shared<torch::jit::DeserializationStorageContext>();
    for (const std::string& record : reader.getAllRecords()) {
      if (record.rfind("data/", 0) != 0) continue;
      auto [data, size] = reader.getRecord(record);
      storages->addStorage(record.substr(5), c10::Storage(c10::Storage::use_byte_size_t(), size,
                                                          std::move(data), nullptr, false));
    }
    value = torch::jit::readArchiveAndTensors("data", /*pickle_prefix=*/"", /*tensor_prefix=*/"",
                                              c10::nullopt, c10::nullopt, c10::nullopt, reader,
                                              torch::jit::Unpickler::defaultTypeParser, storages);
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
