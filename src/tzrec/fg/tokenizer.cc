// Tokenizer::Load and the SentencePiece tokenizer; tokenizer.json lives in hf_tokenizer.cc.
//
// Why SentencePiece is opened with dlopen: Debian 12's libsentencepiece0 is built with its own
// copy of protobuf-lite 3.14 and exports those symbols. In a process that also has libprotobuf
// 3.21 (our config loader), the dynamic linker binds every protobuf call to whichever library
// it finds first, so loading a model aborts with "compiled against version 3.14.0 ... not
// compatible with the installed version (3.21.12)" (or our own protobuf code breaks, in the
// other link order). Opened with RTLD_LOCAL | RTLD_DEEPBIND, the library resolves its protobuf
// symbols to its own copy and stays out of everyone else's way. It must therefore not be linked
// into the binary; sentencepiece_processor.h is still used for the class layouts and the inline
// Status::ok().
//
// The library's C++ entry points are called through dlsym'ed addresses with the Itanium C++
// ABI's calling convention: `this` is the first argument, and a class returned by value (Status,
// std::string) is written through a hidden pointer passed before `this`.
#include "tzrec/fg/tokenizer.h"

#include <dlfcn.h>
#include <sentencepiece_processor.h>

#include <mutex>
#include <string_view>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/fg/hf_tokenizer.h"

