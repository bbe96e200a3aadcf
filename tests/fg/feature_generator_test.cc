// Feature generation per feature type, with expected outputs from TorchEasyRec's FG tests
// (hash ids) or computed by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fg/fg_test_util.h"
#include "tzrec/common/error.h"

namespace tzrec::fg {
namespace {

using testing::Batch;
using testing::Cells;
using testing::DoubleColumn;
using testing::Generate;
using testing::IntColumn;
using testing::ListColumn;
using testing::TextColumn;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

const std::nullopt_t kNull = std::nullopt;

std::string IdConfig(const std::string& body) {
  return "feature_configs { id_feature { feature_name: 'id_feat' expression: 'user:id_input' "
         "embedding_dim: 16 " + body + " } }";
}

void ExpectSparse(const ParsedBatch& out, const std::string& name, std::vector<int64_t> values,
                  std::vector<int32_t> lengths) {
  ASSERT_TRUE(out.sparse.count(name)) << name;
  EXPECT_THAT(out.sparse.at(name).values, ElementsAreArray(values)) << name;
  EXPECT_THAT(out.sparse.at(name).lengths, ElementsAreArray(lengths)) << name;
}

void ExpectDense(const ParsedBatch& out, const std::string& name, std::vector<float> values) {
  ASSERT_TRUE(out.dense.count(name)) << name;
  EXPECT_THAT(out.dense.at(name).values, Pointwise(FloatNear(1e-5), values)) << name;
}

TEST(FgIdFeature, HashBucketsWithAndWithoutDefault) {
  auto batch = Batch({TextColumn("id_input", {"abc\x1d" "efg", kNull, "hij"})});
  ExpectSparse(Generate(IdConfig("hash_bucket_size: 100"), batch), "id_feat", {33, 44, 66}, {2, 0, 1});
  ExpectSparse(Generate(IdConfig("hash_bucket_size: 100 default_value: 'xyz'"), batch), "id_feat",
               {33, 44, 13, 66}, {2, 1, 1});
  // Parquet LIST<string> input reads the same.
  auto list = Batch({ListColumn("id_input", {"abc\x1d" "efg", kNull, "hij"})});
  ExpectSparse(Generate(IdConfig("hash_bucket_size: 100 default_value: 'xyz'"), list), "id_feat",
               {33, 44, 13, 66}, {2, 1, 1});
  // Integer input hashes its decimal text.
  auto ints = Batch({IntColumn("id_input", {1, 2, kNull, 3})});
  ExpectSparse(Generate(IdConfig("hash_bucket_size: 100 default_value: '4'"), ints), "id_feat",
               {95, 70, 56, 13}, {1, 1, 1, 1});
}

TEST(FgIdFeature, VocabNumBucketsAndWeights) {
  auto batch = Batch({TextColumn("id_input", {"abc\x1d" "efg", "", "hij"})});
  ExpectSparse(Generate(IdConfig("vocab_list: ['abc', 'efg'] default_value: 'xyz'"), batch),
               "id_feat", {2, 3, 0, 1}, {2, 1, 1});
  ExpectSparse(Generate(IdConfig("vocab_list: ['xyz', 'abc', 'efg'] default_bucketize_value: 0"),
                        batch),
               "id_feat", {1, 2, 0}, {2, 0, 1});
  auto numbers = Batch({TextColumn("id_input", {"0\x1d" "1", "", "2"})});
  ExpectSparse(Generate(IdConfig("num_buckets: 100 default_value: '3'"), numbers), "id_feat",
               {0, 1, 3, 2}, {2, 1, 1});
  auto weighted = Batch({TextColumn("id_input", {"123:0.5", "1391:0.3", kNull, "12:0.9\x1d" "123:0.21", ""})});
  auto out = Generate(IdConfig("num_buckets: 100000 weighted: true"), weighted);
  ExpectSparse(out, "id_feat", {123, 1391, 12, 123}, {1, 1, 0, 2, 0});
  EXPECT_THAT(out.sparse.at("id_feat").weights, Pointwise(FloatNear(1e-6), {0.5f, 0.3f, 0.9f, 0.21f}));
}

TEST(FgIdFeature, OutOfRangeIdNamesRowAndFeature) {
  auto batch = Batch({TextColumn("id_input", {"1", "100"})});
  try {
    Generate(IdConfig("num_buckets: 100"), batch);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("test.csv:3"));
    EXPECT_THAT(e.what(), HasSubstr("feature 'id_feat'"));
    EXPECT_THAT(e.what(), HasSubstr("feature_configs[0].id_feature"));
    EXPECT_THAT(e.what(), HasSubstr("out of range [0, 100)"));
  }
}

std::string RawConfig(const std::string& body) {
  return "feature_configs { raw_feature { feature_name: 'raw_feat' expression: 'user:raw_input' " +
         body + " } }";
}

TEST(FgRawFeature, DenseDefaultsAndNormalizers) {
  ExpectDense(Generate(RawConfig("default_value: '0.1'"),
                       Batch({TextColumn("raw_input", {"0.2", "", "0.3", kNull})})),
              "raw_feat", {0.2f, 0.1f, 0.3f, 0.1f});
  ExpectDense(Generate(RawConfig("default_value: '0.1\x1d" "0.4' value_dim: 2"),
                       Batch({TextColumn("raw_input", {"0.2\x1d" "0.5", "", "0.3\x1d" "0.6"})})),
              "raw_feat", {0.2f, 0.5f, 0.1f, 0.4f, 0.3f, 0.6f});
  // The default is not normalized.
  ExpectDense(Generate(RawConfig("default_value: '0.01' normalizer: 'method=log10,threshold=0.05,default=-5'"),
                       Batch({TextColumn("raw_input", {"0.1", "", "10"})})),
              "raw_feat", {-1.0f, 0.01f, 1.0f});
  ExpectDense(Generate(RawConfig("normalizer: 'method=zscore,mean=0.1,standard_deviation=10.0'"),
                       Batch({DoubleColumn("raw_input", {0.2, 0.1, 0.3})})),
              "raw_feat", {0.01f, 0.0f, 0.02f});
  ExpectDense(Generate(RawConfig("default_value: '0.1\x1d" "0.4' value_dim: 2 normalizer: 'method=minmax,min=0.1,max=0.6'"),
                       Batch({TextColumn("raw_input", {"0.2\x1d" "0.5", "", "0.3\x1d" "0.6"})})),
              "raw_feat", {0.2f, 0.8f, 0.1f, 0.4f, 0.4f, 1.0f});
  ExpectDense(Generate(RawConfig("normalizer: 'method=expression,expr=sign(x)'"),
                       Batch({DoubleColumn("raw_input", {-3, 0, 2})})),
              "raw_feat", {-1, 0, 1});
  EXPECT_THROW(Generate(RawConfig("value_dim: 2"), Batch({TextColumn("raw_input", {"1\x1d" "2\x1d" "3"})})), Error);
  EXPECT_THROW(Generate(RawConfig(""), Batch({TextColumn("raw_input", {"abc"})})), Error);
  EXPECT_THROW(Generate(RawConfig("normalizer: 'method=cube'"), Batch({TextColumn("raw_input", {"1"})})), Error);
}

TEST(FgRawFeature, Boundaries) {
  ExpectSparse(Generate(RawConfig("boundaries: [0.05, 0.15, 0.25] embedding_dim: 16 default_value: '0.1'"),
                        Batch({DoubleColumn("raw_input", {0.2, 0.1, 0.3, kNull})})),
               "raw_feat", {2, 1, 3, 1}, {1, 1, 1, 1});
  ExpectSparse(Generate(RawConfig("boundaries: [0.05, 0.15, 0.25] embedding_dim: 16 default_value: ''"),
                        Batch({TextColumn("raw_input", {"0.2", "", "0.3"})})),
               "raw_feat", {2, 3}, {1, 0, 1});
  ExpectSparse(Generate(RawConfig("boundaries: [0.05, 0.15, 0.25] embedding_dim: 16 value_dim: 2 "
                                  "default_value: '0.1\x1d" "0.4'"),
                        Batch({TextColumn("raw_input", {"0.2\x1d" "0.5", "", "0.3\x1d" "0.6"})})),
               "raw_feat", {2, 3, 1, 3, 3, 3}, {2, 2, 2});
}

TEST(FgComboFeature, CartesianProductHashedAndVocab) {
  const std::string config =
      "feature_configs { combo_feature { feature_name: 'combo' expression: ['user:uid_str', 'item:iid_str'] "
      "embedding_dim: 16 hash_bucket_size: 100 %s } }";
  auto batch = Batch({TextColumn("uid_str", {"ua\x1d" "ub", "uc\x1d" "ud", "uee\x1d" "uf", "ug", "uh", "uj", "", kNull, ""}),
                      TextColumn("iid_str", {"ia\x1d" "ib", "ic", "", "id\x1d" "ie", "if", kNull, "ig\x01" "dih", "ij", ""})});
  auto with = [&](const std::string& extra) {
    std::string text = config;
    text.replace(text.find("%s"), 2, extra);
    return text;
  };
  ExpectSparse(Generate(with(""), batch), "combo", {37, 90, 5, 97, 60, 56, 40, 57, 55},
               {4, 2, 0, 2, 1, 0, 0, 0, 0});
  ExpectSparse(Generate(with("default_value: 'xyz'"), batch), "combo",
               {37, 90, 5, 97, 60, 56, 13, 40, 57, 55, 13, 13, 13, 13}, {4, 2, 1, 2, 1, 1, 1, 1, 1});
}

std::string LookupConfig(const std::string& body) {
  return "feature_configs { lookup_feature { feature_name: 'lookup' map: 'user:kv_cate' key: 'item:cate' " +
         body + " } }";
}

RecordBatch LookupData() {
  Cells kv(5, std::optional<std::string>("ca:1\x1d" "cb:2"));
  kv.push_back("");
  kv.push_back("");
  return Batch({TextColumn("kv_cate", kv),
                TextColumn("cate", {"ca\x1d" "cb", "ca", "ca\x1d" "cd", "cd", "", "ca", ""})});
}

TEST(FgLookupFeature, CombinersBucketizersAndVectors) {
  ExpectDense(Generate(LookupConfig(""), LookupData()), "lookup", {3, 1, 1, 0, 0, 0, 0});
  ExpectDense(Generate(LookupConfig("combiner: 'mean'"), LookupData()), "lookup", {1.5f, 1, 1, 0, 0, 0, 0});
  const std::string bounds = "embedding_dim: 16 boundaries: [-0.5, 0.5, 1.5, 2.5] ";
  ExpectSparse(Generate(LookupConfig(bounds), LookupData()), "lookup", {4, 2, 2, 1, 1, 1, 1},
               {1, 1, 1, 1, 1, 1, 1});
  ExpectSparse(Generate(LookupConfig(bounds + "combiner: 'mean'"), LookupData()), "lookup",
               {3, 2, 2, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1});
  ExpectSparse(Generate(LookupConfig(bounds + "combiner: ''"), LookupData()), "lookup",
               {2, 3, 2, 2, 1, 1, 1, 1}, {2, 1, 1, 1, 1, 1, 1});
  ExpectSparse(Generate(LookupConfig("embedding_dim: 16 num_buckets: 10 default_value: ''"), LookupData()),
               "lookup", {1, 2, 1, 1}, {2, 1, 1, 0, 0, 0, 0});
  Cells kv(5, std::optional<std::string>("ca:x\x1d" "cb:y"));
  kv.push_back("");
  kv.push_back("");
  auto text_values = Batch({TextColumn("kv_cate", kv), LookupData().columns[1]});
  ExpectSparse(Generate(LookupConfig("embedding_dim: 16 hash_bucket_size: 100 default_value: 'z'"), text_values),
               "lookup", {35, 30, 35, 35, 54, 54, 54, 54}, {2, 1, 1, 1, 1, 1, 1});
  auto vectors = Batch({TextColumn("kv_cate", {"ca:1,2\x1d" "cb:3,4", "ca:1,2", "", "ca:1,2"}),
                        TextColumn("cate", {"ca", "cd", "ca", ""})});
  ExpectDense(Generate(LookupConfig("value_dim: 2 default_value: '0\x1d" "0'"), vectors), "lookup",
              {1, 2, 0, 0, 0, 0, 0, 0});
  auto bad = Batch({TextColumn("kv_cate", {"ca:abc"}), TextColumn("cate", {"ca"})});
  EXPECT_THROW(Generate(LookupConfig(""), bad), Error);
  // Bad map syntax names the entry, the row and the feature.
  auto syntax = Batch({TextColumn("kv_cate", {"ca:1", "ca1\x1d" "cb:2"}), TextColumn("cate", {"ca", "cb"})});
  try {
    Generate(LookupConfig("embedding_dim: 4 hash_bucket_size: 10"), syntax);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("test.csv:3"));
    EXPECT_THAT(e.what(), HasSubstr("map entry 'ca1' is not key:value"));
    EXPECT_THAT(e.what(), HasSubstr("feature 'lookup'"));
  }
}

