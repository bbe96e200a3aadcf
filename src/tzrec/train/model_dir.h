// Guarding a model_dir: one trainer at a time (an flock held for the whole run), and the
// leftovers of interrupted saves cleaned at start.
//
// Thread-safety: ModelDirLock is owned by the main thread; the functions touch only files.
#pragma once

#include <string>
#include <vector>

namespace tzrec {

// Holds an exclusive flock on `<model_dir>/.tzrec_train.lock` (created if missing) from
// construction to destruction; the kernel drops it when the process dies, so a killed
// trainer never leaves the directory locked. A second holder fails at once naming the first
// (pid, host, start time are written into the lock file).
class ModelDirLock {
 public:
  explicit ModelDirLock(const std::string& model_dir);
  ~ModelDirLock();
  ModelDirLock(const ModelDirLock&) = delete;
  ModelDirLock& operator=(const ModelDirLock&) = delete;
  static constexpr const char* kFileName = ".tzrec_train.lock";

 private:
  int fd_ = -1;
};

// True for the names TempSiblingPath gives: ".<name>.tmp-<pid>-<n>".
bool IsTempSiblingName(const std::string& name);

// Removes what interrupted saves left in `model_dir` (temp checkpoint directories, temp files
// and checkpoints half way through rotation), matched by their exact naming pattern only.
// Call while holding the ModelDirLock. Returns the removed paths.
std::vector<std::string> RemoveInterruptedSaves(const std::string& model_dir);

}  // namespace tzrec
