#include "tzrec/train/model_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "tzrec/common/error.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"

namespace tzrec {
namespace {

bool AllDigits(const std::string& text) {
  if (text.empty()) return false;
  for (unsigned char c : text) {
    if (!std::isdigit(c)) return false;
  }
  return true;
}

}  // namespace

ModelDirLock::ModelDirLock(const std::string& model_dir) {
  MakeDirs(model_dir);
  const std::string path = JoinPath(model_dir, kFileName);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0) Fail("cannot open lock file '", path, "': ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int lock_errno = errno;
    std::string holder;
    char buf[512];
    ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
    if (n > 0) holder.assign(buf, static_cast<size_t>(n));
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
    ::close(fd_);
    fd_ = -1;
    if (lock_errno == EWOULDBLOCK) {
      Fail("model_dir '", model_dir, "' is in use by another trainer (",
           holder.empty() ? "holder unknown" : holder,
           "); two trainers on one model_dir would overwrite each other's checkpoints");
    }
    Fail("cannot lock '", path, "': ", std::strerror(lock_errno));
  }
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char when[64];
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  const std::string owner = StrCat("pid ", getpid(), " on ", HostName(), ", since ", when, "\n");
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, owner.data(), owner.size(), 0) < 0) {
    LOG_WARNING << "cannot record the lock holder in " << path;
  }
}

ModelDirLock::~ModelDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing releases the flock
}

bool IsTempSiblingName(const std::string& name) {
  // ".<name>.tmp-<pid>-<n>"
  if (name.size() < 2 || name[0] != '.') return false;
  const size_t tmp = name.rfind(".tmp-");
  if (tmp == std::string::npos || tmp < 2) return false;
  const std::string tail = name.substr(tmp + 5);
  const size_t dash = tail.find('-');
  return dash != std::string::npos && AllDigits(tail.substr(0, dash)) && AllDigits(tail.substr(dash + 1));
}

std::vector<std::string> RemoveInterruptedSaves(const std::string& model_dir) {
  std::vector<std::string> removed;
  if (!IsDirectory(model_dir)) return removed;
  for (const std::string& name : ListDirectory(model_dir)) {
    if (!IsTempSiblingName(name)) continue;
    const std::string path = JoinPath(model_dir, name);
    RemoveAll(path);
    LOG_INFO << "Removed the leftover of an interrupted save: " << path;
    removed.push_back(path);
  }
  return removed;
}

}  // namespace tzrec
