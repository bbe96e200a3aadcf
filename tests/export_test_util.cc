#include "export_test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/jit/serialization/import.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/batch/batch_stream.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/serving/scripted_model.h"

namespace tzrec::testing {

std::vector<std::string> CsvCells(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '"') {
      if (quoted && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back() += '"';
        ++i;
      } else {
        quoted = !quoted;
      }
    } else if (c == ',' && !quoted) {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  return cells;
}

std::map<std::string, std::vector<double>> ReadCsvColumns(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::string line;
  std::getline(in, line);
  std::vector<std::string> names = CsvCells(line);
  std::map<std::string, std::vector<double>> columns;
  while (std::getline(in, line)) {
    std::vector<std::string> values = CsvCells(line);
    EXPECT_EQ(values.size(), names.size()) << line;
    for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
      std::string cell = values[i];
      std::replace(cell.begin(), cell.end(), ';', ',');  // multi-interest embeddings: "a,b;c,d"
      for (const std::string& item : Split(cell, ",")) {
        double v = 0;
        EXPECT_TRUE(ParseDouble(item, &v)) << values[i];
        columns[names[i]].push_back(v);
      }
    }
  }
  return columns;
}

double MaxAbsDiff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

std::map<std::string, std::vector<double>> RunPredict(PredictOptions options,
                                                      const std::string& output_dir) {
  options.predict_output_path = output_dir;
  options.writer_type = "CsvWriter";
  Predict(options);
  return ReadCsvColumns(JoinPath(output_dir, "part-0.csv"));
}

// scripted_model.pt of `export_dir` loaded by LibTorch and run over `input` batch by batch, its
// predictions compared with `expected` (what the model computes for those rows); the first batch
// is also run by Python torch (/usr/bin/python3, Debian's python3-torch) through
// tests/interop/scripted_model_parity.py. Returns the largest difference of both.
double CheckScriptedModel(const std::string& export_dir, const std::string& input,
                          const std::map<std::string, std::vector<double>>& expected, const TempDir& dir,
                          double python_tolerance) {
  EXPECT_EQ(ReadExportManifest(export_dir)["scripted_model"], kScriptedModelFile);
  const std::string export_name = export_dir.substr(export_dir.rfind('/') + 1);
  const std::string model_path = JoinPath(export_dir, kScriptedModelFile);
  torch::jit::Module module = torch::jit::load(model_path);
  auto pipeline = LoadExportedPipeline(export_dir, PipelineMode::kPredict);
  auto dataset = pipeline->MakeDataset(input, DatasetMode::kPredict, 1, nullptr);
  BatchStream stream(*dataset, 0);
  Batch batch;
  std::map<std::string, std::vector<double>> got;
  nlohmann::json cases;
  c10::NoGradGuard no_grad;
  while (stream.Next(&batch)) {
    auto inputs = ScriptedInputs(batch, pipeline->FeaturePointers());
    auto outputs = RunScriptedModule(module, inputs);
    const bool first = cases.empty();
    for (const auto& [name, tensor] : outputs) {
      at::Tensor t = tensor.contiguous();
      got[name].insert(got[name].end(), t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
      if (first) cases["outputs"][name] = got[name];
    }
    if (!first) continue;
    for (const auto& [name, tensor] : inputs) {
      at::Tensor t = tensor.contiguous();
      nlohmann::json spec = {{"shape", t.sizes().vec()}};
      if (t.scalar_type() == at::kLong) {
        spec["dtype"] = "int64";
        spec["data"] = std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
      } else {
        spec["dtype"] = "float32";
        spec["data"] = std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
      }
      cases["inputs"][name] = spec;
    }
  }
  double worst = 0;
  EXPECT_EQ(got.size(), expected.size());
  for (const auto& [name, values] : expected) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(got.count(name));
    worst = std::max(worst, MaxAbsDiff(got[name], values));
  }
  // Python: the same module and the first batch's inputs.
  const std::string cases_path = dir.File(export_name + "_cases.json");
  std::ofstream(cases_path) << cases.dump();
  int exit_code = -1;
  const std::string output = testing::Shell("/usr/bin/python3 " + testing::SourceDir() +
                                                "/tests/interop/scripted_model_parity.py " + model_path + " " +
                                                cases_path,
                                            &exit_code);
  EXPECT_EQ(exit_code, 0) << output;
  nlohmann::json report = nlohmann::json::parse(output.substr(output.rfind('{')), nullptr, false);
  EXPECT_FALSE(report.is_discarded()) << output;
  if (!report.is_discarded()) {
    std::printf("scripted model %s in Python torch %s: max |diff| %.3g\n", export_name.c_str(),
                report.value("torch", "?").c_str(), report.value("max_abs_diff", -1.0));
    // The same module in another process: GEMM blocking may differ with the thread count.
    EXPECT_LE(report.value("max_abs_diff", 1.0), python_tolerance) << output;
    EXPECT_EQ(report["outputs"].size(), expected.size()) << output;
  }
  return worst;
}

}  // namespace tzrec::testing
