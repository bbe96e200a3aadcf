#include "tzrec/cli/commands.h"

#include <cstdio>
#include <functional>
#include <map>

#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/tools/create_fg_json.h"
#include "tzrec/dist/dist_check.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/serving/predict.h"
#include "tzrec/serving/tdm_retrieval.h"
#include "tzrec/serving/server.h"
#include "tzrec/tools/launch.h"
#include "tzrec/tools/faiss_index.h"
#include "tzrec/train/feature_selection.h"
#include "tzrec/tools/gen_data.h"
#include "tzrec/tools/hitrate.h"
#include "tzrec/tools/tdm_cluster_tree.h"
#include "tzrec/tools/tdm_tree.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

int TrainEvalMain(const std::vector<std::string>& args) {
  Flags flags("train_eval",
              "Trains a model from a TorchEasyRec pipeline config, saving checkpoints and "
              "evaluating after each save.",
              {{"pipeline_config_path", "path to the pipeline config (.config text or .json)"},
               {"model_dir", "model directory (overrides the config)"},
               {"train_input_path", "train data (overrides the config)"},
               {"eval_input_path", "eval data (overrides the config)"},
               {"continue_train", "continue from the latest checkpoint in model_dir", true},
               {"fine_tune_checkpoint", "checkpoint (or model_dir) to initialise weights from"},
               {"edit_config_json", "JSON object of config path -> value overrides"},
               {"ignore_restore_optimizer", "do not restore optimizer state", true}});
  if (!flags.Parse(args)) return 0;
  TrainEvalOptions options;
  options.pipeline_config_path = flags.Get("pipeline_config_path");
  options.model_dir = flags.Get("model_dir");
  options.train_input_path = flags.Get("train_input_path");
  options.eval_input_path = flags.Get("eval_input_path");
  options.continue_train = flags.GetSwitch("continue_train");
  options.fine_tune_checkpoint = flags.Get("fine_tune_checkpoint");
  options.edit_config_json = flags.Get("edit_config_json");
  options.ignore_restore_optimizer = flags.GetSwitch("ignore_restore_optimizer");
  TrainAndEvaluate(options);
  return 0;
}

int EvalMain(const std::vector<std::string>& args) {
  Flags flags("eval", "Evaluates a checkpoint on the eval data and appends the metrics to "
                      "model_dir/<eval_result_filename>.",
              {{"pipeline_config_path", "path to the pipeline config (e.g. model_dir/pipeline.config)"},
               {"checkpoint_path", "checkpoint directory (default: latest in model_dir)"},
               {"eval_input_path", "eval data (overrides the config)"},
               {"eval_result_filename", "result file name inside model_dir", false,
                "eval_result.txt"}});
  if (!flags.Parse(args)) return 0;
  EvalOptions options;
  options.pipeline_config_path = flags.Get("pipeline_config_path");
  options.checkpoint_path = flags.Get("checkpoint_path");
  options.eval_input_path = flags.Get("eval_input_path");
  options.eval_result_filename = flags.Get("eval_result_filename");
  Evaluate(options);
  return 0;
}

struct Command {
  std::function<int(const std::vector<std::string>&)> run;
  const char* summary;
};

const std::map<std::string, Command>& Commands() {
  static const std::map<std::string, Command> commands = {
      {"train_eval", {TrainEvalMain, "train a model, evaluating after each checkpoint"}},
      {"eval", {EvalMain, "evaluate a checkpoint"}},
      {"gen_data", {GenDataMain, "write mock data with a planted signal for a config"}},
      {"export", {ExportMain, "export a checkpoint for predict and serving (weights, tables, fg.json)"}},
      {"serve", {ServeMain, "serve an export over HTTP with feature generation and dynamic batching"}},
      {"predict", {PredictMain, "score CSV/Parquet rows with an export or a checkpoint"}},
      {"create_fg_json", {CreateFgJsonMain, "write fg.json (and its asset files) for a config"}},
      {"feature_selection", {FeatureSelectionMain, "rank features by their learnt variational dropout and write a reduced config"}},
      {"create_faiss_index", {CreateFaissIndexMain, "build a FAISS index of item tower embeddings"}},
      {"hitrate", {HitrateMain, "offline retrieval hit rate of user embeddings against item embeddings"}},
      {"tdm_init_tree", {TdmInitTreeMain, "build TDM's item tree and its node and edge tables"}},
      {"tdm_cluster_tree", {TdmClusterTreeMain, "rebuild TDM's item tree by k-means over learnt item embeddings"}},
      {"tdm_retrieval", {TdmRetrievalMain, "recall items per user by beam search down a TDM tree with an exported TDM"}},
      {"launch", {LaunchMain, "run a command as the local ranks of a distributed job (torchrun)"}},
      {"dist_check", {DistCheckMain, "check the process group's collectives across ranks"}},
  };
  return commands;
}

}  // namespace

std::string CommandsHelp() {
  std::string text = "usage: tzrec <command> [flags]   (tzrec <command> --help for flags)\n\ncommands:\n";
  for (const auto& kv : Commands()) {
    std::string name = "  " + kv.first;
    name.resize(22, ' ');
    text += name + kv.second.summary + "\n";
  }
  return text;
}

int RunCommand(const std::string& command, const std::vector<std::string>& args) {
  auto it = Commands().find(command);
  if (it == Commands().end()) {
    std::string known;
    for (const auto& kv : Commands()) known += (known.empty() ? "" : ", ") + kv.first;
    Fail("unknown command '", command, "'; known: ", known);
  }
  return it->second.run(args);
}

}  // namespace tzrec
