// The layer order of docs/ARCHITECTURE.md holds: no file of src/tzrec includes a file of a
// higher layer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "test_util.h"

namespace tzrec {
namespace {

std::vector<std::string> Layers() {
  std::ifstream in(testing::SourceDir() + "/docs/ARCHITECTURE.md");
  std::string line;
  bool inside = false, in_block = false;
  std::vector<std::string> layers;
  while (std::getline(in, line)) {
    if (line.find("<!-- layers") == 0) inside = true;
    else if (line.find("<!-- end layers") == 0) inside = false;
    else if (inside && line.rfind("```", 0) == 0) in_block = !in_block;
    else if (inside && in_block && !line.empty()) layers.push_back(line.substr(0, line.find(' ')));
  }
  return layers;
}

TEST(Layering, NoFileIncludesAHigherLayer) {
  const std::vector<std::string> layers = Layers();
  ASSERT_GT(layers.size(), 10u);
  std::map<std::string, size_t> level;
  for (size_t i = 0; i < layers.size(); ++i) level[layers[i]] = i;
  const std::filesystem::path root = testing::SourceDir() + "/src/tzrec";
  const std::regex include(R"(^\s*#\s*include\s+"tzrec/([a-z_]+)/)");
  int files = 0;
  std::vector<std::string> violations;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    const std::string ext = entry.path().extension().string();
    if (ext != ".h" && ext != ".cc" && ext != ".inc") continue;
    const std::string layer = std::filesystem::relative(entry.path(), root).begin()->string();
    if (layer == entry.path().filename().string()) continue;  // tzrec/version.h
    ASSERT_TRUE(level.count(layer)) << "directory src/tzrec/" << layer << " is not in docs/ARCHITECTURE.md";
    ++files;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line)) {
      std::smatch m;
      if (!std::regex_search(line, m, include) || m[1] == "protos") continue;
      ASSERT_TRUE(level.count(m[1])) << entry.path() << " includes unknown layer " << m[1];
      if (level.at(m[1]) > level.at(layer)) {
        violations.push_back(std::filesystem::relative(entry.path(), root).string() + " -> " + m[1].str());
      }
    }
  }
  EXPECT_GT(files, 100);
  EXPECT_TRUE(violations.empty()) << ::testing::PrintToString(violations);
}

}  // namespace
}  // namespace tzrec
