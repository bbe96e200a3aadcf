// Minimal leveled logging in TorchEasyRec's format: "[2026-12-02 14:50:07,123][INFO] message".
//
// The level comes from LOG_LEVEL (DEBUG, INFO, WARNING, ERROR; default INFO). Thread-safe:
// each message is formatted in full and written with one call under a mutex.
#pragma once

#include <sstream>
#include <string>

namespace tzrec {

enum class LogLevel { kDebug = 10, kInfo = 20, kWarning = 30, kError = 40 };

// Parses a Python-style level name; unknown names fall back to INFO.
LogLevel ParseLogLevel(const std::string& name);
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Optional prefix for every line (used by multi-process launch to tag ranks).
void SetLogPrefix(const std::string& prefix);
void WriteLogLine(LogLevel level, const std::string& message);

class LogMessage {
 public:
  explicit LogMessage(LogLevel level) : level_(level) {}
  ~LogMessage() { WriteLogLine(level_, stream_.str()); }
  std::ostringstream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace tzrec

#define TZREC_LOG_ENABLED(lvl) (::tzrec::LogLevel::lvl >= ::tzrec::GetLogLevel())
#define LOG_DEBUG \
  if (TZREC_LOG_ENABLED(kDebug)) ::tzrec::LogMessage(::tzrec::LogLevel::kDebug).stream()
#define LOG_INFO \
  if (TZREC_LOG_ENABLED(kInfo)) ::tzrec::LogMessage(::tzrec::LogLevel::kInfo).stream()
#define LOG_WARNING \
  if (TZREC_LOG_ENABLED(kWarning)) ::tzrec::LogMessage(::tzrec::LogLevel::kWarning).stream()
#define LOG_ERROR \
  if (TZREC_LOG_ENABLED(kError)) ::tzrec::LogMessage(::tzrec::LogLevel::kError).stream()
