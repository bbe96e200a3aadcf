// libFuzzer target for the checkpoint tensor-archive reader (train/tensor_archive.h): any bytes
// must either parse into tensors that lie inside their storages or fail with tzrec::Error;
// crashes, sanitizer reports and other exceptions are bugs. Every element of every tensor is
// read by instrumented code here, so a record that ValidateTensorStorage let through with an
// offset, size or stride reaching outside its storage trips AddressSanitizer.
//
// Built and run by tests/fuzz/run_tensor_archive_fuzz.sh; not part of the CMake build. With
// MAKE_SEEDS=<dir> in the environment it writes its seed archives there and exits.
#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tzrec/common/error.h"
#include "tzrec/train/tensor_archive.h"

namespace {

// Sum of every byte of every element, walked by sizes and strides.
uint64_t TouchAll(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  const auto* base = static_cast<const uint8_t*>(t.storage().data()) + t.storage_offset() * t.element_size();
  const int64_t item = static_cast<int64_t>(t.element_size());
  std::vector<int64_t> index(t.dim(), 0);
  uint64_t sum = 0;
  while (true) {
    int64_t offset = 0;
    for (int64_t d = 0; d < t.dim(); ++d) offset += index[d] * t.strides()[d];
    for (int64_t b = 0; b < item; ++b) sum += base[offset * item + b];
    int64_t d = t.dim() - 1;
    for (; d >= 0; --d) {
      if (++index[d] < t.sizes()[d]) break;
      index[d] = 0;
    }
    if (d < 0) return sum;
  }
}

void WriteSeeds(const std::string& dir) {
  auto save = [&](const std::string& name, const c10::Dict<std::string, at::Tensor>& dict) {
    std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(dict));
    FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
    if (!f) std::abort();
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  };
  c10::Dict<std::string, at::Tensor> dense;
  dense.insert("weight", at::arange(12, at::kFloat).reshape({3, 4}));
  dense.insert("bias", at::ones({4}));
  save("dense.pt", dense);
  c10::Dict<std::string, at::Tensor> state;
  state.insert("rng_state", at::zeros({5056}, at::kByte));
  state.insert("step", at::scalar_tensor(7, at::kLong));
  save("state.pt", state);
  c10::Dict<std::string, at::Tensor> view;
  view.insert("t", at::arange(20, at::kFloat).reshape({4, 5}).narrow(1, 1, 3));  // strided view
  save("view.pt", view);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("MAKE_SEEDS")) {
    WriteSeeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    auto tensors = tzrec::ParseTensorArchive(bytes, "fuzz.pt");
    uint64_t sum = 0;
    for (const auto& [name, tensor] : tensors) {
      // Bound the work: a valid record may describe a large broadcast view of small storage.
      if (tensor.numel() <= (1 << 20)) sum += TouchAll(tensor);
    }
    if (sum == 0xdeadbeefcafeULL) std::printf("unlikely\n");
  } catch (const tzrec::Error&) {
  }
  return 0;
}