TEST(FgMatchFeature, NestedMapHits) {
  const std::string base =
      "feature_configs { match_feature { feature_name: 'match' nested_map: 'user:m' pkey: 'item:cate' "
      "skey: 'item:brand' %s } }";
  auto with = [&](const std::string& extra) {
    std::string text = base;
    text.replace(text.find("%s"), 2, extra);
    return text;
  };
  Cells map(3, std::optional<std::string>("ca^ba:1,bb:2|cb^ba:3,bb:4"));
  map.push_back("");
  map.push_back("");
  auto batch = Batch({TextColumn("m", map), TextColumn("cate", {"ca", "ca", "", "ca", kNull}),
                      TextColumn("brand", {"ba", "", "", "ba", kNull})});
  ExpectDense(Generate(with(""), batch), "match", {1, 0, 0, 0, 0});
  ExpectSparse(Generate(with("embedding_dim: 16 boundaries: [-0.5, 0.5, 1.5, 2.5]"), batch), "match",
               {2, 1, 1, 1, 1}, {1, 1, 1, 1, 1});
  ExpectSparse(Generate(with("embedding_dim: 16 num_buckets: 10 default_value: ''"), batch), "match",
               {1}, {1, 0, 0, 0, 0});
  // pkey ALL: every primary key's "bb" value, summed for a dense output.
  auto all = Batch({TextColumn("m", {"ca^ba:1,bb:2|cb^ba:3,bb:4"}), TextColumn("brand", {"bb"})});
  ExpectDense(Generate("feature_configs { match_feature { feature_name: 'match' nested_map: 'user:m' "
                       "pkey: 'ALL' skey: 'item:brand' } }", all),
              "match", {6});
  auto bad = Batch({TextColumn("m", {"ca-ba:1"}), TextColumn("cate", {"ca"}), TextColumn("brand", {"ba"})});
  try {
    Generate(with(""), bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("lacks '^'"));
    EXPECT_THAT(e.what(), HasSubstr("feature 'match'"));
  }
}

