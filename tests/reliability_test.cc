// Reliability: what happens when things go wrong. Non-finite data and training, corrupted and
// crafted checkpoints, kill -9 at random moments followed by --continue_train, a full disk,
// a second trainer on one model_dir, leftovers of interrupted saves, result-file paths.
// Each case must end in a clear error (or a correct continuation) with nothing saved lost.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <thread>

#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/data/data_position.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/model_dir.h"
#include "tzrec/train/non_finite.h"
#include "tzrec/train/tensor_archive.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

using testing::DeterministicRuntime;
using testing::LoadModelFile;
using testing::ReadJsonLines;
using testing::Shell;
using testing::SmallOptions;
using testing::TempDir;
using testing::WriteSmallConfig;

// Replaces line `line` (1-based, the header is line 1) of a CSV file.
void ReplaceLine(const std::string& path, int line, const std::string& text) {
  std::istringstream in(ReadFileToString(path));
  std::string out, current;
  for (int i = 1; std::getline(in, current); ++i) out += (i == line ? text : current) + "\n";
  testing::WriteFile(path, out);
}

// Eval with the checkpoint in `model_dir` (its pipeline.config).
EvalOptions EvalOf(const TempDir& dir, const std::string& model_dir) {
  EvalOptions options;
  options.pipeline_config_path = JoinPath(model_dir, "pipeline.config");
  options.eval_input_path = dir.File("data/eval/*.csv");
  return options;
}

// meta.json's digest of `relative` recomputed, as if the file had been written that way.
void ResealCheckpointFile(const std::string& checkpoint, const std::string& relative) {
  const std::string meta_file = JoinPath(checkpoint, "meta.json");
  auto meta = nlohmann::json::parse(ReadFileToString(meta_file));
  const FileDigest digest = DigestOf(ReadFileToString(JoinPath(checkpoint, relative)));
  meta["files"][relative] = {{"size", digest.size}, {"crc32", digest.crc32}};
  testing::WriteFile(meta_file, meta.dump());
}

TEST(Reliability, NonFiniteOrOutOfDomainDataIsAnErrorNamingFileRowAndColumn) {
  TempDir dir;
  const std::string config = WriteSmallConfig(dir);
  const std::string file = dir.File("data/train/part-00001.csv");
  const std::string original = ReadFileToString(file);
  struct Case {
    std::string row;
    std::string error;
  };
  // Columns: x (raw), c0, c1, label.
  for (const Case& c : std::vector<Case>{
           {"nan,1,1,0", "part-00001.csv:7: feature 'x' has value nan"},
           {"inf,1,1,0", "part-00001.csv:7: feature 'x' has value inf"},
           {"0.5,1,1,nan", "part-00001.csv:7: label 'label' is nan"},
           {"0.5,1,1,2", "part-00001.csv:7: label 'label' is 2, but model_config"},
           {"0.5,1,1,-0.5", "binary_cross_entropy needs a value in [0, 1]"}}) {
    SCOPED_TRACE(c.row);
    testing::WriteFile(file, original);
    ReplaceLine(file, 7, c.row);
    auto options = SmallOptions(dir, config, dir.File("m_" + std::to_string(std::hash<std::string>()(c.row))));
    options.edit_config_json = R"({"data_config.shuffle": false})";
    EXPECT_TZREC_ERROR(TrainAndEvaluate(options), c.error);
    EXPECT_TRUE(ListCheckpoints(options.model_dir).empty());
  }
  // Sample weights too: an extra column w.
  std::istringstream lines(original);
  std::string weighted, line;
  for (int i = 1; std::getline(lines, line); ++i) {
    weighted += line + (i == 1 ? ",w" : i == 3 ? ",inf" : ",1.5") + "\n";
  }
  testing::WriteFile(file, weighted);
  auto options = SmallOptions(dir, config, dir.File("weights"));
  options.train_input_path = file;
  options.edit_config_json = R"({"data_config.sample_weight_fields": ["w"]})";
  EXPECT_TZREC_ERROR(TrainAndEvaluate(options), "part-00001.csv:3: sample weight 'w' is inf");
}

