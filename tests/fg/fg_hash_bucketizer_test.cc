// Hashing and bucketizing against known ids (TorchEasyRec's tests, TensorFlow's docs).
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <random>

#include "fg/fg_test_util.h"
#include "tzrec/common/error.h"
#include "tzrec/fg/bucketizer.h"
#include "tzrec/fg/fg_hash.h"

namespace tzrec::fg {
namespace {

TEST(FgHash, StdHashMatchesTorchEasyRecIds) {
  // Ids TorchEasyRec's FG gives with hash_bucket_size 100 (its feature tests).
  const std::pair<const char*, int64_t> kIds[] = {
      {"abc", 33}, {"efg", 44}, {"hij", 66}, {"xyz", 13}, {"0", 26}, {"1", 95},
      {"2", 70},   {"3", 13},   {"4", 56},   {"x", 35},   {"y", 30}, {"z", 54},
      {"ua_ia", 37}, {"ua_ib", 90}, {"ub_ia", 5}, {"ub_ib", 97}, {"ua_abc", 2}, {"ub_hij", 23}};
  for (const auto& [text, id] : kIds) {
    EXPECT_EQ(HashToBucket(text, 100, HashKind::kStdHash), id) << text;
  }
  // Float results (expr_feature with hash_bucket_size 100): 10, 20, 30 -> 39, 63, 46.
  EXPECT_EQ(HashFloatToBucket(10.0f, 100, HashKind::kStdHash), 39);
  EXPECT_EQ(HashFloatToBucket(20.0f, 100, HashKind::kStdHash), 63);
  EXPECT_EQ(HashFloatToBucket(30.0f, 100, HashKind::kStdHash), 46);
  EXPECT_EQ(StdFloatHash(0.0f), 0u);
}

TEST(FgHash, StdHashEqualsLibstdcxxOnEveryLength) {
  // Our spelled-out algorithm must agree with the library it mirrors (all tail lengths).
  std::mt19937 rng(7);
  for (int len = 0; len < 40; ++len) {
    std::string text(len, '\0');
    for (char& c : text) c = static_cast<char>(rng());
    EXPECT_EQ(StdStringHash(text), std::hash<std::string>{}(text)) << len;
  }
  EXPECT_EQ(StdFloatHash(1.5f), std::hash<float>{}(1.5f));
}

TEST(FgHash, FarmHashMatchesTensorFlowStringToHashBucketFast) {
  // tf.strings.to_hash_bucket_fast(["Hello", "TensorFlow", "2.x"], 3) == [0, 2, 2]
  // (TensorFlow's API documentation example).
  EXPECT_EQ(HashToBucket("Hello", 3, HashKind::kFarmHash), 0);
  EXPECT_EQ(HashToBucket("TensorFlow", 3, HashKind::kFarmHash), 2);
  EXPECT_EQ(HashToBucket("2.x", 3, HashKind::kFarmHash), 2);
}

Bucketizer FromText(const std::string& id_feature_body) {
  protos::IdFeature config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "feature_name: 'f' expression: 'user:f' embedding_dim: 4 " + id_feature_body, &config));
  return Bucketizer::FromConfig(config, "feature_configs[0].id_feature");
}

int64_t Id(const Bucketizer& b, const std::string& text) {
  int64_t id = -1;
  std::string error;
  EXPECT_TRUE(b.FromText(text, &id, &error)) << error;
  return id;
}

