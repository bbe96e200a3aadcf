#include "tzrec/common/strings.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace tzrec {

std::vector<std::string_view> SplitView(std::string_view text, std::string_view sep) {
  std::vector<std::string_view> parts;
  if (sep.empty()) {
    parts.push_back(text);
    return parts;
  }
  size_t start = 0;
  while (true) {
    size_t pos = text.find(sep, start);
    if (pos == std::string_view::npos) {
      parts.push_back(text.substr(start));
      break;
    }
    parts.push_back(text.substr(start, pos - start));
    start = pos + sep.size();
  }
  return parts;
}

std::vector<std::string> Split(std::string_view text, std::string_view sep) {
  std::vector<std::string> parts;
  for (auto piece : SplitView(text, sep)) parts.emplace_back(piece);
  return parts;
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string joined;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) joined += sep;
    joined += parts[i];
  }
  return joined;
}

std::string_view Trim(std::string_view text) {
  size_t b = 0, e = text.size();
  while (b < e && (text[b] == ' ' || text[b] == '\t' || text[b] == '\r' || text[b] == '\n')) ++b;
  while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\r' ||
                   text[e - 1] == '\n'))
    --e;
  return text.substr(b, e - b);
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}
bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

bool ParseInt64(std::string_view text, int64_t* out) {
  text = Trim(text);
  if (!text.empty() && text[0] == '+') text.remove_prefix(1);
  if (text.empty()) return false;
  auto res = std::from_chars(text.data(), text.data() + text.size(), *out);
  return res.ec == std::errc() && res.ptr == text.data() + text.size();
}

bool ParseDouble(std::string_view text, double* out) {
  text = Trim(text);
  if (!text.empty() && text[0] == '+') text.remove_prefix(1);
  if (text.empty()) return false;
  auto res = std::from_chars(text.data(), text.data() + text.size(), *out);
  return res.ec == std::errc() && res.ptr == text.data() + text.size();
}

bool ParseFloat(std::string_view text, float* out) {
  double value;
  if (!ParseDouble(text, &value)) return false;
  *out = static_cast<float>(value);
  return true;
}

std::string Printable(std::string_view text) {
  std::string shown;
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      shown += buf;
    } else {
      shown += static_cast<char>(c);
    }
  }
  return shown;
}

}  // namespace tzrec
