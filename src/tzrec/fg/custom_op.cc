#include "tzrec/fg/custom_op.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cctype>
#include <climits>
#include <cstdlib>
#include <mutex>

#include <google/protobuf/util/json_util.h>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"
#include "tzrec/fg/expression.h"  // complete type for Normalizer's members
#include "tzrec/fg/normalizer.h"
#include "tzrec/fg/tzrec_fg_custom_op.h"
#include "tzrec/protos/feature.pb.h"

namespace tzrec::fg {
namespace {

constexpr char kBuiltinLibraryFile[] = "libtzrec_fg_builtin_ops.so";

// TorchEasyRec's official pyfg operator libraries and the built-in operator each stands for.
// Those libraries speak pyfg's C++ plugin interface, not our C ABI, so they are never loaded.
struct PyfgLibrary {
  const char* file;
  const char* op;
};
constexpr PyfgLibrary kPyfgLibraries[] = {
    {"libedit_distance.so", "EditDistance"},
    {"libseq_expr.so", "SeqExpr"},
    {"libregex_replace.so", "RegexReplace"},
};

bool IsHex(std::string_view text) {
  for (char c : text) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// The pyfg library a configured path names: "pyfg/lib/<file>" (also under a directory), or
// TorchEasyRec's asset copy "<stem>_<md5>.so" (create_fg_json / export rename assets so).
const PyfgLibrary* PyfgLibraryOf(const std::string& path) {
  const std::string base = path.substr(path.rfind('/') + 1);
  for (const PyfgLibrary& lib : kPyfgLibraries) {
    const std::string file = lib.file;
    if (path == "pyfg/lib/" + file || EndsWith(path, "/pyfg/lib/" + file)) return &lib;
    const std::string stem = file.substr(0, file.size() - 3);
    if (base.size() == stem.size() + 1 + 32 + 3 && StartsWith(base, stem + "_") && EndsWith(base, ".so") &&
        IsHex(std::string_view(base).substr(stem.size() + 1, 32))) {
      return &lib;
    }
  }
  return nullptr;
}

// Where the built-in operator library is: $TZREC_FG_BUILTIN_OPS, else next to this program.
std::string BuiltinOpsPath() {
  if (const char* env = std::getenv("TZREC_FG_BUILTIN_OPS"); env && *env) return env;
  char buffer[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0) return kBuiltinLibraryFile;
  std::string exe(buffer, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/') + 1) + kBuiltinLibraryFile;
}

// What the output callbacks write into during one compute call.
struct OutputContext {
  OpValues* values;
  int32_t kind;
  std::string error;
  const char* wrong_call = nullptr;  // a callback the declared kind does not allow
};

extern "C" {
static void AppendNumber(void* context, double value) {
  auto* ctx = static_cast<OutputContext*>(context);
  if (ctx->kind != TZREC_FG_OUTPUT_NUMBERS) {
    ctx->wrong_call = "append_number";
    return;
  }
  ctx->values->numbers.push_back(value);
}
static void AppendText(void* context, const char* data, size_t size) {
  auto* ctx = static_cast<OutputContext*>(context);
  if (ctx->kind != TZREC_FG_OUTPUT_TEXTS) {
    ctx->wrong_call = "append_text";
    return;
  }
  ctx->values->texts.emplace_back(data, size);
}
static void SetError(void* context, const char* message, size_t size) {
  static_cast<OutputContext*>(context)->error.assign(message, size);
}
}  // extern "C"

class CustomOp : public FeatureOp {
 public:
  explicit CustomOp(const FeatureInfo& info) {
    const auto& config = static_cast<const protos::CustomFeature&>(*info.config);
    const std::string& configured = config.operator_lib_file();
    name_ = config.operator_name();
    const std::string where = StrCat(info.config_path, ": operator '", name_, "' of '", configured, "'");
    if (name_.empty()) Fail(info.config_path, ".operator_name must be set");
    if (configured.empty()) Fail(info.config_path, ".operator_lib_file must be set");

    std::string path = configured;
    if (const PyfgLibrary* pyfg = PyfgLibraryOf(configured)) {
      if (name_ != pyfg->op) {
        Fail(where, ": TorchEasyRec's ", pyfg->file, " holds operator ", pyfg->op, ", not '", name_, "'");
      }
      path = BuiltinOpsPath();
    } else if (StartsWith(configured, "pyfg/lib/")) {
      std::vector<std::string> known;
      for (const PyfgLibrary& lib : kPyfgLibraries) known.push_back(StrCat("pyfg/lib/", lib.file));
      Fail(where, ": not one of the pyfg operator libraries tzrec provides (", Join(known, ", "), ")");
    } else if (config.has_asset_dir() && !config.asset_dir().empty() && path[0] != '/') {
      path = config.asset_dir() + "/" + path;
    }
    const std::string lib_where = path == configured ? where : StrCat(where, " (", path, ")");

    handle_.reset(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL));
    if (!handle_) {
      const char* reason = dlerror();
      std::string hint;
      if (path != configured && PyfgLibraryOf(configured)) {
        hint = StrCat("; the built-in operator library is built by target tzrec_fg_builtin_ops next to "
                      "the tzrec binary (or set TZREC_FG_BUILTIN_OPS to its path)");
      }
      Fail(lib_where, ": cannot load the library: ", reason ? reason : "unknown error", hint);
    }
    auto abi_version = Symbol<tzrec_fg_op_abi_version_fn>("tzrec_fg_op_abi_version", lib_where);
    const uint32_t version = abi_version();
    if (version != TZREC_FG_OP_ABI_VERSION) {
      Fail(lib_where, ": the library implements custom-op ABI version ", version, ", this tzrec speaks version ",
           TZREC_FG_OP_ABI_VERSION, " (rebuild it against src/tzrec/fg/tzrec_fg_custom_op.h)");
    }
    auto create = Symbol<tzrec_fg_op_create_fn>("tzrec_fg_op_create", lib_where);
    auto output_kind = Symbol<tzrec_fg_op_output_kind_fn>("tzrec_fg_op_output_kind", lib_where);
    compute_ = Symbol<tzrec_fg_op_compute_fn>("tzrec_fg_op_compute", lib_where);
    destroy_ = Symbol<tzrec_fg_op_destroy_fn>("tzrec_fg_op_destroy", lib_where);

    std::string params = "{}";
    if (config.has_operator_params()) {
      params.clear();
      auto status = google::protobuf::util::MessageToJsonString(config.operator_params(), &params);
      if (!status.ok()) Fail(info.config_path, ".operator_params: ", status.ToString());
    }
    std::vector<const char*> input_names;
    for (const FeatureInput& input : info.inputs) input_names.push_back(input.name.c_str());
    char error[1024] = {0};
    op_ = OpPtr(create(name_.c_str(), params.c_str(), input_names.data(), input_names.size(), error,
                       sizeof(error)),
                OpDeleter{destroy_});
    error[sizeof(error) - 1] = '\0';
    if (!op_) {
      Fail(lib_where, ": cannot create the operator with operator_params ", params, ": ",
           error[0] ? error : "no reason given");
    }
    const int32_t kind = output_kind(op_.get());
    if (kind != TZREC_FG_OUTPUT_NUMBERS && kind != TZREC_FG_OUTPUT_TEXTS) {
      Fail(lib_where, ": tzrec_fg_op_output_kind returned ", kind, ", not TZREC_FG_OUTPUT_NUMBERS (",
           TZREC_FG_OUTPUT_NUMBERS, ") or TZREC_FG_OUTPUT_TEXTS (", TZREC_FG_OUTPUT_TEXTS, ")");
    }
    kind_ = kind;
    thread_safe_ = config.is_op_thread_safe();
    if (kind_ == TZREC_FG_OUTPUT_NUMBERS) {
      normalizer_ = Normalizer(config.normalizer(), info.config_path + ".normalizer");
    }
  }

  OpValues::Kind kind() const override {
    return kind_ == TZREC_FG_OUTPUT_NUMBERS ? OpValues::Kind::kNumbers : OpValues::Kind::kTexts;
  }

  bool Compute(const std::vector<InputItems>& in, OpValues* out, std::string* error) const override {
    // Flattened items of all inputs, then one tzrec_fg_input per input pointing into them.
    thread_local std::vector<tzrec_fg_string> items;
    thread_local std::vector<tzrec_fg_input> inputs;
    items.clear();
    inputs.resize(in.size());
    for (const InputItems& input : in) {
      for (std::string_view item : input.items) items.push_back({item.data(), item.size()});
    }
    size_t offset = 0;
    for (size_t k = 0; k < in.size(); ++k) {
      tzrec_fg_input& input = inputs[k];
      input.missing = in[k].missing ? 1 : 0;
      input.text = {in[k].text.data(), in[k].missing ? 0 : in[k].text.size()};
      input.items = items.data() + offset;
      input.num_items = in[k].items.size();
      offset += input.num_items;
    }
    OutputContext context{out, kind_, {}, nullptr};
    const tzrec_fg_output output{&context, AppendNumber, AppendText, SetError};
    int32_t rc;
    if (thread_safe_) {
      rc = compute_(op_.get(), inputs.data(), inputs.size(), &output);
    } else {
      std::lock_guard<std::mutex> lock(mutex_);
      rc = compute_(op_.get(), inputs.data(), inputs.size(), &output);
    }
    if (rc != 0) {
      *error = StrCat("operator '", name_, "': ",
                      context.error.empty() ? StrCat("failed with code ", rc) : context.error);
      return false;
    }
    if (context.wrong_call) {
      *error = StrCat("operator '", name_, "' called ", context.wrong_call, " but declared ",
                      kind_ == TZREC_FG_OUTPUT_NUMBERS ? "numbers" : "texts", " output");
      return false;
    }
    if (normalizer_.active()) {
      for (double& v : out->numbers) v = normalizer_.Apply(v);
    }
    return true;
  }

 private:
  template <typename Fn>
  Fn Symbol(const char* symbol, const std::string& where) {
    dlerror();
    void* address = dlsym(handle_.get(), symbol);
    if (!address) {
      Fail(where, ": the library does not export ", symbol,
           " (not a tzrec custom-op library; see src/tzrec/fg/tzrec_fg_custom_op.h)");
    }
    return reinterpret_cast<Fn>(address);
  }

  struct HandleCloser {
    void operator()(void* handle) const { dlclose(handle); }
  };
  struct OpDeleter {
    tzrec_fg_op_destroy_fn destroy;
    void operator()(void* op) const { destroy(op); }
  };
  using OpPtr = std::unique_ptr<void, OpDeleter>;

  std::string name_;
  // Declared before op_: the instance is destroyed before its library is closed.
  std::unique_ptr<void, HandleCloser> handle_;
  tzrec_fg_op_compute_fn compute_ = nullptr;
  tzrec_fg_op_destroy_fn destroy_ = nullptr;
  OpPtr op_{nullptr, OpDeleter{nullptr}};
  int32_t kind_ = TZREC_FG_OUTPUT_NUMBERS;
  bool thread_safe_ = false;
  mutable std::mutex mutex_;  // serialises compute when the op is not thread-safe
  Normalizer normalizer_;
};

}  // namespace

std::unique_ptr<FeatureOp> CreateCustomOp(const FeatureInfo& info) {
  return std::make_unique<CustomOp>(info);
}

}  // namespace tzrec::fg