std::string ExprConfig(const std::string& expression, const std::string& body) {
  return "feature_configs { expr_feature { feature_name: 'expr' expression: '" + expression +
         "' variables: ['user:a', 'item:b'] " + body + " } }";
}

TEST(FgExprFeature, MissingVariablesBroadcastAndBuckets) {
  auto batch = Batch({TextColumn("a", {"0.2", "", "0.3", kNull}), DoubleColumn("b", {0.2, 0.2, 0.2, 0.2})});
  ExpectDense(Generate(ExprConfig("a+b", "default_value: '0.1'"), batch), "expr", {0.4f, 0.1f, 0.5f, 0.1f});
  auto broadcast = Batch({DoubleColumn("a", {0.2, 0.1, 0.3, kNull}), DoubleColumn("b", {0.2})});
  ExpectDense(Generate(ExprConfig("a+b", "default_value: '0.1'"), broadcast), "expr", {0.4f, 0.3f, 0.5f, 0.1f});
  ExpectSparse(Generate(ExprConfig("a+b", "default_value: '0.1' embedding_dim: 8 boundaries: [0.15, 0.25, 0.35]"),
                        broadcast),
               "expr", {3, 2, 3, 0}, {1, 1, 1, 1});
  auto vectors = Batch({TextColumn("a", {"0.2\x1d" "0.2", "", "0.3\x1d" "0.4"}),
                        TextColumn("b", {"0.2\x1d" "0.2", "0.2\x1d" "0.2", "0.2\x1d" "0.2"})});
  ExpectSparse(Generate(ExprConfig("dot(a,b)", "embedding_dim: 8 boundaries: [0.05, 0.10, 0.15] default_value: ''"),
                        vectors),
               "expr", {1, 2}, {1, 0, 1});
  auto single = Batch({DoubleColumn("a", {1.0, 2.0, 3.0, kNull}), DoubleColumn("b", {0, 0, 0, 0})});
  ExpectSparse(Generate(ExprConfig("a*10", "embedding_dim: 8 hash_bucket_size: 100"), single), "expr",
               {39, 63, 46, 0}, {1, 1, 1, 1});
  ExpectSparse(Generate(ExprConfig("a*10", "embedding_dim: 8 num_buckets: 100"), single), "expr",
               {10, 20, 30, 0}, {1, 1, 1, 1});
  try {
    Generate(ExprConfig("foo(a)+b", ""), single);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown function 'foo'"));
    EXPECT_THAT(e.what(), HasSubstr("'expr'"));
  }
}