TEST(Reliability, AHugeLearningRateStopsTrainingBeforeAnythingIsSaved) {
  TempDir dir;
  const std::string config = WriteSmallConfig(dir);
  auto options = SmallOptions(dir, config, dir.File("m"));
  options.edit_config_json = R"({"train_config.dense_optimizer.adam_optimizer.lr": 1e30,
                                 "train_config.sparse_optimizer.adagrad_optimizer.lr": 1e30})";
  try {
    TrainAndEvaluate(options);
    ADD_FAILURE() << "expected the run to stop";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("step "), std::string::npos) << message;
    EXPECT_NE(message.find(": the loss is "), std::string::npos) << message;
    EXPECT_NE(message.find("binary_cross_entropy"), std::string::npos) << message;
    EXPECT_NE(message.find("dense lr 1e+30"), std::string::npos) << message;
  }
  EXPECT_TRUE(ListCheckpoints(dir.File("m")).empty());
}

// The dense-gradient guard the trainer runs between backward and the optimizer step: a NaN or
// inf in any gradient fails naming the step and the parameter; finite and undefined
// gradients pass. (No model of ours gives a finite loss with a non-finite gradient, so the
// guard is tested on its own.)
TEST(Reliability, ANonFiniteDenseGradientStopsTheStepNamingTheParameter) {
  at::Tensor a = torch::zeros({3}, torch::requires_grad());
  at::Tensor b = torch::zeros({2, 2}, torch::requires_grad());
  at::Tensor unused = torch::zeros({1}, torch::requires_grad());
  a.mutable_grad() = torch::ones({3});
  b.mutable_grad() = torch::ones({2, 2});
  auto name_of = [&](const at::Tensor& p) {
    return std::string(p.is_same(a) ? "tower.weight" : p.is_same(b) ? "final.bias" : "?");
  };
  EXPECT_NO_THROW(RequireFiniteGradients({a, b, unused}, name_of, 7));
  for (double bad : {std::nan(""), double{INFINITY}, -double{INFINITY}}) {
    b.mutable_grad()[1][0] = bad;
    try {
      RequireFiniteGradients({a, b, unused}, name_of, 7);
      ADD_FAILURE() << "expected an error for " << bad;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("step 7: the gradient of final.bias has non-finite values ("),
                std::string::npos) << message;
      EXPECT_NE(message.find(std::isnan(bad) ? "(1 NaN, 0 inf)" : "(0 NaN, 1 inf)"), std::string::npos)
          << message;
    }
  }
}

// Trains the small config to its end (checkpoints at steps 10 and 19) into `model_dir`.
void TrainSmall(const TempDir& dir, const std::string& config, const std::string& model_dir) {
  DeterministicRuntime();
  TrainAndEvaluate(SmallOptions(dir, config, model_dir));
}

