// Formula evaluation for expr_feature and the `expression` normalizer (see expression.h).
//
// Design notes (measured on the 2-core dev VM with Debian's muParser 2.3.3):
// - Scalar Eval() of a compiled muParser formula takes ~10 ns. Debian builds muParser with
//   OpenMP, so its bulk Eval(results, n) opens a parallel region per call (~50 us at n = 1;
//   5M elements/s at n = 64 against 80M/s for a loop of scalar Evals) and calls
//   omp_set_num_threads on the caller's thread, which would disturb LibTorch's pool. Every
//   row, and every element of a multi-value row, therefore goes through scalar Eval().
//   Evaluate() as a whole runs ~40M rows/s on one thread for `u_age == i_age ? 1 : 0`.
// - A muParser parser binds variables by pointer and keeps its bytecode in mutable state, so
//   one parser cannot serve two threads at once. Building one costs ~11 us (copying one
//   too: it re-parses once the variables are rebound), far too much per row, so each thread
//   keeps its own parser per Expression in a thread_local cache. An entry is validated by a
//   weak_ptr to the Expression's Program, so a new Expression allocated at a dead one's
//   address never picks up the dead one's parser; expired entries are swept as the cache
//   grows.
// - Vector functions are not muParser callbacks (those only see scalars). Compile rewrites
//   each call such as `dot(a, b)` into a generated variable `__v0` padded with spaces to the
//   call's length, so muParser's error positions still point into the user's formula, and
//   Evaluate computes the generated variables natively before Eval().
// - muParser's `x = 3` assigns to a variable; in a feature formula it can only be a typo of
//   `==`, so Compile rejects a lone `=`. A top-level comma list (`1, 2`, muParser's multiple
//   results) is rejected too: a formula yields one value per element.
#include "tzrec/fg/expression.h"

#include <muParser.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <unordered_map>
#include <utility>

#include "tzrec/common/error.h"