std::string OverlapConfig(const std::string& method, const std::string& body = "") {
  return "feature_configs { overlap_feature { feature_name: 'ov' query: 'user:query' title: 'item:title' "
         "method: '" + method + "' " + body + " } }";
}

TEST(FgOverlapFeature, Methods) {
  auto batch = Batch({TextColumn("query", {"abc\x1d" "efg", "abc\x1d" "efg", "", kNull}),
                      TextColumn("title", {"abc\x1dqwe\x1drty\x1duio", "abc\x1d" "efg\x1drty", "", kNull})});
  ExpectDense(Generate(OverlapConfig("query_common_ratio"), batch), "ov", {0.5f, 1, 0, 0});
  ExpectDense(Generate(OverlapConfig("is_contain"), batch), "ov", {0, 1, 0, 0});
  ExpectSparse(Generate(OverlapConfig("query_common_ratio", "embedding_dim: 8 boundaries: [0.25, 0.75]"), batch),
               "ov", {1, 2, 0, 0}, {1, 1, 1, 1});
  auto titles = Batch({TextColumn("query", {"abc\x1d" "efg", "abc\x1d" "efg"}),
                       TextColumn("title", {"abc\x1dqwe\x1drty\x1duio", "abc"})});
  ExpectDense(Generate(OverlapConfig("title_common_ratio"), titles), "ov", {0.25f, 1});
  auto one = Batch({TextColumn("query", {"b\x1d" "c"}), TextColumn("title", {"a\x1d" "b\x1d" "c\x1d" "d"})});
  const std::pair<const char*, float> kExpected[] = {
      {"is_equal", 0}, {"is_contain", 1}, {"index_of", 1}, {"query_common_ratio", 1},
      {"title_common_ratio", 0.5f}, {"proximity_min_dist", 1}, {"proximity_max_dist", 1},
      {"proximity_avg_dist", 1}, {"proximity_min_cover", 2}};
  for (const auto& [method, value] : kExpected) {
    ExpectDense(Generate(OverlapConfig(method), one), "ov", {value});
  }
  EXPECT_THROW(Generate(OverlapConfig("is_common"), one), Error);
}