namespace tzrec::fg {

namespace {

constexpr const char* kSentencePieceLibrary = "libsentencepiece.so.0";

using SpmProcessor = sentencepiece::SentencePieceProcessor;
using SpmStatus = sentencepiece::util::Status;

// The entry points of libsentencepiece.so.0 we call, resolved once per process.
struct SentencePieceLibrary {
  void (*construct)(void* self);
  void (*destruct)(void* self);
  void (*load)(void* status, void* self, std::string_view path);
  void (*encode)(void* status, const void* self, std::string_view text, std::vector<int>* ids);
  int (*piece_size)(const void* self);
  void (*status_destruct)(void* status);
  void (*status_to_string)(std::string* out, const void* status);
};

template <typename Fn>
void Resolve(void* handle, const char* symbol, Fn* fn) {
  void* address = dlsym(handle, symbol);
  if (address == nullptr) Fail(kSentencePieceLibrary, " has no symbol ", symbol);
  *fn = reinterpret_cast<Fn>(address);
}

// Whether `symbol`, looked up the way the process resolves it, comes from the object that
// defines `anchor` (an address inside libsentencepiece).
bool GlobalSymbolIsFrom(const char* symbol, void* anchor) {
  void* global = dlsym(RTLD_DEFAULT, symbol);
  Dl_info global_info{}, anchor_info{};
  if (global == nullptr || dladdr(global, &global_info) == 0 || dladdr(anchor, &anchor_info) == 0) {
    return false;
  }
  return global_info.dli_fbase == anchor_info.dli_fbase;
}

const SentencePieceLibrary& LoadSentencePieceLibrary() {
  static std::mutex mu;
  static SentencePieceLibrary library{};
  static bool loaded = false;
  std::lock_guard<std::mutex> lock(mu);
  if (loaded) return library;
  // Already in the process before we open it: it was linked in (or opened by someone else),
  // and its protobuf calls may already be bound to libprotobuf's.
  void* existing = dlopen(kSentencePieceLibrary, RTLD_NOW | RTLD_NOLOAD);
  void* handle = existing != nullptr
                     ? existing
                     : dlopen(kSentencePieceLibrary, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (handle == nullptr) {
    Fail("cannot open ", kSentencePieceLibrary, " (Debian package libsentencepiece0): ", dlerror());
  }
  SentencePieceLibrary lib{};
  Resolve(handle, "_ZN13sentencepiece22SentencePieceProcessorC1Ev", &lib.construct);
  Resolve(handle, "_ZN13sentencepiece22SentencePieceProcessorD1Ev", &lib.destruct);
  Resolve(
      handle,
      "_ZN13sentencepiece22SentencePieceProcessor4LoadESt17basic_string_viewIcSt11char_traitsIcEE",
      &lib.load);
  Resolve(handle,
          "_ZNK13sentencepiece22SentencePieceProcessor6EncodeESt17basic_string_viewIcSt11char_"
          "traitsIcEEPSt6vectorIiSaIiEE",
          &lib.encode);
  Resolve(handle, "_ZNK13sentencepiece22SentencePieceProcessor12GetPieceSizeEv", &lib.piece_size);
  Resolve(handle, "_ZN13sentencepiece4util6StatusD1Ev", &lib.status_destruct);
  Resolve(handle, "_ZNK13sentencepiece4util6Status8ToStringB5cxx11Ev", &lib.status_to_string);
  if (existing != nullptr) {
    const char* kVerifyVersion = "_ZN6google8protobuf8internal13VerifyVersionEiiPKc";
    if (!GlobalSymbolIsFrom(kVerifyVersion, reinterpret_cast<void*>(lib.construct)) &&
        dlsym(RTLD_DEFAULT, kVerifyVersion) != nullptr) {
      dlclose(existing);
      Fail(kSentencePieceLibrary,
           " is linked into this program next to another protobuf runtime, so SentencePiece "
           "models cannot be loaded: link the program without -lsentencepiece (it is opened "
           "with dlopen; see src/tzrec/fg/tokenizer.cc)");
    }
  }
  library = lib;
  loaded = true;
  return library;
}

// A Status returned by the library, destroyed through the library.
class ScopedStatus {
 public:
  explicit ScopedStatus(const SentencePieceLibrary& lib) : lib_(lib) {}
  ScopedStatus(const ScopedStatus&) = delete;
  ScopedStatus& operator=(const ScopedStatus&) = delete;
  ~ScopedStatus() {
    if (filled_) lib_.status_destruct(storage_);
  }
  void* Fill() {
    filled_ = true;
    return storage_;
  }
  bool ok() const { return reinterpret_cast<const SpmStatus*>(storage_)->ok(); }
  std::string ToString() const {
    std::string out;
    lib_.status_to_string(&out, storage_);
    return out;
  }

 private:
  const SentencePieceLibrary& lib_;
  alignas(SpmStatus) unsigned char storage_[sizeof(SpmStatus)];
  bool filled_ = false;
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& path, const std::string& where) : where_(where) {
    if (!PathExists(path)) Fail(where, ": sentencepiece model '", path, "' not found");
    try {
      lib_ = &LoadSentencePieceLibrary();
    } catch (const Error& e) {
      Fail(where, ": ", e.what());
    }
    lib_->construct(processor_.bytes);
    ScopedStatus status(*lib_);
    lib_->load(status.Fill(), processor_.bytes, path);
    if (!status.ok()) {
      std::string message = status.ToString();
      lib_->destruct(processor_.bytes);
      Fail(where, ": sentencepiece model '", path, "' cannot be loaded: ", message);
    }
    vocab_size_ = lib_->piece_size(processor_.bytes);
  }
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  ~SentencePieceTokenizer() override { lib_->destruct(processor_.bytes); }

  // SentencePieceProcessor::Encode is const and documented thread-safe, so one processor
  // serves all threads.
  void Encode(std::string_view text, std::vector<int64_t>* ids) const override {
    thread_local std::vector<int> pieces;
    pieces.clear();
    ScopedStatus status(*lib_);
    lib_->encode(status.Fill(), processor_.bytes, text, &pieces);
    if (!status.ok()) Fail(where_, ": sentencepiece encode failed: ", status.ToString());
    ids->insert(ids->end(), pieces.begin(), pieces.end());
  }

  int64_t vocab_size() const override { return vocab_size_; }

 private:
  // Raw storage for the library's SentencePieceProcessor, built and destroyed by the library.
  struct alignas(SpmProcessor) ProcessorStorage {
    unsigned char bytes[sizeof(SpmProcessor)];
  };

  const SentencePieceLibrary* lib_ = nullptr;
  std::string where_;
  ProcessorStorage processor_;
  int64_t vocab_size_ = 0;
};

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::Load(const std::string& path, const std::string& type,
                                           const std::string& where) {
  if (IsDirectory(path)) Fail(where, ".vocab_file: '", path, "' is a directory, not a tokenizer file");
  if (type == "bpe") return LoadHfTokenizer(path, where);
  if (type == "sentencepiece") return std::make_unique<SentencePieceTokenizer>(path, where);
  Fail(where, ": unknown tokenizer_type '", type, "' (known: bpe, sentencepiece)");
}

}  // namespace tzrec::fg