TEST(Reliability, CorruptedCheckpointFilesAreNamedAndNeverLoaded) {
  TempDir dir;
  const std::string config = WriteSmallConfig(dir);
  const std::string model_dir = dir.File("m");
  TrainSmall(dir, config, model_dir);
  const std::string ckpt = ListCheckpoints(model_dir).back().path;
  const std::string pristine = dir.File("pristine");
  ASSERT_EQ(std::system(("cp -r " + ckpt + " " + pristine).c_str()), 0);
  auto restore_pristine = [&] {
    RemoveAll(ckpt);
    ASSERT_EQ(std::system(("cp -r " + pristine + " " + ckpt).c_str()), 0);
  };
  auto continue_options = [&] {
    auto options = SmallOptions(dir, config, model_dir);
    options.continue_train = true;
    options.edit_config_json = R"({"train_config.num_steps": 25})";
    return options;
  };
  EXPECT_NO_THROW(Evaluate(EvalOf(dir, model_dir)));

  // One flipped byte and a truncated file: the checksum catches both before parsing.
  const std::string table = JoinPath(ckpt, "embedding/c0_emb.pt");
  ASSERT_TRUE(PathExists(table));
  std::string bytes = ReadFileToString(table);
  bytes[bytes.size() / 2] ^= 0x5a;
  testing::WriteFile(table, bytes);
  EXPECT_TZREC_ERROR(Evaluate(EvalOf(dir, model_dir)), "embedding/c0_emb.pt' is corrupt");
  testing::WriteFile(JoinPath(ckpt, "model.pt"), "");
  EXPECT_TZREC_ERROR(Evaluate(EvalOf(dir, model_dir)), "model.pt' is corrupt: 0 bytes");
  restore_pristine();

  // A missing table file: the checkpoint is incomplete.
  RemoveAll(table);
  EXPECT_TZREC_ERROR(TrainAndEvaluate(continue_options()), "embedding/c0_emb.pt (listed in its meta.json) is missing");
  // ... and without the file list (a checkpoint of an older version): continuing is an error,
  // not a table re-initialised at random.
  auto meta = nlohmann::json::parse(ReadFileToString(JoinPath(ckpt, "meta.json")));
  meta.erase("files");
  testing::WriteFile(JoinPath(ckpt, "meta.json"), meta.dump());
  EXPECT_TZREC_ERROR(TrainAndEvaluate(continue_options()), "has no state [embedding table c0_emb]");
  restore_pristine();

  // A dense optimizer archive that is no archive (with a matching checksum).
  testing::WriteFile(JoinPath(ckpt, "dense_optimizer.pt"), "PK\x03\x04 not really a zip");
  ResealCheckpointFile(ckpt, "dense_optimizer.pt");
  EXPECT_TZREC_ERROR(TrainAndEvaluate(continue_options()), "cannot read the dense optimizer state '");
  restore_pristine();

  // Bad data positions.
  for (const char* json : {R"({"x:0": -5})", R"({"__epochs_completed__": -1})",
                           R"({"__tzrec_next_reader__": 7, "__tzrec_readers__": 2})",
                           R"({"a": 18446744073709551615})", "[1, 2]"}) {
    SCOPED_TRACE(json);
    testing::WriteFile(JoinPath(ckpt, "dataloader_state.json"), json);
    ResealCheckpointFile(ckpt, "dataloader_state.json");
    EXPECT_TZREC_ERROR(TrainAndEvaluate(continue_options()), "dataloader_state.json");
  }
  restore_pristine();

  // NaN weights (sealed, as if written by a tool that does not check): eval says so.
  auto dense = ParseTensorArchive(ReadFileToString(JoinPath(ckpt, "model.pt")), "model.pt");
  ASSERT_TRUE(dense.count("output_mlp.weight"));
  dense["output_mlp.weight"] = dense["output_mlp.weight"].clone();
  dense["output_mlp.weight"].view(-1)[0] = std::nanf("");
  WriteTensorArchive(JoinPath(ckpt, "model.pt"), dense);
  ResealCheckpointFile(ckpt, "model.pt");
  EXPECT_TZREC_ERROR(Evaluate(EvalOf(dir, model_dir)), "[output_mlp.weight] has 1 NaN, 0 inf values");
  restore_pristine();
  EXPECT_NO_THROW(Evaluate(EvalOf(dir, model_dir)));
}

// Archive bytes of {"w": t} with `t`'s metadata as given: pickle_save writes offset, sizes and
// strides as they are, which is what a crafted file can hold.
std::string CraftedArchive(int64_t storage_floats, int64_t offset, std::vector<int64_t> sizes,
                           std::vector<int64_t> strides) {
  at::Tensor t = torch::zeros({storage_floats});
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  t.unsafeGetTensorImpl()->set_storage_offset(offset);
  c10::Dict<std::string, at::Tensor> dict;
  dict.insert("w", t);
  std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(dict));
  return std::string(bytes.begin(), bytes.end());
}

