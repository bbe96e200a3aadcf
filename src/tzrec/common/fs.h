// Filesystem helpers: glob lists, whole-file reads, and crash-safe writes.
//
// Writers never leave a half-written file under the final name: content goes to a temp file
// in the same directory and is renamed into place (rename is atomic on POSIX filesystems).
#pragma once

#include <string>
#include <vector>

namespace tzrec {

// Expands a comma-separated list of glob patterns into sorted, de-duplicated file paths.
// Fails naming the pattern when one matches nothing.
std::vector<std::string> ExpandInputPaths(const std::string& comma_separated_patterns);

std::string ReadFileToString(const std::string& path);
// Writes `content` to `path` atomically and durably (temp file, fsync, rename, fsync of the
// directory).
void WriteFileAtomic(const std::string& path, const std::string& content);
void WriteFileAtomic(const std::string& path, const char* data, size_t size);
// Appends one line (a '\n' is added), creating the file if needed. Refuses to follow a
// symbolic link at `path`.
void AppendLine(const std::string& path, const std::string& line);

// This process's resident memory now (/proc/self/statm), or -1 where unavailable.
int64_t ResidentSetBytes();

// fsync of a directory: makes renames and new entries in it durable.
void SyncDirectory(const std::string& path);

bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);
void MakeDirs(const std::string& path);
void RemoveAll(const std::string& path);
std::string JoinPath(const std::string& a, const std::string& b);
std::vector<std::string> ListDirectory(const std::string& path);  // names, sorted

// A fresh directory path next to `final_path` for building something that is renamed to
// `final_path` when complete.
std::string TempSiblingPath(const std::string& final_path);

}  // namespace tzrec
