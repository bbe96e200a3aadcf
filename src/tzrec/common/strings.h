// Small string helpers shared by config, data and CLI code (no LibTorch).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tzrec {

// Splits on every occurrence of `sep` (a string, may be multi-byte). Keeps empty pieces.
std::vector<std::string_view> SplitView(std::string_view text, std::string_view sep);
std::vector<std::string> Split(std::string_view text, std::string_view sep);
// Calls fn(piece) for each piece of `text` split on `sep` (no allocation; hot parsing paths).
template <typename Fn>
void ForEachPiece(std::string_view text, std::string_view sep, Fn&& fn) {
  if (sep.empty()) {
    fn(text);
    return;
  }
  size_t start = 0;
  while (true) {
    size_t pos = text.find(sep, start);
    if (pos == std::string_view::npos) {
      fn(text.substr(start));
      return;
    }
    fn(text.substr(start, pos - start));
    start = pos + sep.size();
  }
}
std::string Join(const std::vector<std::string>& parts, std::string_view sep);
std::string_view Trim(std::string_view text);
bool StartsWith(std::string_view text, std::string_view prefix);
bool EndsWith(std::string_view text, std::string_view suffix);

// Strict number parsing: the whole (trimmed) text must be a number. Return false otherwise.
bool ParseInt64(std::string_view text, int64_t* out);
bool ParseDouble(std::string_view text, double* out);
bool ParseFloat(std::string_view text, float* out);

// Makes control characters visible in error messages ("\x03" instead of a raw byte).
std::string Printable(std::string_view text);

}  // namespace tzrec
