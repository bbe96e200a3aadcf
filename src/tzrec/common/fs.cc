#include "tzrec/common/fs.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdio>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tzrec/common/error.h"
#include "tzrec/common/strings.h"

namespace fs = std::filesystem;

namespace tzrec {
namespace {

// write(2) until all of `data` is out (retrying EINTR); false with `*error` set otherwise.
bool WriteAll(int fd, const char* data, size_t size, int* error) {
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *error = n < 0 ? errno : ENOSPC;
      return false;
    }
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

std::vector<std::string> DataFilesIn(const std::string& directory) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    // Hidden files (.crc checksums, editor swap files) and markers such as _SUCCESS or
    // _committed_* are bookkeeping of the writer, not rows.
    if (name.empty() || name[0] == '.' || name[0] == '_') continue;
    std::error_code type_ec;
    if (!fs::is_regular_file(entry.path(), type_ec)) continue;
    files.push_back(entry.path().string());
  }
  if (ec) Fail("cannot list input directory '", directory, "': ", ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> ExpandInputPaths(const std::string& comma_separated_patterns) {
  std::set<std::string> unique;
  std::vector<std::string> ordered;
  for (const auto& raw : Split(comma_separated_patterns, ",")) {
    std::string pattern(Trim(raw));
    if (pattern.empty()) continue;
    glob_t matches{};
    int rc = glob(pattern.c_str(), 0, nullptr, &matches);
    if (rc == GLOB_NOMATCH || matches.gl_pathc == 0) {
      globfree(&matches);
      Fail("input path pattern '", pattern, "' matches no file");
    }
    if (rc != 0) {
      globfree(&matches);
      Fail("cannot expand input path pattern '", pattern, "'");
    }
    std::vector<std::string> batch;
    for (size_t i = 0; i < matches.gl_pathc; ++i) {
      std::string path = matches.gl_pathv[i];
      if (IsDirectory(path)) {
        // A directory named on its own stands for the data files in it (Spark and Hive write
        // tables as directories); one a wildcard happens to match is not data.
        if (pattern.find_first_of("*?[") == std::string::npos) {
          for (auto& file : DataFilesIn(path)) batch.push_back(std::move(file));
        }
        continue;
      }
      batch.push_back(path);
    }
    globfree(&matches);
    std::sort(batch.begin(), batch.end());
    for (auto& path : batch) {
      if (unique.insert(path).second) ordered.push_back(path);
    }
  }
  return ordered;
}

std::string ReadFileToString(const std::string& path) {
  // An ifstream opens a directory and reads it as empty, which would pass for an empty file.
  if (IsDirectory(path)) Fail("'", path, "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail("cannot open file '", path, "'");
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

std::string TempSiblingPath(const std::string& final_path) {
  static std::atomic<int> counter{0};
  fs::path target(final_path);
  std::string name = "." + target.filename().string() + ".tmp-" + std::to_string(getpid()) +
                     "-" + std::to_string(counter++);
  return (target.parent_path() / name).string();
}

void WriteFileAtomic(const std::string& path, const std::string& content) {
  WriteFileAtomic(path, content.data(), content.size());
}

void WriteFileAtomic(const std::string& path, const char* data, size_t size) {
  WriteFileAtomic(path, std::vector<std::pair<const char*, size_t>>{{data, size}});
}

void WriteFileAtomic(const std::string& path, const std::vector<std::pair<const char*, size_t>>& pieces) {
  fs::path target(path);
  if (target.has_parent_path()) MakeDirs(target.parent_path().string());
  std::string tmp = TempSiblingPath(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) Fail("cannot write file '", tmp, "': ", std::strerror(errno));
  int write_errno = 0;
  bool ok = true;
  for (const auto& [data, size] : pieces) ok = ok && WriteAll(fd, data, size, &write_errno);
  // Data on disk before the name: after a power loss the file is either the old one or complete.
  ok = ok && ::fsync(fd) == 0;
  ok = (::close(fd) == 0) && ok;
  if (!ok) {
    ::unlink(tmp.c_str());
    Fail("failed writing file '", path, "': ", std::strerror(write_errno ? write_errno : errno),
         " (disk full?)");
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    Fail("cannot rename temp file into '", path, "'");
  }
  SyncDirectory(target.has_parent_path() ? target.parent_path().string() : ".");
}

void SyncDirectory(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) Fail("cannot open directory '", path, "': ", std::strerror(errno));
  // Some filesystems (e.g. certain FUSE mounts) do not support fsync on directories.
  const bool ok = ::fsync(fd) == 0 || errno == EINVAL || errno == ENOTSUP;
  const int sync_errno = errno;
  ::close(fd);
  if (!ok) Fail("cannot sync directory '", path, "': ", std::strerror(sync_errno));
}

void AppendLine(const std::string& path, const std::string& line) {
  // O_NOFOLLOW: a symlink planted under the result file's name must not redirect our writes.
  int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno == ELOOP) Fail("'", path, "' is a symbolic link; not appending through it");
    Fail("cannot open '", path, "' for appending: ", std::strerror(errno));
  }
  const std::string text = line + '\n';
  int write_errno = 0;
  bool ok = WriteAll(fd, text.data(), text.size(), &write_errno);
  ok = (::close(fd) == 0) && ok;
  if (!ok) Fail("failed appending to '", path, "': ", std::strerror(write_errno ? write_errno : errno));
}

bool PathExists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

bool IsDirectory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

void MakeDirs(const std::string& path) {
  if (path.empty()) return;
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec && !IsDirectory(path)) Fail("cannot create directory '", path, "': ", ec.message());
}

void RemoveAll(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  return (fs::path(a) / b).string();
}

std::vector<std::string> ListDirectory(const std::string& path) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

int64_t UsableMemoryBytes(int64_t physical_bytes, const std::vector<std::string>& cgroup_limit_files) {
  int64_t usable = physical_bytes > 0 ? physical_bytes : 0;
  for (const std::string& path : cgroup_limit_files) {
    std::ifstream in(path);
    std::string text;
    if (!in || !(in >> text) || text == "max") continue;
    int64_t limit;
    // cgroup v1 reports "no limit" as a page-rounded INT64_MAX, which the comparison absorbs.
    if (!ParseInt64(text, &limit) || limit <= 0) continue;
    if (usable == 0 || limit < usable) usable = limit;
  }
  return usable;
}

int64_t UsableMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const int64_t physical = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  return UsableMemoryBytes(physical, {"/sys/fs/cgroup/memory.max",
                                      "/sys/fs/cgroup/memory/memory.limit_in_bytes"});
}

int64_t ResidentSetBytes() {
  std::FILE* file = std::fopen("/proc/self/statm", "r");
  if (!file) return -1;
  long long total_pages = 0, resident_pages = 0;
  int fields = std::fscanf(file, "%lld %lld", &total_pages, &resident_pages);
  std::fclose(file);
  if (fields != 2) return -1;
  return static_cast<int64_t>(resident_pages) * sysconf(_SC_PAGE_SIZE);
}

std::string HostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

}  // namespace tzrec
