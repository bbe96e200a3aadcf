#include "tzrec/common/logging.h"

#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace tzrec {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mutex;
std::string g_prefix;

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
  }
  return "INFO";
}
}  // namespace

LogLevel ParseLogLevel(const std::string& name) {
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(), ::toupper);
  if (upper == "DEBUG") return LogLevel::kDebug;
  if (upper == "WARNING" || upper == "WARN") return LogLevel::kWarning;
  if (upper == "ERROR" || upper == "CRITICAL" || upper == "FATAL") return LogLevel::kError;
  return LogLevel::kInfo;
}

void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

void SetLogPrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_prefix = prefix;
}

void WriteLogLine(LogLevel level, const std::string& message) {
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm local;
  localtime_r(&tv.tv_sec, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S", &local);
  char line_head[64];
  std::snprintf(line_head, sizeof(line_head), "[%s,%03d][%s] ", stamp,
                static_cast<int>(tv.tv_usec / 1000), LevelName(level));
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string line = g_prefix + line_head + message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace tzrec