TEST(Bucketizer, VocabListReservesDefaultAndOov) {
  Bucketizer b = FromText("vocab_list: ['abc', 'efg']");
  EXPECT_EQ(b.num_embeddings(), 4);
  EXPECT_EQ(Id(b, "abc"), 2);
  EXPECT_EQ(Id(b, "efg"), 3);
  EXPECT_EQ(Id(b, "hij"), 1);
  EXPECT_EQ(Id(b, ""), 0);  // the default value ("")
  Bucketizer with_default = FromText("vocab_list: ['abc', 'efg'] default_value: 'xyz'");
  EXPECT_EQ(Id(with_default, "xyz"), 0);
  // A default listed again keeps its list position.
  Bucketizer listed = FromText("vocab_list: ['xyz', 'abc'] default_value: 'xyz'");
  EXPECT_EQ(Id(listed, "xyz"), 2);
  Bucketizer plain = FromText("vocab_list: ['xyz', 'abc', 'efg'] default_bucketize_value: 0");
  EXPECT_EQ(plain.num_embeddings(), 3);
  EXPECT_EQ(Id(plain, "abc"), 1);
  EXPECT_EQ(Id(plain, "hij"), 0);
}

TEST(Bucketizer, VocabDictAndFile) {
  Bucketizer b = FromText("vocab_dict: [{key: 'abc' value: 2}, {key: 'efg' value: 2}]");
  EXPECT_EQ(b.num_embeddings(), 3);
  EXPECT_EQ(Id(b, "abc"), 2);
  EXPECT_EQ(Id(b, "hij"), 1);
  EXPECT_EQ(Id(b, ""), 0);
  Bucketizer d = FromText("vocab_dict: [{key: 'abc' value: 1}, {key: 'efg' value: 1}] default_bucketize_value: 0");
  EXPECT_EQ(d.num_embeddings(), 2);
  EXPECT_EQ(Id(d, "hij"), 0);

  std::string dir = ::testing::TempDir();
  {
    std::ofstream(dir + "/vocab_words") << "xyz\n<OOV>\nabc\nefg\n";
    std::ofstream(dir + "/vocab_ids") << "abc 2\nefg 2\nxyz 0\n";
  }
  Bucketizer words = FromText("vocab_file: '" + dir + "/vocab_words' default_bucketize_value: 1");
  EXPECT_EQ(words.num_embeddings(), 4);
  EXPECT_EQ(Id(words, "efg"), 3);
  EXPECT_EQ(Id(words, "hij"), 1);
  Bucketizer ids = FromText("vocab_file: 'vocab_ids' asset_dir: '" + dir + "' default_bucketize_value: 1");
  EXPECT_EQ(ids.num_embeddings(), 3);
  EXPECT_EQ(Id(ids, "efg"), 2);
  EXPECT_EQ(Id(ids, "xyz"), 0);
  EXPECT_THROW(FromText("vocab_file: '" + dir + "/vocab_words'"), Error);  // needs dbv
  EXPECT_THROW(FromText("vocab_file: '/nonexistent/vocab' default_bucketize_value: 1"), Error);
}

TEST(Bucketizer, NumBucketsAndBoundaries) {
  Bucketizer b = FromText("num_buckets: 10");
  EXPECT_EQ(Id(b, "7"), 7);
  int64_t id;
  std::string error;
  EXPECT_FALSE(b.FromText("10", &id, &error));
  EXPECT_NE(error.find("out of range [0, 10)"), std::string::npos) << error;
  EXPECT_FALSE(b.FromText("-1", &id, &error));
  EXPECT_FALSE(b.FromText("x", &id, &error));

  protos::RawFeature raw;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "feature_name: 'r' expression: 'user:r' boundaries: [-0.5, 0.5, 1.5, 2.5]", &raw));
  Bucketizer bounds = Bucketizer::FromConfig(raw, "raw");
  EXPECT_EQ(bounds.num_embeddings(), 5);
  ASSERT_TRUE(bounds.FromNumber(-1, &id, &error));
  EXPECT_EQ(id, 0);
  ASSERT_TRUE(bounds.FromNumber(1.5, &id, &error));  // on a boundary: goes up
  EXPECT_EQ(id, 3);
  ASSERT_TRUE(bounds.FromNumber(3, &id, &error));
  EXPECT_EQ(id, 4);
  raw.clear_boundaries();
  raw.add_boundaries(1);
  raw.add_boundaries(1);
  EXPECT_THROW(Bucketizer::FromConfig(raw, "raw"), Error);
}

}  // namespace
}  // namespace tzrec::fg
