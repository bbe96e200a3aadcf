// Helpers of the export and predict tests: predict output read back, outputs compared, and
// an export's scripted_model.pt checked in LibTorch and in Python torch. Not thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "test_util.h"
#include "tzrec/serving/predict.h"

namespace tzrec::testing {

// Column name -> values of a predict CSV (numbers only; a quoted list cell such as an
// embedding "0.1,0.2" adds all its numbers, row after row).
std::map<std::string, std::vector<double>> ReadCsvColumns(const std::string& path);
// The cells of one CSV line, quotes removed ("a,\"1,2\",b" -> a | 1,2 | b).
std::vector<std::string> CsvCells(const std::string& line);

double MaxAbsDiff(const std::vector<double>& a, const std::vector<double>& b);

// Runs predict into `output_dir` as CSV; returns ReadCsvColumns of its part-0.csv.
std::map<std::string, std::vector<double>> RunPredict(PredictOptions options, const std::string& output_dir);

// scripted_model.pt of `export_dir` loaded by LibTorch and run over `input` batch by batch, its
// predictions compared with `expected` (what the model computes for those rows, flattened);
// the first batch is also run by Python torch (/usr/bin/python3, Debian's python3-torch)
// through tests/interop/scripted_model_parity.py and must agree within 1e-5. Returns the
// largest difference in LibTorch.
// `python_tolerance` loosens the Python check for models that amplify rounding (capsule routing).
double CheckScriptedModel(const std::string& export_dir, const std::string& input,
                          const std::map<std::string, std::vector<double>>& expected, const TempDir& dir,
                          double python_tolerance = 1e-5);

}  // namespace tzrec::testing
