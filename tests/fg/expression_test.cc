// Tests of tzrec::fg::Expression: every function and operator against hand-computed values,
// broadcasting, error messages and concurrent evaluation.
#include "tzrec/fg/expression.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "tzrec/common/error.h"

namespace tzrec::fg {
namespace {

constexpr char kWhere[] = "feature_configs[0].expr_feature 'f'";
constexpr double kPi = 3.14159265358979323846;

// Evaluates `formula` over variables bound to `values` (one vector per variable).
std::vector<double> EvalAll(const std::string& formula, const std::vector<std::string>& names,
                            const std::vector<std::vector<double>>& values) {
  const auto expression = Expression::Compile(formula, names, kWhere);
  std::vector<ExpressionInput> inputs;
  for (const auto& v : values) inputs.push_back({v.data(), v.size()});
  std::vector<double> out = {-12345.0};  // Evaluate must replace, not append
  expression->Evaluate(inputs, &out);
  return out;
}

// A formula of scalars that must produce exactly one value.
double Eval(const std::string& formula, const std::vector<std::string>& names = {},
            const std::vector<double>& values = {}) {
  std::vector<std::vector<double>> columns;
  for (double v : values) columns.push_back({v});
  const std::vector<double> out = EvalAll(formula, names, columns);
  EXPECT_EQ(out.size(), 1u) << formula;
  return out.empty() ? NAN : out[0];
}

// The message of the tzrec::Error that compiling (and evaluating once) throws.
std::string CompileError(const std::string& formula, const std::vector<std::string>& names) {
  try {
    std::vector<std::vector<double>> values(names.size(), std::vector<double>{1.0});
    EvalAll(formula, names, values);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for '" << formula << "'";
  return "";
}

std::string EvalError(const std::string& formula, const std::vector<std::string>& names,
                      const std::vector<std::vector<double>>& values) {
  try {
    EvalAll(formula, names, values);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error for '" << formula << "'";
  return "";
}

bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

TEST(ExpressionTest, UnaryScalarFunctions) {
  struct Case {
    const char* function;
    double x;
    double expected;
  };
  const Case cases[] = {
      {"sin", 0.5, std::sin(0.5)},
      {"cos", 0.5, std::cos(0.5)},
      {"tan", 0.5, std::tan(0.5)},
      {"asin", 0.5, kPi / 6},
      {"acos", 0.5, kPi / 3},
      {"atan", 1.0, kPi / 4},
      {"sinh", 1.0, (M_E - 1 / M_E) / 2},
      {"cosh", 1.0, (M_E + 1 / M_E) / 2},
      {"tanh", 1.0, (M_E * M_E - 1) / (M_E * M_E + 1)},
      {"asinh", 1.0, std::log(1 + std::sqrt(2.0))},
      {"acosh", 2.0, std::log(2 + std::sqrt(3.0))},
      {"atanh", 0.5, 0.5 * std::log(3.0)},
      {"log2", 8.0, 3.0},
      {"log10", 1000.0, 3.0},
      {"log", M_E * M_E, 2.0},
      {"ln", M_E, 1.0},
      {"exp", 2.0, M_E * M_E},
      {"sqrt", 16.0, 4.0},
      {"sign", -3.5, -1.0},
      {"sign", 0.0, 0.0},
      {"sign", 2.0, 1.0},
      {"abs", -2.25, 2.25},
      {"rint", 2.4, 2.0},
      {"rint", 2.6, 3.0},
      {"floor", -1.5, -2.0},
      {"floor", 1.5, 1.0},
      {"ceil", -1.5, -1.0},
      {"ceil", 1.2, 2.0},
      {"trunc", -1.7, -1.0},
      {"trunc", 1.7, 1.0},
      {"round", 2.5, 3.0},
      {"round", -2.5, -3.0},
      {"round", 2.4, 2.0},
      {"round", -0.5, -1.0},
      {"sigmoid", 0.0, 0.5},
      {"sigmoid", 2.0, 1 / (1 + std::exp(-2.0))},
      {"sigmoid", -2.0, std::exp(-2.0) / (1 + std::exp(-2.0))},
  };
  for (const Case& c : cases) {
    const std::string formula = std::string(c.function) + "(x)";
    EXPECT_NEAR(Eval(formula, {"x"}, {c.x}), c.expected, 1e-12) << formula << " x=" << c.x;
  }
}

TEST(ExpressionTest, FiniteLog10) {
  const double y = Eval("log10(x)", {"x"}, {1000});
  EXPECT_TRUE(std::isfinite(y));
  EXPECT_DOUBLE_EQ(y, 3.0);
}

TEST(ExpressionTest, RoundP) {
  EXPECT_DOUBLE_EQ(Eval("roundp(3.14159, 2)"), 3.14);
  EXPECT_DOUBLE_EQ(Eval("roundp(3.14159, 0)"), 3.0);
  EXPECT_DOUBLE_EQ(Eval("roundp(2.5, 0)"), 3.0);
  EXPECT_DOUBLE_EQ(Eval("roundp(-1.25, 1)"), -1.3);  // -12.5 is exact: away from zero
  EXPECT_DOUBLE_EQ(Eval("roundp(1234.5, -2)"), 1200.0);
  EXPECT_DOUBLE_EQ(Eval("roundp(1250, -2)"), 1300.0);
  EXPECT_DOUBLE_EQ(Eval("roundp(x, 3)", {"x"}, {-0.0004}), -0.0);
}

TEST(ExpressionTest, Rnd) {
  const auto expression = Expression::Compile("rnd()", {}, kWhere);
  std::vector<double> out;
  double first = -1;
  bool varies = false;
  for (int i = 0; i < 100; ++i) {
    expression->Evaluate({}, &out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_GE(out[0], 0.0);
    EXPECT_LT(out[0], 1.0);
    if (i == 0) first = out[0];
    varies |= out[0] != first;
  }
  EXPECT_TRUE(varies) << "rnd() must not be constant-folded";
}

TEST(ExpressionTest, GeoDistances) {
  const double r = 6371.0;  // km
  // A quarter of the equator.
  EXPECT_NEAR(Eval("sphere_dist(0, 0, 90, 0)"), r * kPi / 2, 1e-9);
  EXPECT_NEAR(Eval("haversine(0, 0, 90, 0)"), r * kPi / 2, 1e-9);
  // Equal points: 0, not NaN from an acos argument rounded past 1.
  EXPECT_EQ(Eval("sphere_dist(116.4074, 39.9042, 116.4074, 39.9042)"), 0.0);
  EXPECT_EQ(Eval("haversine(116.4074, 39.9042, 116.4074, 39.9042)"), 0.0);

  // Beijing -> Shanghai, (lng, lat) in degrees; about 1067 km apart.
  const double lng1 = 116.4074, lat1 = 39.9042, lng2 = 121.4737, lat2 = 31.2304;
  const double d = kPi / 180;
  const double law_of_cosines =
      r * std::acos(std::sin(lat1 * d) * std::sin(lat2 * d) +
                    std::cos(lat1 * d) * std::cos(lat2 * d) * std::cos((lng2 - lng1) * d));
  const double s_lat = std::sin((lat2 - lat1) * d / 2), s_lng = std::sin((lng2 - lng1) * d / 2);
  const double haversine =
      2 * r *
      std::asin(std::sqrt(s_lat * s_lat + std::cos(lat1 * d) * std::cos(lat2 * d) * s_lng * s_lng));
  const std::vector<std::string> names = {"lng1", "lat1", "lng2", "lat2"};
  const std::vector<double> values = {lng1, lat1, lng2, lat2};
  EXPECT_NEAR(Eval("sphere_dist(lng1, lat1, lng2, lat2)", names, values), law_of_cosines, 1e-6);
  EXPECT_NEAR(Eval("haversine(lng1, lat1, lng2, lat2)", names, values), haversine, 1e-9);
  EXPECT_NEAR(haversine, 1067.0, 2.0);
  EXPECT_NEAR(law_of_cosines, haversine, 1e-6);
}

TEST(ExpressionTest, VariadicFunctionsAndConstants) {
  EXPECT_EQ(Eval("min(3, 1, 2)"), 1.0);
  EXPECT_EQ(Eval("max(3, 1, 2)"), 3.0);
  EXPECT_EQ(Eval("sum(3, 1, 2)"), 6.0);
  EXPECT_EQ(Eval("avg(3, 1, 2)"), 2.0);
  EXPECT_EQ(Eval("min(x)", {"x"}, {-4}), -4.0);
  EXPECT_EQ(Eval("_pi"), kPi);  // not muParser's GCC-build 3.141592653589
  EXPECT_DOUBLE_EQ(Eval("_e"), M_E);
}

TEST(ExpressionTest, ArithmeticAndComparisonOperators) {
  EXPECT_EQ(Eval("1 + 2 * 3 ^ 2"), 19.0);
  EXPECT_EQ(Eval("7 / 2 - 5"), -1.5);
  EXPECT_EQ(Eval("2 ^ 3 ^ 2"), 512.0);  // muParser: left to right
  EXPECT_EQ(Eval("-x ^ 2", {"x"}, {3}), -9.0);
  EXPECT_EQ(Eval("2 <= 2"), 1.0);
  EXPECT_EQ(Eval("3 <= 2"), 0.0);
  EXPECT_EQ(Eval("3 >= 4"), 0.0);
  EXPECT_EQ(Eval("4 >= 4"), 1.0);
  EXPECT_EQ(Eval("1 != 2"), 1.0);
  EXPECT_EQ(Eval("1 != 1"), 0.0);
  EXPECT_EQ(Eval("1 == 1"), 1.0);
  EXPECT_EQ(Eval("1 == 2"), 0.0);
  EXPECT_EQ(Eval("2 > 1"), 1.0);
  EXPECT_EQ(Eval("2 > 2"), 0.0);
  EXPECT_EQ(Eval("2 < 1"), 0.0);
  EXPECT_EQ(Eval("1 < 2"), 1.0);
}

TEST(ExpressionTest, LogicalAndBitwiseOperators) {
  EXPECT_EQ(Eval("1 && 0"), 0.0);
  EXPECT_EQ(Eval("2 && 3"), 1.0);
  EXPECT_EQ(Eval("0 || 1"), 1.0);
  EXPECT_EQ(Eval("0 || 0"), 0.0);
  EXPECT_EQ(Eval("3 | 5"), 7.0);
  EXPECT_EQ(Eval("6 & 3"), 2.0);
  EXPECT_EQ(Eval("2.6 | 1"), 3.0);  // operands rounded to integers
  EXPECT_EQ(Eval("-1 & 6"), 6.0);   // two's complement
  // Both at muParser's one level between && and comparisons, grouped left to right.
  EXPECT_EQ(Eval("12 & 10 | 1"), 9.0);
  EXPECT_EQ(Eval("1 | 2 == 2"), 1.0);  // comparison binds tighter: 1 | 1
  EXPECT_EQ(Eval("0 || 4 & 1"), 0.0);  // 0 || (4 & 1)
  EXPECT_EQ(Eval("x > 1 && x < 3 || x == 10", {"x"}, {10}), 1.0);
  EXPECT_EQ(Eval("x > 1 && x < 3 || x == 10", {"x"}, {5}), 0.0);
}

TEST(ExpressionTest, Conditional) {
  EXPECT_EQ(Eval("x > 0 ? 1 : -1", {"x"}, {2}), 1.0);
  EXPECT_EQ(Eval("x > 0 ? 1 : -1", {"x"}, {-2}), -1.0);
  EXPECT_EQ(Eval("x > 5 ? 2 : x > 0 ? 1 : 0", {"x"}, {3}), 1.0);
  EXPECT_EQ(Eval("x > 5 ? 2 : x > 0 ? 1 : 0", {"x"}, {-3}), 0.0);
  EXPECT_EQ(Eval("u_age == i_age ? 1 : 0", {"u_age", "i_age"}, {25, 25}), 1.0);
  EXPECT_EQ(Eval("u_age == i_age ? 1 : 0", {"u_age", "i_age"}, {25, 31}), 0.0);
}

TEST(ExpressionTest, VectorFunctions) {
  // a = (1, 2, 4): mean 7/3, squared deviations 16/9 + 1/9 + 25/9 = 14/3.
  const std::vector<std::string> names = {"a", "b"};
  const std::vector<std::vector<double>> values = {{1, 2, 4}, {3, 0, -1}};
  const auto eval = [&](const std::string& formula) {
    const std::vector<double> out = EvalAll(formula, names, values);
    EXPECT_EQ(out.size(), 1u) << formula;
    return out.empty() ? NAN : out[0];
  };
  EXPECT_EQ(eval("len(a)"), 3.0);
  EXPECT_DOUBLE_EQ(eval("l2_norm(a)"), std::sqrt(21.0));
  EXPECT_DOUBLE_EQ(eval("squared_norm(a)"), 21.0);
  EXPECT_DOUBLE_EQ(eval("dot(a, b)"), -1.0);                    // 3 + 0 - 4
  EXPECT_DOUBLE_EQ(eval("euclid_dist(a,b)"), std::sqrt(33.0));  // 4 + 4 + 25
  EXPECT_DOUBLE_EQ(eval("std_dev(a)"), std::sqrt(14.0 / 9));
  EXPECT_DOUBLE_EQ(eval("pop_std_dev(a)"), std::sqrt(14.0 / 6));
  EXPECT_DOUBLE_EQ(eval("variance(a)"), 14.0 / 9);
  EXPECT_DOUBLE_EQ(eval("pop_variance(a)"), 14.0 / 6);
  EXPECT_EQ(eval("reduce_min(a)"), 1.0);
  EXPECT_EQ(eval("reduce_max(a)"), 4.0);
  EXPECT_EQ(eval("reduce_sum(a)"), 7.0);
  EXPECT_DOUBLE_EQ(eval("reduce_mean(a)"), 7.0 / 3);
  EXPECT_EQ(eval("reduce_prod(a)"), 8.0);
  // Vector calls inside a scalar formula, with scalar functions around them.
  EXPECT_DOUBLE_EQ(eval("dot(a, b) / (l2_norm(a) * l2_norm(b)) + len( a ) * 10"),
                   -1.0 / (std::sqrt(21.0) * std::sqrt(10.0)) + 30);
  EXPECT_DOUBLE_EQ(eval("max(reduce_max(a), reduce_max(b)) + sqrt(squared_norm(b))"),
                   4 + std::sqrt(10.0));
}

TEST(ExpressionTest, VectorFunctionsWithScalarVariables) {
  const std::vector<std::string> names = {"a", "s"};
  EXPECT_EQ(EvalAll("reduce_sum(a) * s", names, {{1, 2, 4}, {2}}), std::vector<double>{14});
  // A missing scalar gives no value, as in element-wise evaluation.
  EXPECT_TRUE(EvalAll("reduce_sum(a) * s", names, {{1, 2, 4}, {}}).empty());
  // A variable only used inside vector calls may have any length, even one or none.
  EXPECT_EQ(EvalAll("len(a) + s", names, {{}, {1}}), std::vector<double>{1});
  EXPECT_EQ(EvalAll("reduce_sum(a) + 1", names, {{5}, {1, 2}}), std::vector<double>{6});

  const std::string multi = EvalError("reduce_sum(a) * s", names, {{1, 2, 4}, {2, 3}});
  EXPECT_TRUE(StartsWith(multi, kWhere)) << multi;
  EXPECT_NE(multi.find("variable 's' has 2 values"), std::string::npos) << multi;

  const std::string lengths = EvalError("dot(a, s)", names, {{1, 2, 4}, {2, 3}});
  EXPECT_TRUE(StartsWith(lengths, kWhere)) << lengths;
  EXPECT_NE(lengths.find("'a' has 3 values but 's' has 2"), std::string::npos) << lengths;
}

TEST(ExpressionTest, VectorFunctionsOnEmptyAndSingleValues) {
  const std::vector<std::string> names = {"a"};
  EXPECT_EQ(EvalAll("len(a)", names, {{}}), std::vector<double>{0});
  EXPECT_EQ(EvalAll("reduce_sum(a)", names, {{}}), std::vector<double>{0});
  EXPECT_EQ(EvalAll("reduce_prod(a)", names, {{}}), std::vector<double>{1});
  EXPECT_TRUE(std::isnan(EvalAll("reduce_mean(a)", names, {{}})[0]));
  EXPECT_TRUE(std::isnan(EvalAll("reduce_min(a)", names, {{}})[0]));
  EXPECT_EQ(EvalAll("variance(a)", names, {{3}}), std::vector<double>{0});
  EXPECT_TRUE(std::isnan(EvalAll("pop_variance(a)", names, {{3}})[0]));  // divides by n - 1
}

TEST(ExpressionTest, VectorFunctionArgumentErrors) {
  const std::vector<std::string> names = {"a", "b"};
  std::string e = CompileError("l2_norm(a + 1)", names);
  EXPECT_TRUE(StartsWith(e, kWhere)) << e;
  EXPECT_NE(e.find("takes variable names as arguments, got 'a + 1'"), std::string::npos) << e;
  e = CompileError("len(2)", names);
  EXPECT_NE(e.find("got '2'"), std::string::npos) << e;
  e = CompileError("dot(a)", names);
  EXPECT_NE(e.find("dot takes 2 arguments, got 1"), std::string::npos) << e;
  e = CompileError("len(c)", names);
  EXPECT_NE(e.find("unknown variable 'c'"), std::string::npos) << e;
  e = CompileError("len(a", names);
  EXPECT_NE(e.find("missing ')'"), std::string::npos) << e;
}

TEST(ExpressionTest, ElementWiseBroadcast) {
  const std::vector<std::string> names = {"a", "b"};
  // n vs 1
  EXPECT_EQ(EvalAll("a + b", names, {{1, 2, 3}, {10}}), (std::vector<double>{11, 12, 13}));
  EXPECT_EQ(EvalAll("a - b", names, {{10}, {1, 2, 3}}), (std::vector<double>{9, 8, 7}));
  // n vs n
  EXPECT_EQ(EvalAll("a * b", names, {{1, 2, 3}, {4, 5, 6}}), (std::vector<double>{4, 10, 18}));
  EXPECT_EQ(EvalAll("max(a, b) > 4 ? 1 : 0", names, {{1, 7, 3}, {4, 5, 2}}),
            (std::vector<double>{0, 1, 0}));
  // 1 vs 1, and none: no value
  EXPECT_EQ(EvalAll("a + b", names, {{1}, {2}}), (std::vector<double>{3}));
  EXPECT_TRUE(EvalAll("a + b", names, {{}, {2}}).empty());
  // Only used variables take part.
  EXPECT_EQ(EvalAll("a * 2", names, {{1, 2}, {1, 2, 3}}), (std::vector<double>{2, 4}));
  // No variables at all.
  EXPECT_EQ(EvalAll("1 + 2", names, {{1, 2}, {1, 2, 3}}), (std::vector<double>{3}));

  const std::string e = EvalError("a + b", names, {{1, 2, 3}, {4, 5}});
  EXPECT_TRUE(StartsWith(e, kWhere)) << e;
  EXPECT_NE(e.find("'a' (3 values) and 'b' (2 values)"), std::string::npos) << e;
  EXPECT_NE(EvalError("a + b", names, {{}, {4, 5}}).find("(0 values)"), std::string::npos);
}

TEST(ExpressionTest, UnknownFunction) {
  std::string e = CompileError("foo(x) + 1", {"x"});
  EXPECT_TRUE(StartsWith(e, kWhere)) << e;
  EXPECT_NE(e.find("unknown function 'foo'"), std::string::npos) << e;
  EXPECT_NE(e.find("known: "), std::string::npos) << e;
  EXPECT_NE(e.find("reduce_prod"), std::string::npos) << e;
  e = CompileError("1 + bar (x)", {"x"});
  EXPECT_NE(e.find("unknown function 'bar'"), std::string::npos) << e;
  // A variable called like a function.
  e = CompileError("x(1)", {"x"});
  EXPECT_TRUE(StartsWith(e, kWhere)) << e;
  EXPECT_NE(e.find("unknown function 'x'"), std::string::npos) << e;
}

TEST(ExpressionTest, UnknownVariable) {
  std::string e = CompileError("x + y", {"x"});
  EXPECT_TRUE(StartsWith(e, kWhere)) << e;
  EXPECT_NE(e.find("unknown variable 'y'"), std::string::npos) << e;
  EXPECT_NE(e.find("variables: x"), std::string::npos) << e;
  e = CompileError("__v0 + 1", {"x"});  // the generated names are not reachable
  EXPECT_NE(e.find("unknown variable '__v0'"), std::string::npos) << e;
  e = CompileError("1e3 + e3", {"x"});
  EXPECT_NE(e.find("unknown variable 'e3'"), std::string::npos) << e;
}

TEST(ExpressionTest, SyntaxErrors) {
  for (const char* formula : {"x +", "(x", "x 2", "x )", "3 ? 4", "sin(1, 2)", "x + * 2"}) {
    const std::string e = CompileError(formula, {"x"});
    EXPECT_TRUE(StartsWith(e, kWhere)) << e;
    EXPECT_NE(e.find(std::string("invalid expression '") + formula + "'"), std::string::npos) << e;
  }
  EXPECT_NE(CompileError("x 2", {"x"}).find("position 2"), std::string::npos);
  EXPECT_NE(CompileError("x + * 2", {"x"}).find("position 4"), std::string::npos);
  EXPECT_NE(CompileError("(x", {"x"}).find("position"), std::string::npos);
  // A generated variable in muParser's message is shown as the call it stands for.
  const std::string e = CompileError("x len(x)", {"x"});
  EXPECT_NE(e.find("\"len(x)\""), std::string::npos) << e;
  EXPECT_EQ(e.find("__v"), std::string::npos) << e;
  EXPECT_NE(CompileError("", {"x"}).find("empty"), std::string::npos);
  EXPECT_NE(CompileError("sin + 1", {"x"}).find("function 'sin' at position 0 must be called"),
            std::string::npos);
  EXPECT_NE(CompileError("len", {"x"}).find("function 'len'"), std::string::npos);
  EXPECT_NE(CompileError("x = 1", {"x"}).find("assignment '=' at position 2"), std::string::npos);
  EXPECT_NE(CompileError("1, 2", {"x"}).find("2 comma-separated results"), std::string::npos);
}

TEST(ExpressionTest, BadVariableLists) {
  EXPECT_NE(CompileError("1", {"a.b"}).find("variable name 'a.b'"), std::string::npos);
  EXPECT_NE(CompileError("1", {"2x"}).find("variable name '2x'"), std::string::npos);
  EXPECT_NE(CompileError("1", {"__v1"}).find("reserved"), std::string::npos);
  EXPECT_NE(CompileError("x", {"x", "x"}).find("'x' is listed twice"), std::string::npos);
  const auto expression = Expression::Compile("x + 1", {"x"}, kWhere);
  std::vector<double> out;
  try {
    expression->Evaluate({}, &out);
    ADD_FAILURE() << "no error for a missing input";
  } catch (const Error& e) {
    EXPECT_TRUE(StartsWith(e.what(), kWhere)) << e.what();
  }
}

TEST(ExpressionTest, ConcurrentEvaluation) {
  const auto scalar = Expression::Compile("a * 2 + b", {"a", "b"}, kWhere);
  const auto vector = Expression::Compile("dot(a, b) + len(a)", {"a", "b"}, kWhere);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<double> out;
      for (int i = 0; i < 5000; ++i) {
        const double a = t * 1000 + i, b = -t;
        const double bs[] = {b, b + 1};
        scalar->Evaluate({{&a, 1}, {bs, 2}}, &out);
        if (out.size() != 2 || out[0] != 2 * a + b || out[1] != 2 * a + b + 1) ++wrong;
        const double as[] = {a, 1};
        vector->Evaluate({{as, 2}, {bs, 2}}, &out);
        if (out.size() != 1 || out[0] != a * b + (b + 1) + 2) ++wrong;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ExpressionTest, NewExpressionsNeverReuseAnotherFormulasParser) {
  // Freed Expressions' memory is reused at once; each new one must still read its own formula.
  const double x = 1;
  std::vector<double> out;
  for (int i = 0; i < 300; ++i) {
    const auto expression = Expression::Compile("x + " + std::to_string(i), {"x"}, kWhere);
    expression->Evaluate({{&x, 1}}, &out);
    ASSERT_EQ(out, std::vector<double>{1.0 + i});
  }
}

}  // namespace
}  // namespace tzrec::fg