TEST(FgKvDotProduct, DotOfWeightedSets) {
  const std::string config =
      "feature_configs { kv_dot_product { feature_name: 'kv' query: 'user:q' document: 'item:d' "
      "separator: '|' default_value: '0.1' %s } }";
  auto with = [&](const std::string& extra) {
    std::string text = config;
    text.replace(text.find("%s"), 2, extra);
    return text;
  };
  auto batch = Batch({TextColumn("q", {"a:0.5|b:0.5", "a|b|c", "a|b", kNull}),
                      TextColumn("d", {"a:0.5|b:0.5", "a|b", "", ""})});
  ExpectDense(Generate(with(""), batch), "kv", {0.5f, 2.0f, 0.1f, 0.1f});
  ExpectSparse(Generate(with("embedding_dim: 16 boundaries: [0.05, 0.15, 1.0]"), batch), "kv", {2, 3, 1, 1},
               {1, 1, 1, 1});
  auto eq = Batch({TextColumn("q", {"a=2|b=3"}), TextColumn("d", {"a=2|b=2"})});
  ExpectDense(Generate(with("kv_delimiter: '=' normalizer: 'method=log10,threshold=1e-10,default=-10'"), eq),
              "kv", {1.0f});
  EXPECT_THROW(Generate(with("kv_delimiter: '::'"), eq), Error);
}

