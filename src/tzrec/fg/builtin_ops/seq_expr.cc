// SeqExpr: a numeric formula evaluated element-wise over the inputs' values, e.g. the time
// since each click, "cur_time - clk_time_seq". operator_params:
//   formula  an arithmetic expression over the input names (+ - * /, unary -, parentheses,
//            numbers), or "spherical_distance": great-circle distance in km (earth radius
//            6371) of 4 inputs (lng1, lat1, lng2, lat2, in degrees), by the haversine formula.
// Element-wise: every used input with several values must have the same count n, an input
// with one value broadcasts, and the op yields n values. Any used input missing: nothing
// (the feature's default_value applies).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>

#include "tzrec/fg/builtin_ops/builtin_op.h"

namespace tzrec::fg::builtin_ops {
namespace {

constexpr double kEarthRadiusKm = 6371.0;
constexpr double kDegreesToRadians = 3.14159265358979323846 / 180.0;

double SphericalDistance(double lng1, double lat1, double lng2, double lat2) {
  const double phi1 = lat1 * kDegreesToRadians, phi2 = lat2 * kDegreesToRadians;
  const double half_dphi = (lat2 - lat1) * kDegreesToRadians / 2;
  const double half_dlambda = (lng2 - lng1) * kDegreesToRadians / 2;
  const double h = std::sin(half_dphi) * std::sin(half_dphi) +
                   std::cos(phi1) * std::cos(phi2) * std::sin(half_dlambda) * std::sin(half_dlambda);
  return 2 * kEarthRadiusKm * std::asin(std::sqrt(std::min(1.0, h)));
}

// One step of a formula in reverse Polish order.
struct Instr {
  enum Kind { kNumber, kInput, kAdd, kSub, kMul, kDiv, kNeg } kind;
  double number = 0;  // kNumber
  size_t input = 0;   // kInput
};

// Shunting-yard over + - * / ( ), unary minus/plus, numbers and input names.
class FormulaCompiler {
 public:
  FormulaCompiler(const std::string& formula, const std::vector<std::string>& names)
      : text_(formula), names_(names) {}

  std::vector<Instr> Compile() {
    bool expect_operand = true;
    size_t i = 0;
    while (i < text_.size()) {
      const char c = text_[i];
      if (std::isspace(static_cast<unsigned char>(c))) {
        ++i;
      } else if (std::isdigit(static_cast<unsigned char>(c)) || c == '.') {
        if (!expect_operand) Fail(i, "a number where an operator belongs");
        double value = 0;
        auto r = std::from_chars(text_.data() + i, text_.data() + text_.size(), value);
        if (r.ec != std::errc()) Fail(i, "a malformed number");
        out_.push_back({Instr::kNumber, value, 0});
        i = r.ptr - text_.data();
        expect_operand = false;
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        if (!expect_operand) Fail(i, "a name where an operator belongs");
        size_t j = i;
        while (j < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[j])) || text_[j] == '_')) ++j;
        const std::string name = text_.substr(i, j - i);
        size_t k = 0;
        while (k < names_.size() && names_[k] != name) ++k;
        if (k == names_.size()) {
          std::string known;
          for (const auto& n : names_) known += (known.empty() ? "" : ", ") + n;
          throw OpError("formula '" + text_ + "': unknown variable '" + name + "' (inputs: " + known + ")");
        }
        out_.push_back({Instr::kInput, 0, k});
        i = j;
        expect_operand = false;
      } else if (c == '(') {
        if (!expect_operand) Fail(i, "'(' where an operator belongs");
        ops_.push_back('(');
        ++i;
      } else if (c == ')') {
        if (expect_operand) Fail(i, "')' where an operand belongs");
        while (!ops_.empty() && ops_.back() != '(') Pop();
        if (ops_.empty()) Fail(i, "an unmatched ')'");
        ops_.pop_back();
        ++i;
      } else if (c == '+' || c == '-' || c == '*' || c == '/') {
        if (expect_operand) {
          if (c == '*' || c == '/') Fail(i, std::string("'") + c + "' where an operand belongs");
          if (c == '-') ops_.push_back('n');  // unary minus; unary plus is a no-op
        } else {
          while (!ops_.empty() && ops_.back() != '(' && Precedence(ops_.back()) >= Precedence(c)) Pop();
          ops_.push_back(c);
          expect_operand = true;
        }
        ++i;
      } else {
        Fail(i, std::string("an unexpected character '") + c + "'");
      }
    }
    if (expect_operand) Fail(text_.size(), "an incomplete expression");
    while (!ops_.empty()) {
      if (ops_.back() == '(') Fail(text_.size(), "an unclosed '('");
      Pop();
    }
    return out_;
  }

 private:
  static int Precedence(char op) { return op == 'n' ? 3 : (op == '*' || op == '/') ? 2 : 1; }
  void Pop() {
    const char op = ops_.back();
    ops_.pop_back();
    Instr::Kind kind = op == '+' ? Instr::kAdd : op == '-' ? Instr::kSub : op == '*' ? Instr::kMul
                     : op == '/' ? Instr::kDiv : Instr::kNeg;
    out_.push_back({kind, 0, 0});
  }
  [[noreturn]] void Fail(size_t pos, const std::string& what) {
    throw OpError("formula '" + text_ + "': " + what + " at position " + std::to_string(pos));
  }

  const std::string& text_;
  const std::vector<std::string>& names_;
  std::vector<Instr> out_;
  std::vector<char> ops_;  // operators and '('; 'n' = unary minus
};

