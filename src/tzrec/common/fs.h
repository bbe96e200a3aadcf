// Filesystem helpers: glob lists, whole-file reads, and crash-safe writes.
//
// Writers never leave a half-written file under the final name: content goes to a temp file
// in the same directory and is renamed into place (rename is atomic on POSIX filesystems).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace tzrec {

// Expands a comma-separated list of glob patterns into sorted, de-duplicated file paths.
// Fails naming the pattern when one matches nothing. A pattern without wildcards that names a
// directory stands for DataFilesIn() it; directories a wildcard matches are skipped.
std::vector<std::string> ExpandInputPaths(const std::string& comma_separated_patterns);
// The regular files directly in `directory`, sorted, without hidden files and names starting
// with '_' (_SUCCESS and similar markers). Not recursive.
std::vector<std::string> DataFilesIn(const std::string& directory);

// Fails naming the path when it cannot be opened or is a directory.
std::string ReadFileToString(const std::string& path);
// Writes `content` to `path` atomically and durably (temp file, fsync, rename, fsync of the
// directory).
void WriteFileAtomic(const std::string& path, const std::string& content);
void WriteFileAtomic(const std::string& path, const char* data, size_t size);
// The same for content in pieces, written in order (large files without one joined copy).
void WriteFileAtomic(const std::string& path, const std::vector<std::pair<const char*, size_t>>& pieces);
// Appends one line (a '\n' is added), creating the file if needed. Refuses to follow a
// symbolic link at `path`.
void AppendLine(const std::string& path, const std::string& line);

// This process's resident memory now (/proc/self/statm), or -1 where unavailable.
int64_t ResidentSetBytes();

// fsync of a directory: makes renames and new entries in it durable.
void SyncDirectory(const std::string& path);

// The memory this process may use: physical RAM, or the cgroup's limit when that is lower (a
// container given 8 GiB on a 512 GiB host must plan for 8). 0 when nothing is known.
int64_t UsableMemoryBytes();
// The same with the physical size and the cgroup limit files given (tests): each file holds a
// byte count or "max" (cgroup v2 memory.max, v1 memory.limit_in_bytes); missing or unreadable
// files and "max" impose no limit.
int64_t UsableMemoryBytes(int64_t physical_bytes, const std::vector<std::string>& cgroup_limit_files);

bool PathExists(const std::string& path);
bool IsDirectory(const std::string& path);
void MakeDirs(const std::string& path);
void RemoveAll(const std::string& path);
std::string JoinPath(const std::string& a, const std::string& b);
std::vector<std::string> ListDirectory(const std::string& path);  // names, sorted

// This machine's host name ("localhost" when it cannot be read), for file names and messages.
std::string HostName();

// A fresh directory path next to `final_path` for building something that is renamed to
// `final_path` when complete.
std::string TempSiblingPath(const std::string& final_path);

}  // namespace tzrec
