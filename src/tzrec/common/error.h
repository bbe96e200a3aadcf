// Error type for user-facing failures (bad config, bad data, bad flags).
//
// Every error a user can cause is thrown as tzrec::Error with a message that names the file,
// row/line or config field; main() prints it and exits non-zero. Internal invariants use
// TZREC_CHECK, which also throws, so a bug never leaves half-written output behind.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tzrec {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Concatenates anything streamable: StrCat("row ", 3, ": bad").
template <typename... Args>
std::string StrCat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

template <typename... Args>
[[noreturn]] void Fail(Args&&... args) {
  throw Error(StrCat(std::forward<Args>(args)...));
}

}  // namespace tzrec

#define TZREC_CHECK(cond, ...)                                                      \
  do {                                                                              \
    if (!(cond)) ::tzrec::Fail("internal check failed: " #cond " ", ##__VA_ARGS__); \
  } while (0)