TEST(Reliability, CraftedTensorRecordsAreRejectedBeforeUse) {
  EXPECT_NO_THROW(ParseTensorArchive(CraftedArchive(12, 2, {2, 5}, {5, 1}), "ok.pt"));
  EXPECT_TZREC_ERROR(ParseTensorArchive(CraftedArchive(12, -4, {2, 5}, {5, 1}), "neg.pt"),
                     "negative storage offset -4");
  EXPECT_TZREC_ERROR(ParseTensorArchive(CraftedArchive(12, 3, {2, 5}, {5, 1}), "past.pt"),
                     "reaches past its storage of 48 bytes");
  EXPECT_TZREC_ERROR(ParseTensorArchive(CraftedArchive(12, 0, {4, 4}, {4, 1}), "big.pt"),
                     "reaches past its storage");
  EXPECT_TZREC_ERROR(ParseTensorArchive(CraftedArchive(12, 0, {3, 3}, {int64_t(1) << 62, 1}), "ovf.pt"),
                     "overflow");
  EXPECT_TZREC_ERROR(ParseTensorArchive("garbage", "junk.pt"), "tensor file 'junk.pt' is not a valid archive");

  // End to end: a crafted model.pt in a checkpoint without a file list (fine_tune_checkpoint
  // from elsewhere) is an error, not a crash or garbage weights.
  TempDir dir;
  const std::string config = WriteSmallConfig(dir);
  TrainSmall(dir, config, dir.File("m"));
  const std::string ckpt = ListCheckpoints(dir.File("m")).back().path;
  auto dense = ParseTensorArchive(ReadFileToString(JoinPath(ckpt, "model.pt")), "model.pt");
  c10::Dict<std::string, at::Tensor> dict;
  for (auto& [name, tensor] : dense) {
    at::Tensor t = tensor.clone();
    if (name == "output_mlp.weight") t.unsafeGetTensorImpl()->set_storage_offset(-1000000);
    dict.insert(name, t);
  }
  std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(dict));
  testing::WriteFile(JoinPath(ckpt, "model.pt"), std::string(bytes.begin(), bytes.end()));
  RemoveAll(JoinPath(ckpt, "meta.json"));
  auto tune = SmallOptions(dir, config, dir.File("tuned"));
  tune.fine_tune_checkpoint = ckpt;
  EXPECT_TZREC_ERROR(TrainAndEvaluate(tune), "[output_mlp.weight]: negative storage offset -1000000");
  EXPECT_TZREC_ERROR(Evaluate(EvalOf(dir, dir.File("m"))), "negative storage offset");
}

// Inputs the fuzz target found (tests/fuzz/run_tensor_archive_fuzz.sh): LibTorch's own loader
// read past its buffer on the first and sized a storage by the pickle's element count on the
// second. Both must now be clean errors.
TEST(Reliability, TensorArchiveFuzzFindingsStayFixed) {
  const std::string dir = testing::SourceDir() + "/tests/data/tensor_archive_regressions";
  EXPECT_TZREC_ERROR(ParseTensorArchive(ReadFileToString(dir + "/zip_read_past_buffer.pt"), "a.pt"),
                     "tensor file 'a.pt'");
  EXPECT_TZREC_ERROR(ParseTensorArchive(ReadFileToString(dir + "/numel_beyond_record.pt"), "b.pt"),
                     "reaches past its storage");
}

