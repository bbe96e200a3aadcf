// The safetensors writer and reader: round trips of every dtype with metadata and alignment,
// every way a header can lie (each rejected naming file and tensor, never read past the
// mapping), every truncation of a valid file, and files exchanged with Python (stdlib only).
#include "tzrec/data/safetensors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "test_util.h"
#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"

namespace tzrec {
namespace {

std::string RawFile(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  return out + header + data;
}

std::string OpenError(const std::string& path) {
  try {
    SafetensorsFile::Open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripsEveryDtypeWithMetadataAndAlignment) {
  testing::TempDir dir;
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
  std::vector<int64_t> i64 = {1, -2, int64_t{1} << 40, 7};
  std::vector<uint8_t> u8 = {0, 1, 2, 254, 255};
  std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x0001};
  std::vector<double> f64 = {3.141592653589793};
  std::vector<int32_t> i32 = {-5, 6, 7};
  const std::vector<SafetensorsTensor> tensors = {
      {"emb.scale", SafetensorsDtype::kF16, {3}, f16.data(), 6},
      {"emb.values", SafetensorsDtype::kU8, {5}, u8.data(), 5},
      {"dense.weight", SafetensorsDtype::kF32, {2, 3}, f32.data(), 24},
      {"ids", SafetensorsDtype::kI64, {4}, i64.data(), 32},
      {"empty", SafetensorsDtype::kF32, {0, 4}, nullptr, 0},
      {"pi", SafetensorsDtype::kF64, {}, f64.data(), 8},
      {"counts", SafetensorsDtype::kI32, {3}, i32.data(), 12},
  };
  const std::string path = dir.File("w.safetensors");
  WriteSafetensors(path, tensors, {{"format", "tzrec"}, {"step", "19"}});
  auto file = SafetensorsFile::Open(path);
  EXPECT_EQ(file.metadata().at("format"), "tzrec");
  EXPECT_EQ(file.metadata().at("step"), "19");
  const std::vector<std::string> names = {"counts", "dense.weight", "emb.scale", "emb.values", "empty", "ids", "pi"};
  EXPECT_EQ(file.names(), names);
  for (const auto& want : tensors) {
    SCOPED_TRACE(want.name);
    const SafetensorsTensor& got = file.Get(want.name);
    EXPECT_EQ(got.dtype, want.dtype);
    EXPECT_EQ(got.shape, want.shape);
    ASSERT_EQ(got.bytes, want.bytes);
    if (want.bytes > 0) EXPECT_EQ(std::memcmp(got.data, want.data, want.bytes), 0);
    // Readable in place: every tensor starts at a multiple of its element size.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(got.data) % SafetensorsDtypeSize(want.dtype), 0u);
  }
  EXPECT_EQ(file.Find("missing"), nullptr);
  EXPECT_THROW(file.Get("missing"), Error);
  // The view outlives the SafetensorsFile it came from when a copy holds the mapping.
  const SafetensorsTensor* pi = nullptr;
  SafetensorsFile copy = file;
  pi = copy.Find("pi");
  file = SafetensorsFile::Open(path);
  EXPECT_EQ(*static_cast<const double*>(pi->data), f64[0]);
}

TEST(Safetensors, WriterRejectsInconsistentTensors) {
  testing::TempDir dir;
  std::vector<float> v(6);
  auto fails = [&](const std::vector<SafetensorsTensor>& tensors, const std::string& part) {
    try {
      WriteSafetensors(dir.File("x.safetensors"), tensors);
      ADD_FAILURE() << "expected an error containing " << part;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
    EXPECT_FALSE(PathExists(dir.File("x.safetensors")));
  };
  fails({{"a", SafetensorsDtype::kF32, {2, 3}, v.data(), 20}}, "tensor 'a' has 20 bytes");
  fails({{"a", SafetensorsDtype::kF32, {-1, 3}, v.data(), 24}}, "tensor 'a' has 24 bytes");
  fails({{"a", SafetensorsDtype::kF32, {6}, v.data(), 24}, {"a", SafetensorsDtype::kF32, {6}, v.data(), 24}},
        "tensor 'a' given twice");
  fails({{"__metadata__", SafetensorsDtype::kF32, {6}, v.data(), 24}}, "is not allowed");
}

TEST(Safetensors, LyingHeadersAreRejectedNamingTheTensor) {
  testing::TempDir dir;
  const std::string data(16, '\x01');
  struct Case {
    std::string header, data, error;
  };
  const std::vector<Case> cases = {
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       std::string(12, 'x'), "belong to two tensors"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
       data, "belong to no tensor"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data, "8 data bytes after the last tensor"},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, 'x'), "tensor 'a': its 8 bytes do not match shape [3]"},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, 'x'), "tensor 'a': data_offsets [0, 16] outside"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", std::string(8, 'x'), "tensor 'a': data_offsets [8, 0]"},
      {R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", std::string(8, 'x'), "tensor 'a': dtype \"Q4\""},
      {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", std::string(8, 'x'), "tensor 'a': shape [-2]"},
      {R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", std::string(8, 'x'),
       "tensor 'a': its 8 bytes do not match"},
      {R"({"a":{"dtype":"F32","shape":[2]}})", std::string(8, 'x'), "tensor 'a': needs dtype, shape and data_offsets"},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", std::string(8, 'x'), "is not [begin, end]"},
      {R"({"__metadata__":{"k":1}})", "", "__metadata__.k is not a string"},
      {R"([1,2])", "", "the header is not a JSON object"},
      {R"({"a":)", "", "the header is not a JSON object"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    const std::string path = dir.File("bad.safetensors");
    WriteFileAtomic(path, RawFile(c.header, c.data));
    const std::string error = OpenError(path);
    EXPECT_NE(error.find(c.error), std::string::npos) << error;
    EXPECT_NE(error.find(path), std::string::npos) << error;
  }
  // A header length larger than the file.
  std::string huge = RawFile("{}", "");
  huge[5] = 1;
  WriteFileAtomic(dir.File("huge.safetensors"), huge);
  EXPECT_NE(OpenError(dir.File("huge.safetensors")).find("does not fit the file"), std::string::npos);
  WriteFileAtomic(dir.File("short.safetensors"), std::string("\x02\0\0", 3));
  EXPECT_NE(OpenError(dir.File("short.safetensors")).find("too short"), std::string::npos);
  MakeDirs(dir.File("adir"));
  EXPECT_NE(OpenError(dir.File("adir")).find("not a regular file"), std::string::npos);
}

// Every proper prefix of a valid file fails cleanly (a file cut short by a crash or a copy).
TEST(Safetensors, EveryTruncationFailsCleanly) {
  testing::TempDir dir;
  std::vector<float> a(10, 2.0f);
  std::vector<int64_t> b(3, 9);
  const std::string path = dir.File("full.safetensors");
  WriteSafetensors(path, {{"a", SafetensorsDtype::kF32, {10}, a.data(), 40}, {"b", SafetensorsDtype::kI64, {3}, b.data(), 24}},
                   {{"k", "v"}});
  const std::string full = ReadFileToString(path);
  for (size_t n = 0; n < full.size(); ++n) {
    WriteFileAtomic(dir.File("cut.safetensors"), full.substr(0, n));
    EXPECT_FALSE(OpenError(dir.File("cut.safetensors")).empty()) << n;
  }
}

// Python reads our file and writes one we read, with nothing beyond its standard library
// (struct + json), as a user without the safetensors package would.
TEST(Safetensors, FilesAreExchangedWithPython) {
  if (std::system("python3 -c 'import json, struct' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "python3 is not installed; the Python exchange is not checked";
  }
  testing::TempDir dir;
  std::vector<float> w = {1.0f, 2.5f, -3.0f, 4.0f};
  std::vector<int64_t> ids = {5, 6, 7};
  WriteSafetensors(dir.File("ours.safetensors"),
                   {{"w", SafetensorsDtype::kF32, {2, 2}, w.data(), 16}, {"ids", SafetensorsDtype::kI64, {3}, ids.data(), 24}},
                   {{"model", "deepfm"}});
  const std::string script = dir.File("x.py");
  WriteFileAtomic(script, R"(import json, struct, sys
src, dst = sys.argv[1], sys.argv[2]
raw = open(src, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
base = 8 + n
def get(name, fmt):
    b, e = h[name]["data_offsets"]
    return struct.unpack("<%d%s" % ((e - b) // struct.calcsize(fmt), fmt), raw[base + b:base + e])
print(h["__metadata__"]["model"], h["w"]["shape"], sum(get("w", "f")), sum(get("ids", "q")))
data = struct.pack("<3d", 0.5, 0.25, 0.125) + struct.pack("<2h", -3, 4)
header = json.dumps({"__metadata__": {"by": "python"},
                     "x": {"dtype": "F64", "shape": [3], "data_offsets": [0, 24]},
                     "y": {"dtype": "I16", "shape": [1, 2], "data_offsets": [24, 28]}}).encode()
open(dst, "wb").write(struct.pack("<Q", len(header)) + header + data)
)");
  const std::string out = dir.File("out.txt");
  ASSERT_EQ(std::system(("python3 " + script + " " + dir.File("ours.safetensors") + " " + dir.File("theirs.safetensors") +
                         " > " + out + " 2>&1").c_str()),
            0)
      << ReadFileToString(out);
  EXPECT_EQ(ReadFileToString(out), "deepfm [2, 2] 4.5 18\n");
  auto theirs = SafetensorsFile::Open(dir.File("theirs.safetensors"));
  EXPECT_EQ(theirs.metadata().at("by"), "python");
  const auto& x = theirs.Get("x");
  EXPECT_EQ(x.dtype, SafetensorsDtype::kF64);
  double xs[3];
  std::memcpy(xs, x.data, 24);
  EXPECT_EQ(xs[0] + xs[1] + xs[2], 0.875);
  const auto& y = theirs.Get("y");
  EXPECT_EQ(y.shape, (std::vector<int64_t>{1, 2}));
  int16_t ys[2];
  std::memcpy(ys, y.data, 4);
  EXPECT_EQ(ys[0], -3);
  EXPECT_EQ(ys[1], 4);
}

}  // namespace
}  // namespace tzrec