namespace tzrec::fg {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kPi = 3.14159265358979323846;
constexpr double kDegreesToRadians = kPi / 180.0;
// Mean earth radius; sphere_dist and haversine return kilometres.
constexpr double kEarthRadiusKm = 6371.0;
// Generated variables that stand for vector-function calls: "__v0", "__v1", ...
constexpr char kVectorSlotPrefix[] = "__v";

// ------------------------------------------------------------ scalar functions muParser lacks

double Rnd() {
  // Per thread: a shared engine would be a data race under concurrent Evaluate.
  thread_local std::mt19937_64 engine{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(engine);
}
double Floor(double x) { return std::floor(x); }
double Ceil(double x) { return std::ceil(x); }
double Trunc(double x) { return std::trunc(x); }
// std::round rounds half away from zero, as TorchEasyRec documents (round(-2.5) = -3).
double Round(double x) { return std::round(x); }

double RoundP(double x, double digits) {
  const double d = std::round(digits);
  const double scale = std::pow(10.0, std::fabs(d));
  // Negative digits round to tens, hundreds, ...; dividing by the power of ten (instead of
  // multiplying by 0.01, which is inexact) keeps roundp(1234, -2) exactly 1200.
  const double scaled = d >= 0 ? x * scale : x / scale;
  if (!std::isfinite(scaled)) return x;  // x too large to have `digits` fractional digits
  const double rounded = std::round(scaled);
  return d >= 0 ? rounded / scale : rounded * scale;
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Great-circle distance in km by the spherical law of cosines; arguments in degrees.
double SphereDist(double lng1, double lat1, double lng2, double lat2) {
  const double phi1 = lat1 * kDegreesToRadians;
  const double phi2 = lat2 * kDegreesToRadians;
  const double delta_lambda = (lng2 - lng1) * kDegreesToRadians;
  double cos_angle =
      std::sin(phi1) * std::sin(phi2) + std::cos(phi1) * std::cos(phi2) * std::cos(delta_lambda);
  // Rounding can push the cosine of (nearly) equal points past 1, where acos is NaN.
  cos_angle = std::clamp(cos_angle, -1.0, 1.0);
  return kEarthRadiusKm * std::acos(cos_angle);
}

// Great-circle distance in km by the haversine formula (accurate for short distances too).
double Haversine(double lng1, double lat1, double lng2, double lat2) {
  const double phi1 = lat1 * kDegreesToRadians;
  const double phi2 = lat2 * kDegreesToRadians;
  const double half_delta_phi = (lat2 - lat1) * kDegreesToRadians / 2;
  const double half_delta_lambda = (lng2 - lng1) * kDegreesToRadians / 2;
  const double a =
      std::sin(half_delta_phi) * std::sin(half_delta_phi) +
      std::cos(phi1) * std::cos(phi2) * std::sin(half_delta_lambda) * std::sin(half_delta_lambda);
  return 2 * kEarthRadiusKm * std::asin(std::min(1.0, std::sqrt(a)));
}

// `|` and `&` act on the operands rounded to the nearest integer, as muParser's own integer
// parser (ParserInt) defines them; operands outside int64 (or NaN) give NaN.
bool ToInt64(double v, int64_t* out) {
  if (!(std::fabs(v) < 9.2e18)) return false;
  *out = std::llround(v);
  return true;
}
double BitOr(double a, double b) {
  int64_t x, y;
  if (!ToInt64(a, &x) || !ToInt64(b, &y)) return kNaN;
  return static_cast<double>(x | y);
}
double BitAnd(double a, double b) {
  int64_t x, y;
  if (!ToInt64(a, &x) || !ToInt64(b, &y)) return kNaN;
  return static_cast<double>(x & y);
}

// muParser 2.3.3 already has sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh
// atanh log2 log10 log ln exp sqrt sign rint abs min max sum avg, `&&`, `||`, `?:`, _pi, _e.
void DefineExtraFunctions(mu::Parser* parser) {
  // GCC builds of muParser truncate _pi to 3.141592653589 (for speed of sin(_pi * a), says
  // its source); TorchEasyRec documents the full value.
  parser->DefineConst("_pi", kPi);
  parser->DefineFun("rnd", Rnd, /*a_bAllowOpt=*/false);  // never constant-folded
  parser->DefineFun("floor", Floor);
  parser->DefineFun("ceil", Ceil);
  parser->DefineFun("trunc", Trunc);
  parser->DefineFun("round", Round);
  parser->DefineFun("roundp", RoundP);
  parser->DefineFun("sigmoid", Sigmoid);
  parser->DefineFun("sphere_dist", SphereDist);
  parser->DefineFun("haversine", Haversine);
  // TorchEasyRec documents | above || and && and & above | (both below comparisons), but
  // muParser's built-in levels are ||=1, &&=2, comparisons=4, leaving only level 3 between;
  // ParserInt puts both there too, so `a | b & c` groups left to right.
  parser->DefineOprt("|", BitOr, mu::prLOGIC);
  parser->DefineOprt("&", BitAnd, mu::prLOGIC);
}

// ------------------------------------------------------------ vector functions

enum class VectorOp {
  kLen,
  kL2Norm,
  kSquaredNorm,
  kDot,
  kEuclidDist,
  kStdDev,
  kPopStdDev,
  kVariance,
  kPopVariance,
  kReduceMin,
  kReduceMax,
  kReduceSum,
  kReduceMean,
  kReduceProd,
};

struct VectorFunction {
  const char* name;
  size_t arity;
  VectorOp op;
};

// TorchEasyRec's table; note its std_dev/variance divide by n and the pop_ ones by n - 1.
constexpr VectorFunction kVectorFunctions[] = {
    {"len", 1, VectorOp::kLen},
    {"l2_norm", 1, VectorOp::kL2Norm},
    {"squared_norm", 1, VectorOp::kSquaredNorm},
    {"dot", 2, VectorOp::kDot},
    {"euclid_dist", 2, VectorOp::kEuclidDist},
    {"std_dev", 1, VectorOp::kStdDev},
    {"pop_std_dev", 1, VectorOp::kPopStdDev},
    {"variance", 1, VectorOp::kVariance},
    {"pop_variance", 1, VectorOp::kPopVariance},
    {"reduce_min", 1, VectorOp::kReduceMin},
    {"reduce_max", 1, VectorOp::kReduceMax},
    {"reduce_sum", 1, VectorOp::kReduceSum},
    {"reduce_mean", 1, VectorOp::kReduceMean},
    {"reduce_prod", 1, VectorOp::kReduceProd},
};

const VectorFunction* FindVectorFunction(const std::string& name) {
  for (const VectorFunction& f : kVectorFunctions) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

// One vector-function call of the formula, computed per row into a generated variable.
struct VectorCall {
  const VectorFunction* function;
  std::vector<size_t> args;  // indices into Program::variables
  std::string text;          // the call as written, for error messages
};

double Sum(const ExpressionInput& x) {
  double sum = 0;
  for (size_t i = 0; i < x.size; ++i) sum += x.values[i];
  return sum;
}

double SumOfSquares(const ExpressionInput& x) {
  double sum = 0;
  for (size_t i = 0; i < x.size; ++i) sum += x.values[i] * x.values[i];
  return sum;
}

// Two passes (mean, then squared deviations): the one-pass formula cancels badly for
// features with a large mean and small spread. NaN when n <= ddof (nothing to divide by).
double Variance(const ExpressionInput& x, size_t ddof) {
  if (x.size <= ddof) return kNaN;
  const double mean = Sum(x) / static_cast<double>(x.size);
  double sum = 0;
  for (size_t i = 0; i < x.size; ++i) sum += (x.values[i] - mean) * (x.values[i] - mean);
  return sum / static_cast<double>(x.size - ddof);
}

// ------------------------------------------------------------ compiled program

struct Program {
  std::string where;
  std::string formula;
  std::string rewritten;  // formula with vector calls replaced by generated variables
  std::vector<std::string> variables;
  std::vector<VectorCall> vector_calls;
  // Variables muParser reads directly (outside vector calls), as indices into `variables`.
  std::vector<size_t> scalar_variables;
};

std::string VectorSlotName(size_t k) { return kVectorSlotPrefix + std::to_string(k); }

// Names of the variables, e.g. "a, b", for "unknown variable" messages.
std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out.empty() ? "none" : out;
}

double ApplyVectorCall(const Program& program, const VectorCall& call,
                       const std::vector<ExpressionInput>& inputs) {
  const ExpressionInput& x = inputs[call.args[0]];
  switch (call.function->op) {
    case VectorOp::kLen:
      return static_cast<double>(x.size);
    case VectorOp::kL2Norm:
      return std::sqrt(SumOfSquares(x));
    case VectorOp::kSquaredNorm:
      return SumOfSquares(x);
    case VectorOp::kDot:
    case VectorOp::kEuclidDist: {
      const ExpressionInput& y = inputs[call.args[1]];
      if (x.size != y.size) {
        Fail(program.where, ": ", call.text, " in expression '", program.formula, "': '",
             program.variables[call.args[0]], "' has ", x.size, " values but '",
             program.variables[call.args[1]], "' has ", y.size);
      }
      double sum = 0;
      if (call.function->op == VectorOp::kDot) {
        for (size_t i = 0; i < x.size; ++i) sum += x.values[i] * y.values[i];
        return sum;
      }
      for (size_t i = 0; i < x.size; ++i) {
        const double d = x.values[i] - y.values[i];
        sum += d * d;
      }
      return std::sqrt(sum);
    }
    case VectorOp::kStdDev:
      return std::sqrt(Variance(x, 0));
    case VectorOp::kPopStdDev:
      return std::sqrt(Variance(x, 1));
    case VectorOp::kVariance:
      return Variance(x, 0);
    case VectorOp::kPopVariance:
      return Variance(x, 1);
    case VectorOp::kReduceMin:
      return x.size == 0 ? kNaN : *std::min_element(x.values, x.values + x.size);
    case VectorOp::kReduceMax:
      return x.size == 0 ? kNaN : *std::max_element(x.values, x.values + x.size);
    case VectorOp::kReduceSum:
      return Sum(x);
    case VectorOp::kReduceMean:
      return x.size == 0 ? kNaN : Sum(x) / static_cast<double>(x.size);
    case VectorOp::kReduceProd: {
      double product = 1;
      for (size_t i = 0; i < x.size; ++i) product *= x.values[i];
      return product;
    }
  }
  return kNaN;  // unreachable: the switch covers every VectorOp
}

// ------------------------------------------------------------ formula scanning

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// muParser's identifier rule: letters, digits and '_', not starting with a digit.
bool IsIdentifier(const std::string& s) {
  if (s.empty() || !IsNameStart(s[0])) return false;
  return std::all_of(s.begin(), s.end(), IsNameChar);
}

// "__v" followed by digits only: the names of generated variables.
bool IsReservedName(const std::string& s) {
  const size_t prefix = sizeof(kVectorSlotPrefix) - 1;
  return s.size() > prefix && s.compare(0, prefix, kVectorSlotPrefix) == 0 &&
         std::all_of(s.begin() + prefix, s.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

std::string Trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  const size_t end = s.find_last_not_of(" \t\r\n");
  return s.substr(begin, end - begin + 1);
}

size_t SkipSpaces(const std::string& s, size_t i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

// Replaces the vector calls of program->formula by generated variables (filling
// program->rewritten and program->vector_calls) and rejects assignments.
void RewriteVectorCalls(Program* program) {
  const std::string& f = program->formula;
  const std::string& where = program->where;
  program->rewritten = f;
  size_t i = 0;
  while (i < f.size()) {
    const char c = f[i];
    if (c == '"') {  // muParser string literal: skip it so nothing inside is rewritten
      i = f.find('"', i + 1);
      i = i == std::string::npos ? f.size() : i + 1;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
      // A number: its exponent letter must not start an identifier (`1e3`).
      while (i < f.size() && (std::isdigit(static_cast<unsigned char>(f[i])) || f[i] == '.')) ++i;
      if (i < f.size() && (f[i] == 'e' || f[i] == 'E')) {
        size_t j = i + 1;
        if (j < f.size() && (f[j] == '+' || f[j] == '-')) ++j;
        if (j < f.size() && std::isdigit(static_cast<unsigned char>(f[j]))) {
          i = j;
          while (i < f.size() && std::isdigit(static_cast<unsigned char>(f[i]))) ++i;
        }
      }
      continue;
    }
    if (c == '=') {
      const bool part_of_comparison =
          (i > 0 && std::string("<>!=").find(f[i - 1]) != std::string::npos) ||
          (i + 1 < f.size() && f[i + 1] == '=');
      if (!part_of_comparison) {
        Fail(where, ": invalid expression '", f, "': assignment '=' at position ", i,
             " is not supported (use '==' to compare)");
      }
      ++i;
      continue;
    }
    if (!IsNameStart(c)) {
      ++i;
      continue;
    }
    const size_t start = i;
    while (i < f.size() && IsNameChar(f[i])) ++i;
    const std::string name = f.substr(start, i - start);
    if (IsReservedName(name)) {
      Fail(where, ": unknown variable '", name, "' in expression '", f,
           "' (variables: ", JoinNames(program->variables), ")");
    }
    const size_t open = SkipSpaces(f, i);
    const VectorFunction* function = FindVectorFunction(name);
    if (function == nullptr || open >= f.size() || f[open] != '(') continue;

    // A vector call: split its arguments at top-level commas up to the matching ')'.
    std::vector<std::string> args(1);
    size_t close = open + 1;
    int depth = 0;
    for (; close < f.size(); ++close) {
      const char d = f[close];
      if (d == ')' && depth == 0) break;
      if (d == '(') ++depth;
      if (d == ')') --depth;
      if (d == ',' && depth == 0) {
        args.emplace_back();
      } else {
        args.back() += d;
      }
    }
    if (close >= f.size()) {
      Fail(where, ": invalid expression '", f, "': missing ')' for ", name, "( at position ",
           start);
    }
    for (std::string& arg : args) arg = Trim(arg);
    if (args.size() == 1 && args[0].empty()) args.clear();
    const std::string text = f.substr(start, close + 1 - start);
    if (args.size() != function->arity) {
      Fail(where, ": vector function ", name, " takes ", function->arity, " argument",
           function->arity == 1 ? "" : "s", ", got ", args.size(), " in '", text,
           "' of expression '", f, "'");
    }
    VectorCall call{function, {}, text};
    for (const std::string& arg : args) {
      if (!IsIdentifier(arg)) {
        Fail(where, ": vector function ", name,
             " applies to whole variables and takes variable names as arguments, got '", arg,
             "' in '", text, "' of expression '", f, "'");
      }
      const auto it = std::find(program->variables.begin(), program->variables.end(), arg);
      if (it == program->variables.end()) {
        Fail(where, ": unknown variable '", arg, "' in expression '", f,
             "' (variables: ", JoinNames(program->variables), ")");
      }
      call.args.push_back(static_cast<size_t>(it - program->variables.begin()));
    }
    // Same length as the call, so muParser's positions stay those of the user's formula.
    const std::string slot = VectorSlotName(program->vector_calls.size());
    if (slot.size() > text.size()) {
      Fail(where, ": expression '", f, "' has too many vector function calls");
    }
    program->rewritten.replace(start, text.size(),
                               slot + std::string(text.size() - slot.size(), ' '));
    program->vector_calls.push_back(std::move(call));
    i = close + 1;
  }
}

// ------------------------------------------------------------ per-thread parsers

// One thread's muParser instance for a Program, with the storage its variables are bound to:
// slots [0, variables) hold the inputs, the rest the vector-call results.
class Evaluator {
 public:
  explicit Evaluator(const Program& program)
      : num_variables_(program.variables.size()),
        slots_(program.variables.size() + program.vector_calls.size(), 0.0) {
    DefineExtraFunctions(&parser_);
    for (size_t i = 0; i < num_variables_; ++i) {
      parser_.DefineVar(program.variables[i], &slots_[i]);
    }
    for (size_t k = 0; k < program.vector_calls.size(); ++k) {
      parser_.DefineVar(VectorSlotName(k), &slots_[num_variables_ + k]);
    }
    parser_.SetExpr(program.rewritten);
  }
  Evaluator(const Evaluator&) = delete;
  Evaluator& operator=(const Evaluator&) = delete;

  double* variable_slots() { return slots_.data(); }
  double* vector_slots() { return slots_.data() + num_variables_; }
  double Eval() const { return parser_.Eval(); }
  mu::Parser& parser() { return parser_; }

 private:
  size_t num_variables_;
  std::vector<double> slots_;  // never resized: muParser holds pointers into it
  mu::Parser parser_;
};

// This thread's Evaluators, one per live Program it has evaluated.
class EvaluatorCache {
 public:
  Evaluator* Get(const std::shared_ptr<const Program>& program) {
    const Program* key = program.get();
    // Rows of one feature arrive back to back: skip the hash lookup for a repeat.
    if (key == last_key_ && !last_->owner.expired()) return last_->evaluator.get();
    auto it = entries_.find(key);
    if (it != entries_.end() && it->second.owner.expired()) {
      // A dead Program had this address; its parser reads another formula.
      entries_.erase(it);
      it = entries_.end();
    }
    if (it == entries_.end()) {
      if (entries_.size() >= sweep_at_) Sweep();
      Entry entry{program, std::make_unique<Evaluator>(*program)};
      it = entries_.emplace(key, std::move(entry)).first;
    }
    last_key_ = key;
    last_ = &it->second;
    return last_->evaluator.get();
  }

 private:
  struct Entry {
    std::weak_ptr<const Program> owner;
    std::unique_ptr<Evaluator> evaluator;
  };

  // Drops the parsers of destroyed Expressions; amortised by doubling the trigger size.
  void Sweep() {
    for (auto it = entries_.begin(); it != entries_.end();) {
      it = it->second.owner.expired() ? entries_.erase(it) : std::next(it);
    }
    last_key_ = nullptr;
    last_ = nullptr;
    sweep_at_ = std::max<size_t>(kMinSweepSize, 2 * entries_.size());
  }

  static constexpr size_t kMinSweepSize = 64;
  std::unordered_map<const Program*, Entry> entries_;
  const Program* last_key_ = nullptr;
  Entry* last_ = nullptr;
  size_t sweep_at_ = kMinSweepSize;
};

EvaluatorCache& ThisThreadEvaluators() {
  thread_local EvaluatorCache cache;
  return cache;
}

// ------------------------------------------------------------ errors from muParser

// The identifier that ends right before position `pos` (skipping spaces), or "".
std::string IdentifierBefore(const std::string& s, size_t pos) {
  size_t end = std::min(pos, s.size());
  while (end > 0 && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  size_t begin = end;
  while (begin > 0 && IsNameChar(s[begin - 1])) --begin;
  const std::string name = s.substr(begin, end - begin);
  return IsIdentifier(name) ? name : "";
}

std::string KnownFunctions(const mu::Parser& parser) {
  std::vector<std::string> names;
  for (const auto& [name, callback] : parser.GetFunDef()) names.push_back(name);
  for (const VectorFunction& f : kVectorFunctions) names.push_back(f.name);
  std::sort(names.begin(), names.end());
  return JoinNames(names);
}

[[noreturn]] void FailParse(const Program& program, const mu::Parser& parser,
                            const mu::ParserError& error) {
  const std::string& f = program.formula;
  const std::string token = error.GetToken();
  const int pos = error.GetPos();
  const auto is_variable = [&](const std::string& name) {
    return std::find(program.variables.begin(), program.variables.end(), name) !=
           program.variables.end();
  };
  if (error.GetCode() == mu::ecUNASSIGNABLE_TOKEN && IsIdentifier(token) && pos >= 0) {
    // muParser names any identifier it cannot resolve; a '(' after it makes it a call.
    const size_t next = SkipSpaces(f, static_cast<size_t>(pos) + token.size());
    if (parser.GetFunDef().count(token) || FindVectorFunction(token) != nullptr) {
      Fail(program.where, ": invalid expression '", f, "': function '", token, "' at position ",
           pos, " must be called with arguments, e.g. ", token, "(x)");
    }
    if (next < f.size() && f[next] == '(') {
      Fail(program.where, ": unknown function '", token, "' in expression '", f,
           "' (known: ", KnownFunctions(parser), ")");
    }
    Fail(program.where, ": unknown variable '", token, "' in expression '", f,
         "' (variables: ", JoinNames(program.variables), ")");
  }
  if (error.GetCode() == mu::ecUNEXPECTED_PARENS && token == "(" && pos >= 0) {
    // `x(1)` with x a variable or constant: a call of something that is no function.
    const std::string name = IdentifierBefore(f, static_cast<size_t>(pos));
    if (!name.empty() && !parser.GetFunDef().count(name)) {
      Fail(program.where, ": unknown function '", name, "' in expression '", f, "' ('", name,
           "' is a ", is_variable(name) ? "variable" : "constant",
           "; known functions: ", KnownFunctions(parser), ")");
    }
  }
  std::string message = error.GetMsg();
  // Messages may quote a generated variable; show the call it stands for.
  for (size_t k = program.vector_calls.size(); k-- > 0;) {
    const std::string quoted = "\"" + VectorSlotName(k) + "\"";
    for (size_t at = message.find(quoted); at != std::string::npos; at = message.find(quoted, at)) {
      const std::string replacement = "\"" + program.vector_calls[k].text + "\"";
      message.replace(at, quoted.size(), replacement);
      at += replacement.size();
    }
  }
  std::string position;
  if (pos >= 0 && message.find("position") == std::string::npos) {
    position = StrCat(" (position ", std::min<size_t>(static_cast<size_t>(pos), f.size()), ")");
  }
  Fail(program.where, ": invalid expression '", f, "': ", message, position);
}

// ------------------------------------------------------------ Expression

class CompiledExpression : public Expression {
 public:
  explicit CompiledExpression(std::shared_ptr<const Program> program)
      : program_(std::move(program)) {}

  void Evaluate(const std::vector<ExpressionInput>& inputs,
                std::vector<double>* out) const override {
    const Program& p = *program_;
    if (inputs.size() != p.variables.size()) {
      Fail(p.where, ": expression '", p.formula, "' has ", p.variables.size(),
           " variables but got ", inputs.size(), " inputs");
    }
    Evaluator* evaluator = ThisThreadEvaluators().Get(program_);
    double* slots = evaluator->variable_slots();
    out->clear();

    if (!p.vector_calls.empty()) {
      for (size_t v : p.scalar_variables) {
        const ExpressionInput& in = inputs[v];
        if (in.size == 0) return;  // a missing value yields no value, as element-wise
        if (in.size > 1) {
          Fail(p.where, ": variable '", p.variables[v], "' has ", in.size,
               " values, but in an expression with vector functions ('", p.formula,
               "') variables outside them must be single values");
        }
        slots[v] = in.values[0];
      }
      double* vector_slots = evaluator->vector_slots();
      for (size_t k = 0; k < p.vector_calls.size(); ++k) {
        vector_slots[k] = ApplyVectorCall(p, p.vector_calls[k], inputs);
      }
      out->push_back(evaluator->Eval());
      return;
    }

    // Element-wise: single values broadcast; every other length must agree.
    size_t n = 1;
    const size_t kNone = p.variables.size();
    size_t longest = kNone;  // the first variable with a length other than 1
    for (size_t v : p.scalar_variables) {
      const ExpressionInput& in = inputs[v];
      if (in.size == 1) {
        slots[v] = in.values[0];
      } else if (longest == kNone) {
        longest = v;
        n = in.size;
      } else if (in.size != n) {
        Fail(p.where, ": variables '", p.variables[longest], "' (", n, " values) and '",
             p.variables[v], "' (", in.size, " values) of expression '", p.formula,
             "' have different lengths; element-wise evaluation needs equal lengths or "
             "single values");
      }
    }
    out->resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (longest != kNone) {
        for (size_t v : p.scalar_variables) {
          if (inputs[v].size != 1) slots[v] = inputs[v].values[i];
        }
      }
      (*out)[i] = evaluator->Eval();
    }
  }

 private:
  std::shared_ptr<const Program> program_;
};

}  // namespace

std::unique_ptr<Expression> Expression::Compile(const std::string& formula,
                                                const std::vector<std::string>& variables,
                                                const std::string& where) {
  auto program = std::make_shared<Program>();
  program->where = where;
  program->formula = formula;
  program->variables = variables;
  for (size_t i = 0; i < variables.size(); ++i) {
    const std::string& name = variables[i];
    if (!IsIdentifier(name) || IsReservedName(name)) {
      Fail(where, ": variable name '", name,
           "' cannot be used in an expression (letters, digits and '_', not starting with a "
           "digit",
           IsReservedName(name) ? "; names __v<digits> are reserved" : "", ")");
    }
    if (std::find(variables.begin(), variables.begin() + i, name) != variables.begin() + i) {
      Fail(where, ": variable '", name, "' is listed twice");
    }
  }
  RewriteVectorCalls(program.get());

  // Parse once here so every error surfaces at compile time, not on the first row.
  std::unique_ptr<Evaluator> evaluator;
  try {
    evaluator = std::make_unique<Evaluator>(*program);
  } catch (const mu::ParserError& error) {
    // DefineVar rejects names muParser reserves (e.g. a constant's): name the variable.
    Fail(where, ": cannot define the variables of expression '", formula, "': ", error.GetMsg());
  }
  try {
    evaluator->Eval();
    if (evaluator->parser().GetNumResults() != 1) {
      Fail(where, ": expression '", formula, "' has ", evaluator->parser().GetNumResults(),
           " comma-separated results; it must have one");
    }
    for (const auto& [name, address] : evaluator->parser().GetUsedVar()) {
      const auto it = std::find(variables.begin(), variables.end(), name);
      if (it != variables.end()) {
        program->scalar_variables.push_back(static_cast<size_t>(it - variables.begin()));
      }
    }
  } catch (const mu::ParserError& error) {
    FailParse(*program, evaluator->parser(), error);
  }
  std::sort(program->scalar_variables.begin(), program->scalar_variables.end());
  return std::make_unique<CompiledExpression>(std::move(program));
}

}  // namespace tzrec::fg