TEST(FgBoolMaskFeature, KeepsMaskedValues) {
  const std::string config =
      "feature_configs { bool_mask_feature { feature_name: 'bm' expression: ['user:itemid', 'user:mask'] "
      "separator: ',' embedding_dim: 16 %s } }";
  auto with = [&](const std::string& extra) {
    std::string text = config;
    text.replace(text.find("%s"), 2, extra);
    return text;
  };
  auto batch = Batch({TextColumn("itemid", {"1,2", "3,4,5", kNull}),
                      TextColumn("mask", {"true,false", "true,false,1", "true"})});
  ExpectSparse(Generate(with("num_buckets: 10"), batch), "bm", {1, 3, 5}, {1, 2, 0});
  ExpectSparse(Generate(with("hash_bucket_size: 10"), batch), "bm", {5, 3, 9}, {1, 2, 0});
  auto bad = Batch({TextColumn("itemid", {"1,2"}), TextColumn("mask", {"true"})});
  EXPECT_THROW(Generate(with("num_buckets: 10"), bad), Error);
}

TEST(FgCombineFeature, ValueMapAndCombiner) {
  const std::string base =
      "feature_configs { combine_feature { feature_name: 'cb' expression: 'user:tag' %s } }";
  auto with = [&](const std::string& extra) {
    std::string text = base;
    text.replace(text.find("%s"), 2, extra);
    return text;
  };
  auto tags = Batch({TextColumn("tag", {"tag1\x1dtag2", "tag3", "", kNull})});
  ExpectDense(Generate(with("value_map: [{key: 'tag1' value: 1}, {key: 'tag2' value: 2}, {key: 'tag3' value: 3}]"),
                       tags),
              "cb", {3, 3, 0, 0});
  ExpectDense(Generate(with("combiner: 'max' value_map: [{key: 'tag1' value: 1}, {key: 'tag2' value: 2}]"), tags),
              "cb", {2, 0, 0, 0});
  auto numbers = Batch({TextColumn("tag", {"1\x1d" "2", "3", "", kNull})});
  ExpectSparse(Generate(with("embedding_dim: 8 num_buckets: 10 default_value: '0'"), numbers), "cb",
               {3, 3, 0, 0}, {1, 1, 1, 1});
}

