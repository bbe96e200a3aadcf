#include "tzrec/data/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"

namespace tzrec {
namespace {

struct DtypeInfo {
  SafetensorsDtype dtype;
  const char* name;
  size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {SafetensorsDtype::kF64, "F64", 8},  {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF16, "F16", 2},  {SafetensorsDtype::kBF16, "BF16", 2},
    {SafetensorsDtype::kI64, "I64", 8},  {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kI16, "I16", 2},  {SafetensorsDtype::kI8, "I8", 1},
    {SafetensorsDtype::kU8, "U8", 1},    {SafetensorsDtype::kBool, "BOOL", 1},
};

const DtypeInfo& Info(SafetensorsDtype dtype) {
  for (const auto& info : kDtypes) {
    if (info.dtype == dtype) return info;
  }
  Fail("internal: unknown safetensors dtype ", static_cast<int>(dtype));
}

// The format's own cap on the header (Hugging Face's reader refuses larger ones).
constexpr uint64_t kMaxHeaderBytes = 100 << 20;

// product(shape) * element size, or false on a negative dimension or overflow.
bool ByteCount(const std::vector<int64_t>& shape, size_t element_size, uint64_t* bytes) {
  uint64_t count = element_size;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) return false;
    count *= static_cast<uint64_t>(d);
  }
  *bytes = count;
  return true;
}

}  // namespace

const char* SafetensorsDtypeName(SafetensorsDtype dtype) { return Info(dtype).name; }
size_t SafetensorsDtypeSize(SafetensorsDtype dtype) { return Info(dtype).size; }

bool ParseSafetensorsDtype(const std::string& name, SafetensorsDtype* dtype) {
  for (const auto& info : kDtypes) {
    if (name == info.name) {
      *dtype = info.dtype;
      return true;
    }
  }
  return false;
}

void WriteSafetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsTensor*> order;
  std::set<std::string> names;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__") Fail(path, ": tensor name '", t.name, "' is not allowed");
    if (!names.insert(t.name).second) Fail(path, ": tensor '", t.name, "' given twice");
    uint64_t bytes = 0;
    if (!ByteCount(t.shape, SafetensorsDtypeSize(t.dtype), &bytes) || bytes != t.bytes) {
      Fail(path, ": tensor '", t.name, "' has ", t.bytes, " bytes, which does not match its shape and ",
           SafetensorsDtypeName(t.dtype));
    }
    if (t.bytes > 0 && t.data == nullptr) Fail(path, ": tensor '", t.name, "' has no data");
    order.push_back(&t);
  }
  // Largest elements first: every tensor then starts at a multiple of its element size.
  std::stable_sort(order.begin(), order.end(), [](const SafetensorsTensor* a, const SafetensorsTensor* b) {
    const size_t sa = SafetensorsDtypeSize(a->dtype), sb = SafetensorsDtypeSize(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = meta;
  }
  uint64_t offset = 0;
  for (const SafetensorsTensor* t : order) {
    header[t->name] = {{"dtype", SafetensorsDtypeName(t->dtype)},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->bytes}}};
    offset += t->bytes;
  }
  std::string text = header.dump();
  // Padded with spaces (valid JSON) so the data starts 8-byte aligned.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  std::vector<std::pair<const char*, size_t>> pieces = {{reinterpret_cast<const char*>(length), 8},
                                                        {text.data(), text.size()}};
  for (const SafetensorsTensor* t : order) pieces.emplace_back(static_cast<const char*>(t->data), t->bytes);
  WriteFileAtomic(path, pieces);
}

SafetensorsFile SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Fail("cannot open safetensors file '", path, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    Fail("safetensors file '", path, "' is not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    Fail("safetensors file '", path, "' is ", size, " bytes: too short for its header length");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (map == MAP_FAILED) Fail("cannot map safetensors file '", path, "': ", std::strerror(map_errno));
  file.mapping_ = std::shared_ptr<const void>(map, [size](const void* p) { ::munmap(const_cast<void*>(p), size); });
  const auto* bytes = static_cast<const unsigned char*>(map);

  uint64_t header_size = 0;
  for (int i = 0; i < 8; ++i) header_size |= static_cast<uint64_t>(bytes[i]) << (8 * i);
  if (header_size > kMaxHeaderBytes || header_size > size - 8) {
    Fail("safetensors file '", path, "': header of ", header_size, " bytes does not fit the file's ", size,
         " bytes (or the format's ", kMaxHeaderBytes, "-byte limit)");
  }
  const char* header_begin = reinterpret_cast<const char*>(bytes + 8);
  nlohmann::json header = nlohmann::json::parse(header_begin, header_begin + header_size, nullptr, false);
  if (header.is_discarded() || !header.is_object()) {
    Fail("safetensors file '", path, "': the header is not a JSON object");
  }
  const uint64_t data_size = size - 8 - header_size;
  const unsigned char* data = bytes + 8 + header_size;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& value = it.value();
    if (name == "__metadata__") {
      if (!value.is_object()) Fail("safetensors file '", path, "': __metadata__ is not an object");
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (!m.value().is_string()) Fail("safetensors file '", path, "': __metadata__.", m.key(), " is not a string");
        file.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& why) {
      Fail("safetensors file '", path, "': tensor '", name, "': ", why);
    };
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
        !value.contains("data_offsets")) {
      bad("needs dtype, shape and data_offsets");
    }
    SafetensorsTensor tensor;
    tensor.name = name;
    if (!value["dtype"].is_string() || !ParseSafetensorsDtype(value["dtype"].get<std::string>(), &tensor.dtype)) {
      bad("dtype " + value["dtype"].dump() + " is not one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL");
    }
    if (!value["shape"].is_array()) bad("shape is not an array");
    for (const auto& d : value["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) bad("shape " + value["shape"].dump() + " is not a list of sizes");
      tensor.shape.push_back(d.get<int64_t>());
    }
    const auto& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
        !offsets[1].is_number_unsigned()) {
      bad("data_offsets " + offsets.dump() + " is not [begin, end]");
    }
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "] outside the " +
          std::to_string(data_size) + " data bytes");
    }
    uint64_t want = 0;
    if (!ByteCount(tensor.shape, SafetensorsDtypeSize(tensor.dtype), &want) || want != end - begin) {
      bad("its " + std::to_string(end - begin) + " bytes do not match shape " + value["shape"].dump() + " of " +
          SafetensorsDtypeName(tensor.dtype));
    }
    tensor.data = data + begin;
    tensor.bytes = end - begin;
    ranges.emplace_back(begin, end);
    file.tensors_.emplace(name, std::move(tensor));
  }
  // Every data byte belongs to exactly one tensor: no overlaps, no holes, nothing after.
  std::sort(ranges.begin(), ranges.end());
  uint64_t covered = 0;
  for (const auto& [begin, end] : ranges) {
    if (begin != covered) {
      Fail("safetensors file '", path, "': data bytes ", std::min(begin, covered), " to ", std::max(begin, covered),
           begin < covered ? " belong to two tensors" : " belong to no tensor");
    }
    covered = end;
  }
  if (covered != data_size) {
    Fail("safetensors file '", path, "': ", data_size - covered, " data bytes after the last tensor");
  }
  return file;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, tensor] : tensors_) out.push_back(name);
  return out;
}

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const SafetensorsTensor& SafetensorsFile::Get(const std::string& name) const {
  const SafetensorsTensor* tensor = Find(name);
  if (tensor == nullptr) Fail("safetensors file '", path_, "' has no tensor '", name, "'");
  return *tensor;
}

}  // namespace tzrec