TEST(Reliability, OneTrainerPerModelDirAndLeftoversOfInterruptedSavesGo) {
  TempDir dir;
  const std::string config = WriteSmallConfig(dir);
  const std::string model_dir = dir.File("m");
  {
    ModelDirLock holder(model_dir);
    EXPECT_TZREC_ERROR(TrainAndEvaluate(SmallOptions(dir, config, model_dir)),
                       "is in use by another trainer (pid " + std::to_string(getpid()));
  }
  // Leftovers of saves interrupted by kill -9: ours (exact pattern) go, anything else stays.
  MakeDirs(model_dir + "/.model.ckpt-5.tmp-123-0/embedding");
  testing::WriteFile(model_dir + "/.model.ckpt-5.tmp-123-0/model.pt", "half");
  testing::WriteFile(model_dir + "/.pipeline.config.tmp-77-3", "half");
  MakeDirs(model_dir + "/.model.ckpt-3.tmp-9-1");  // a rotation that was cut short
  testing::WriteFile(model_dir + "/.model.ckpt-5.tmp-abc", "not ours");
  testing::WriteFile(model_dir + "/.my_notes", "not ours");
  TrainSmall(dir, config, model_dir);
  EXPECT_FALSE(PathExists(model_dir + "/.model.ckpt-5.tmp-123-0"));
  EXPECT_FALSE(PathExists(model_dir + "/.pipeline.config.tmp-77-3"));
  EXPECT_FALSE(PathExists(model_dir + "/.model.ckpt-3.tmp-9-1"));
  EXPECT_TRUE(PathExists(model_dir + "/.model.ckpt-5.tmp-abc"));
  EXPECT_TRUE(PathExists(model_dir + "/.my_notes"));
  EXPECT_TRUE(IsTempSiblingName(".model.ckpt-10.tmp-4242-0"));
  EXPECT_FALSE(IsTempSiblingName("model.ckpt-10.tmp-4242-0"));
  EXPECT_FALSE(IsTempSiblingName(".model.ckpt-10.tmp-42x-0"));

  // Killed right after the save of step 19, before its evaluation: continuing evaluates it.
  const std::string results = model_dir + "/train_eval_result_v2.txt";
  auto lines = ReadJsonLines(results);
  ASSERT_EQ(lines.size(), 2u);
  testing::WriteFile(results, lines[0].dump() + "\n");
  auto again = SmallOptions(dir, config, model_dir);
  again.continue_train = true;
  TrainAndEvaluate(again);
  lines = ReadJsonLines(results);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1]["global_step"], 19);
  // Continuing once more evaluates nothing new.
  TrainAndEvaluate(again);
  EXPECT_EQ(ReadJsonLines(results).size(), 2u);
}

TEST(Reliability, ResultFilesStayInsideModelDir) {
  TempDir dir;
  const std::string config = WriteSmallConfig(dir);
  const std::string model_dir = dir.File("m");
  TrainSmall(dir, config, model_dir);
  EvalOptions options = EvalOf(dir, model_dir);
  options.eval_result_filename = "../escaped.txt";
  EXPECT_TZREC_ERROR(Evaluate(options), "must not contain '..'");
  options.eval_result_filename = dir.File("absolute.txt");
  EXPECT_TZREC_ERROR(Evaluate(options), "must be relative to model_dir");
  EXPECT_FALSE(PathExists(dir.File("escaped.txt")));
  // A symlink planted under the result file's name is not followed.
  testing::WriteFile(dir.File("victim.txt"), "precious\n");
  ASSERT_EQ(symlink(dir.File("victim.txt").c_str(), (model_dir + "/eval_result.txt").c_str()), 0);
  options.eval_result_filename = "eval_result.txt";
  EXPECT_TZREC_ERROR(Evaluate(options), "is a symbolic link; not appending through it");
  EXPECT_EQ(ReadFileToString(dir.File("victim.txt")), "precious\n");
}