TEST(FgSequenceFeatures, GroupedIdAndComboSteps) {
  const std::string grouped =
      "feature_configs { sequence_feature { sequence_name: 'click_50_seq' sequence_length: 50 "
      "sequence_delim: ';' features { id_feature { feature_name: 'id_feat' expression: 'item:id_str' "
      "embedding_dim: 16 hash_bucket_size: 100 } } features { combo_feature { feature_name: 'combo_feat' "
      "expression: ['user:uid', 'item:iid_str'] embedding_dim: 16 hash_bucket_size: 100 value_dim: 0 } } } }";
  auto batch = Batch({TextColumn("click_50_seq__id_str", {"abc\x1d" "efg;hij", "", "hij"}),
                      TextColumn("uid", {"ua", "", "ub"}),
                      TextColumn("click_50_seq__iid_str", {"abc\x1d" "efg;hij", "", "hij"})});
  auto out = Generate(grouped, batch);
  // An empty sparse sequence becomes one step with the default "0" (hash 26).
  ExpectSparse(out, "click_50_seq__id_feat", {33, 44, 66, 26, 66}, {2, 1, 1});
  EXPECT_THAT(out.sparse.at("click_50_seq__id_feat").key_lengths, ElementsAre(2, 1, 1, 1));
  ExpectSparse(out, "click_50_seq__combo_feat", {2, 42, 3, 26, 23}, {2, 1, 1});
  EXPECT_THAT(out.sparse.at("click_50_seq__combo_feat").key_lengths, ElementsAre(2, 1, 1, 1));

  // Truncation to sequence_length and LIST<LIST> input.
  const std::string simple =
      "feature_configs { sequence_id_feature { feature_name: 'seq' expression: 'user:s' sequence_length: 2 "
      "embedding_dim: 8 num_buckets: 10 } }";
  auto nested = Batch({ListColumn("s", {"1\x1d" "2;3;4", "5"}, 2)});
  auto seq = Generate(simple, nested);
  ExpectSparse(seq, "seq", {1, 2, 3, 5}, {2, 1});
  EXPECT_THAT(seq.sparse.at("seq").key_lengths, ElementsAre(2, 1, 1));

  // Dense sequence: expr over a user value and a sequence of event times.
  const std::string expr =
      "feature_configs { sequence_feature { sequence_name: 'click_50_seq' sequence_length: 50 sequence_delim: '|' "
      "features { expr_feature { feature_name: 'ts_diff' expression: 'request_time - event_time' "
      "variables: ['user:request_time', 'user:event_time'] sequence_fields: ['event_time'] default_value: '0' } } } }";
  auto times = Batch({IntColumn("request_time", {10, kNull, 5}),
                      TextColumn("click_50_seq__event_time", {"2|3", "4", kNull})});
  auto dense = Generate(expr, times);
  ExpectDense(dense, "click_50_seq__ts_diff", {8, 7, 0, 0});
  EXPECT_THAT(dense.dense.at("click_50_seq__ts_diff").lengths, ElementsAre(2, 1, 1));
}

TEST(FgDag, FeatureInputsInDependencyOrder) {
  // `bucket` reads the output of `age` (declared after it); `age_stub` is not emitted.
  const std::string config =
      "feature_configs { id_feature { feature_name: 'bucket' expression: 'feature:age' embedding_dim: 4 "
      "num_buckets: 10 } } "
      "feature_configs { raw_feature { feature_name: 'age' expression: 'feature:age_stub' "
      "boundaries: [10, 20, 30] embedding_dim: 4 } } "
      "feature_configs { raw_feature { feature_name: 'age_stub' expression: 'user:age' stub_type: true } }";
  auto batch = Batch({IntColumn("age", {5, 25, 40})});
  auto out = Generate(config, batch, protos::FG_DAG);
  ExpectSparse(out, "age", {0, 2, 3}, {1, 1, 1});
  ExpectSparse(out, "bucket", {0, 2, 3}, {1, 1, 1});
  EXPECT_FALSE(out.dense.count("age_stub"));

  const std::string cycle =
      "feature_configs { id_feature { feature_name: 'a' expression: 'feature:b' embedding_dim: 4 num_buckets: 10 } } "
      "feature_configs { id_feature { feature_name: 'b' expression: 'feature:a' embedding_dim: 4 num_buckets: 10 } }";
  try {
    Generate(cycle, batch, protos::FG_DAG);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cycle"));
  }
  const std::string unknown =
      "feature_configs { id_feature { feature_name: 'a' expression: 'feature:nope' embedding_dim: 4 num_buckets: 10 } }";
  EXPECT_THROW(Generate(unknown, batch, protos::FG_DAG), Error);
  EXPECT_THROW(Generate(config, batch, protos::FG_NORMAL), Error);  // stub_type needs FG_DAG
}