class SeqExpr : public Op {
 public:
  SeqExpr(std::vector<Instr> program, std::vector<std::string> names, bool spherical)
      : program_(std::move(program)), names_(std::move(names)), spherical_(spherical) {
    used_.assign(names_.size(), spherical_);
    for (const Instr& instr : program_) {
      if (instr.kind == Instr::kInput) used_[instr.input] = true;
    }
  }
  int32_t output_kind() const override { return TZREC_FG_OUTPUT_NUMBERS; }

  void Compute(const tzrec_fg_input* inputs, size_t num_inputs, const tzrec_fg_output& out) const override {
    std::vector<std::vector<double>> values(num_inputs);
    size_t n = 1;
    for (size_t k = 0; k < num_inputs; ++k) {
      if (!used_[k]) continue;
      if (inputs[k].missing || inputs[k].num_items == 0) return;
      for (size_t i = 0; i < inputs[k].num_items; ++i) {
        values[k].push_back(ParseNumber(View(inputs[k].items[i]), names_[k]));
      }
      const size_t count = values[k].size();
      if (count != 1 && n != 1 && count != n) {
        throw OpError("inputs have " + std::to_string(n) + " and " + std::to_string(count) +
                      " values (input '" + names_[k] + "'); element-wise needs equal counts or one");
      }
      n = std::max(n, count);
    }
    auto at = [&](size_t k, size_t i) { return values[k].size() == 1 ? values[k][0] : values[k][i]; };
    std::vector<double> stack;
    for (size_t i = 0; i < n; ++i) {
      if (spherical_) {
        out.append_number(out.context, SphericalDistance(at(0, i), at(1, i), at(2, i), at(3, i)));
        continue;
      }
      stack.clear();
      for (const Instr& instr : program_) {
        switch (instr.kind) {
          case Instr::kNumber: stack.push_back(instr.number); break;
          case Instr::kInput: stack.push_back(at(instr.input, i)); break;
          case Instr::kNeg: stack.back() = -stack.back(); break;
          default: {
            const double b = stack.back();
            stack.pop_back();
            double& a = stack.back();
            a = instr.kind == Instr::kAdd ? a + b : instr.kind == Instr::kSub ? a - b
              : instr.kind == Instr::kMul ? a * b : a / b;
          }
        }
      }
      out.append_number(out.context, stack.back());
    }
  }

 private:
  std::vector<Instr> program_;
  std::vector<std::string> names_;
  bool spherical_;
  std::vector<bool> used_;
};

}  // namespace

std::unique_ptr<Op> CreateSeqExpr(const nlohmann::json& params,
                                  const std::vector<std::string>& input_names) {
  const std::string formula = StringParam(params, "formula", "");
  if (formula.empty()) throw OpError("param 'formula' must be set");
  if (formula == "spherical_distance") {
    CheckInputCount("SeqExpr spherical_distance", input_names, 4, "lng1, lat1, lng2, lat2");
    return std::make_unique<SeqExpr>(std::vector<Instr>(), input_names, true);
  }
  if (input_names.empty()) throw OpError("SeqExpr needs at least one input");
  return std::make_unique<SeqExpr>(FormulaCompiler(formula, input_names).Compile(), input_names, false);
}

}  // namespace tzrec::fg::builtin_ops