// The tzrec binary as a child process with its output in `log`; returns its PID.
pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  pid_t pid = fork();
  if (pid == 0) {
    FILE* out = std::freopen(log.c_str(), "a", stdout);
    if (out) dup2(fileno(stdout), 2);
    std::vector<char*> argv;
    std::string bin = TZREC_BINARY;
    argv.push_back(bin.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(bin.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// kill -9 at random moments (while training, saving or evaluating), then --continue_train,
// until the run completes: the final weights equal an uninterrupted run's, bit for bit.
TEST(Reliability, KilledAtRandomMomentsAndContinuedGivesTheSameWeights) {
  TempDir dir;
  const std::string config = WriteSmallConfig(dir);
  setenv("TORCH_MANUAL_SEED", "11", 1);
  setenv("USE_DETERMINISTIC_ALGORITHMS", "1", 1);
  auto args = [&](const std::string& model_dir, bool continue_train) {
    std::vector<std::string> a = {"train_eval", "--pipeline_config_path=" + config,
                                  "--model_dir=" + model_dir,
                                  "--train_input_path=" + dir.File("data/train/*.csv"),
                                  "--eval_input_path=" + dir.File("data/eval/*.csv"),
                                  R"(--edit_config_json={"data_config.shuffle": false, "train_config.num_steps": 40, "train_config.save_checkpoints_steps": 5, "train_config.keep_checkpoint_max": 3})"};
    if (continue_train) a.push_back("--continue_train");
    return a;
  };
  auto wait = [](pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return status;
  };
  const auto start = std::chrono::steady_clock::now();
  const int straight_status = wait(Spawn(args(dir.File("straight"), false), dir.File("straight.log")));
  ASSERT_TRUE(WIFEXITED(straight_status) && WEXITSTATUS(straight_status) == 0)
      << ReadFileToString(dir.File("straight.log"));
  const double run_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "kill-time seed " << seed);
  std::mt19937 rng(seed);
  // Startup (LibTorch load, data) takes a good part of a run: aim the kills at its later half.
  std::uniform_real_distribution<double> when(0.35 * run_ms, 1.0 * run_ms);
  const std::string model_dir = dir.File("killed");
  int kills = 0;
  bool finished = false;
  for (int attempt = 0; attempt < 12 && !finished; ++attempt) {
    const pid_t pid = Spawn(args(model_dir, attempt > 0), dir.File("killed.log"));
    if (attempt < 4) {
      std::this_thread::sleep_for(std::chrono::microseconds(static_cast<int64_t>(when(rng) * 1000)));
      kill(pid, SIGKILL);  // by PID: never a name pattern
    }
    const int status = wait(pid);
    if (WIFSIGNALED(status)) {
      ++kills;
      continue;
    }
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFileToString(dir.File("killed.log"));
    finished = true;
  }
  ASSERT_TRUE(finished) << ReadFileToString(dir.File("killed.log"));
  std::cout << "[reliability] " << kills << " kills (seed " << seed << ")" << std::endl;
  auto a = ListCheckpoints(dir.File("straight"));
  auto b = ListCheckpoints(model_dir);
  ASSERT_FALSE(b.empty());
  ASSERT_EQ(a.back().step, b.back().step);
  auto wa = LoadModelFile(a.back().path);
  auto wb = LoadModelFile(b.back().path);
  ASSERT_EQ(wa.size(), wb.size());
  for (auto& [name, tensor] : wa) {
    ASSERT_TRUE(wb.count(name)) << name;
    EXPECT_TRUE(torch::equal(tensor, wb[name])) << name;
  }
  for (const auto& name : ListDirectory(model_dir)) {
    EXPECT_FALSE(IsTempSiblingName(name)) << name;  // the last start cleaned up
  }
  // Every surviving checkpoint was evaluated (the ones killed before their evaluation too).
  std::set<int64_t> evaluated;
  for (const auto& line : ReadJsonLines(model_dir + "/train_eval_result_v2.txt")) {
    evaluated.insert(line["global_step"].get<int64_t>());
  }
  for (const auto& ckpt : b) EXPECT_TRUE(evaluated.count(ckpt.step)) << ckpt.step;
}

// A disk that fills up during a save (a small tmpfs in a private mount namespace): the run
// fails naming the write, and the earlier checkpoint stays complete and loadable.
TEST(Reliability, AFullDiskFailsTheSaveAndKeepsEarlierCheckpoints) {
  TempDir dir;
  const std::string config = WriteSmallConfig(dir);
  int code = 0;
  Shell("unshare -rm sh -c 'mount -t tmpfs -o size=64k tmpfs " + dir.path() + " && touch " +
            dir.File("probe") + "'",
        &code);
  if (code != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (unshare -rm / mount not permitted): full-disk case skipped";
  }
  // Size the disk from a real run: room for pipeline.config and one checkpoint, not two. A
  // large table makes the checkpoint dwarf the per-file page rounding of tmpfs.
  const std::string big_table = R"({"feature_configs[1].id_feature.num_buckets": 100000})";
  DeterministicRuntime();
  auto sizing = SmallOptions(dir, config, dir.File("sizing"));
  sizing.edit_config_json = big_table;
  TrainAndEvaluate(sizing);
  const auto sized = ListCheckpoints(dir.File("sizing"));
  std::string du = Shell("du -sk " + sized.front().path + " | cut -f1", &code);
  const int64_t checkpoint_kb = std::stoll(du);
  const int64_t disk_kb = checkpoint_kb * 3 / 2 + 64;
  const std::string mount = dir.File("disk");
  MakeDirs(mount);
  const std::string bin = TZREC_BINARY;
  const std::string train = bin + " train_eval --pipeline_config_path=" + config + " --model_dir=" +
                            mount + "/m --train_input_path='" + dir.File("data/train/*.csv") +
                            "' --eval_input_path='" + dir.File("data/eval/*.csv") + "' --edit_config_json='" +
                            big_table + "'";
  const std::string eval = bin + " eval --pipeline_config_path=" + mount +
                           "/m/pipeline.config --eval_input_path='" + dir.File("data/eval/*.csv") + "'";
  const std::string script = "mount -t tmpfs -o size=" + std::to_string(disk_kb) + "k tmpfs " + mount +
                             " && { " + train + " > " + dir.File("train.log") + " 2>&1; echo $? > " +
                             dir.File("train.rc") + "; ls " + mount + "/m > " + dir.File("ls.txt") + "; " +
                             eval + " > " + dir.File("eval.log") + " 2>&1; echo $? > " + dir.File("eval.rc") + "; }";
  testing::WriteFile(dir.File("full_disk.sh"), script + "\n");
  std::string out = Shell("TORCH_MANUAL_SEED=11 unshare -rm sh " + dir.File("full_disk.sh"), &code);
  ASSERT_EQ(code, 0) << out;
  const std::string train_log = ReadFileToString(dir.File("train.log"));
  EXPECT_NE(std::stoi(ReadFileToString(dir.File("train.rc"))), 0) << train_log;
  EXPECT_NE(train_log.find("disk full"), std::string::npos) << train_log;
  const std::string listing = ReadFileToString(dir.File("ls.txt"));
  EXPECT_NE(listing.find("model.ckpt-10"), std::string::npos) << listing;
  EXPECT_EQ(listing.find(".tmp-"), std::string::npos) << listing;  // the failed save cleaned up
  EXPECT_EQ(std::stoi(ReadFileToString(dir.File("eval.rc"))), 0) << ReadFileToString(dir.File("eval.log"));
  EXPECT_NE(ReadFileToString(dir.File("eval.log")).find("model-10"), std::string::npos);
}

TEST(Reliability, DataloaderStateValuesAreValidated) {
  EXPECT_NO_THROW(DataloaderState::FromJson(R"({"f:0": 3, "__epochs_completed__": 1})", "s.json"));
  EXPECT_TZREC_ERROR(DataloaderState::FromJson(R"({"f:0": -2})", "s.json"), "s.json: row of source 'f:0' must be >= 0");
  EXPECT_TZREC_ERROR(DataloaderState::FromJson(R"({"__tzrec_readers__": 99999999999})", "s.json"),
                     "'__tzrec_readers__' must be in [0, 2147483647]");
}

}  // namespace
}  // namespace tzrec