TEST(FgErrors, MissingColumnAndBadSide) {
  try {
    Generate(IdConfig("hash_bucket_size: 10"), Batch({TextColumn("other", {"x"})}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("column 'id_input'"));
    EXPECT_THAT(e.what(), HasSubstr("'id_feat'"));
  }
  EXPECT_THROW(Generate("feature_configs { id_feature { feature_name: 'f' expression: 'nowhere:x' "
                        "embedding_dim: 4 hash_bucket_size: 10 } }",
                        Batch({TextColumn("x", {"1"})})),
               Error);
  // A sparse feature without a bucketizer cannot be generated.
  EXPECT_THROW(Generate(IdConfig(""), Batch({TextColumn("id_input", {"1"})})), Error);
}

TEST(FgBucketize, OnlyTheBucketizerRuns) {
  const std::string config =
      "feature_configs { id_feature { feature_name: 'cat' expression: 'user:cat' embedding_dim: 4 "
      "hash_bucket_size: 100 } } "
      "feature_configs { raw_feature { feature_name: 'price' expression: 'item:price' boundaries: [1, 2] "
      "embedding_dim: 4 } }";
  auto batch = Batch({TextColumn("cat", {"abc\x03" "efg", ""}), DoubleColumn("price", {1.5, 3})});
  auto out = Generate(config, batch, protos::FG_BUCKETIZE);
  ExpectSparse(out, "cat", {33, 44}, {2, 0});
  ExpectSparse(out, "price", {1, 2}, {1, 1});
}

}  // namespace
}  // namespace tzrec::fg

namespace tzrec::fg {
namespace {

// fg_threads > 1 splits rows over threads; the output must equal the one-thread output,
// also for DAG features that read another feature's output.
TEST(FgThreads, SplitRowsGiveTheSameOutput) {
  const std::string config =
      "feature_configs { id_feature { feature_name: 'bucket' expression: 'feature:age' embedding_dim: 4 "
      "num_buckets: 10 } } "
      "feature_configs { raw_feature { feature_name: 'age' expression: 'user:age' "
      "boundaries: [10, 20, 30] embedding_dim: 4 } } "
      "feature_configs { id_feature { feature_name: 'tag' expression: 'item:tag' embedding_dim: 4 "
      "hash_bucket_size: 1000 } }";
  Cells ages, tags;
  for (int i = 0; i < 3000; ++i) {
    ages.push_back(i % 7 == 0 ? std::optional<std::string>() : std::to_string(i % 45));
    tags.push_back("t" + std::to_string(i) + "\x1d" "u" + std::to_string(i % 13));
  }
  auto batch = testing::Batch({testing::TextColumn("age", ages), testing::TextColumn("tag", tags)});
  auto cfg = testing::Config(config);
  FeatureGenerator one(DescribeFeatures(cfg.feature_configs(), protos::FG_DAG), protos::FG_DAG);
  FeatureGenerator four(DescribeFeatures(cfg.feature_configs(), protos::FG_DAG), protos::FG_DAG, "\x03", 4);
  ParsedBatch a, b;
  one.Generate(batch, &a);
  four.Generate(batch, &b);
  for (const char* name : {"bucket", "age", "tag"}) {
    EXPECT_EQ(a.sparse.at(name).values, b.sparse.at(name).values) << name;
    EXPECT_EQ(a.sparse.at(name).lengths, b.sparse.at(name).lengths) << name;
  }
  // An error in a later part still names its row.
  tags[2500] = std::nullopt;
  ages[2999] = "x";
  auto bad = testing::Batch({testing::TextColumn("age", ages), testing::TextColumn("tag", tags)});
  ParsedBatch c;
  try {
    four.Generate(bad, &c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("test.csv:3001"));
  }
}

}  // namespace
}  // namespace tzrec::fg
