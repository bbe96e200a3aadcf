// `tzrec create_fg_json`: fg.json per feature type (TorchEasyRec's feature_test
// test_create_fg_json case, extended with bucketizers), asset copies named by md5,
// --remove_bucketizer, --reserves, multi-cfg features, error paths and the reference configs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fg/fg_test_util.h"
#include "test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/tools/create_fg_json.h"

namespace tzrec {
namespace {

using nlohmann::json;

std::string FgData(const std::string& name) {
  return std::string(TZREC_SOURCE_DIR) + "/tests/fg/data/" + name;
}

std::string ReplaceAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t pos = text.find(from); pos != std::string::npos;
       pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

json ReadJson(const std::string& path) { return json::parse(ReadFileToString(path)); }

// Writes fg.json for `config` into a fresh `dir/out` and returns it parsed.
json Create(const protos::EasyRecConfig& config, const testing::TempDir& dir,
            bool remove_bucketizer = false) {
  CreateFgJsonOptions options;
  options.fg_output_dir = dir.File("out");
  options.remove_bucketizer = remove_bucketizer;
  std::string path = CreateFgJson(config, options);
  EXPECT_EQ(path, dir.File("out/fg.json"));
  return ReadJson(path);
}

TEST(Md5, Rfc1321TestSuite) {
  EXPECT_EQ(Md5Hex(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(Md5Hex("a"), "0cc175b9c0f1b6a831c399e269772661");
  EXPECT_EQ(Md5Hex("abc"), "900150983cd24fb0d6963f7d28e17f72");
  EXPECT_EQ(Md5Hex("message digest"), "f96b697d7cb7938d525a2f31aaf161d0");
  EXPECT_EQ(Md5Hex("abcdefghijklmnopqrstuvwxyz"), "c3fcd3d76192e4007dfb496cca67e13b");
  EXPECT_EQ(Md5Hex("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"),
            "d174ab98d277d9f5a5611c2c9f419d9f");
  EXPECT_EQ(Md5Hex("1234567890123456789012345678901234567890123456789012345678901234567890"
                   "1234567890"),
            "57edf4a22be3c955ac49da2e2107b67a");
  // Padding boundaries: 55 bytes fit one tail block, 56 need two.
  EXPECT_EQ(Md5Hex(std::string(55, 'a')), "ef1772b6dff9a122358552954ad0df65");
  EXPECT_EQ(Md5Hex(std::string(56, 'a')), "3b0c8ac703f828b04c6c197006d17218");
  EXPECT_EQ(Md5Hex(std::string(64, 'a')), "014842d480b571495a4a0363793f7367");
}

// TorchEasyRec's feature_test test_create_fg_json features, with bucketizers.
std::string TestFeaturesConfig(const std::string& asset_dir) {
  return ReplaceAll(ReplaceAll(R"pb(
    data_config { fg_mode: FG_DAG }
    feature_configs { id_feature {
      feature_name: "cat_a" expression: "item:cat_a" num_buckets: 100 embedding_dim: 16 } }
    feature_configs { raw_feature {
      feature_name: "int_a" expression: "item:int_a" boundaries: [1, 2, 3] embedding_dim: 16 } }
    feature_configs { combo_feature {
      feature_name: "combo_c" expression: ["user:combo_uc", "item:combo_ic"]
      hash_bucket_size: 1000 embedding_dim: 16 } }
    feature_configs { lookup_feature {
      feature_name: "lookup_d" map: "user:map_d" key: "item:key_d" vocab_list: ["a", "b", "c"]
      embedding_dim: 16 } }
    feature_configs { match_feature {
      feature_name: "match_e" nested_map: "user:nested_map" pkey: "item:key_e" skey: "item:key_f"
      vocab_dict { key: "g" value: 4 } vocab_dict { key: "e" value: 2 }
      vocab_dict { key: "f" value: 3 }
      embedding_dim: 16 } }
    feature_configs { expr_feature {
      feature_name: "expr_f" expression: "int_g+int_h" variables: ["item:int_g", "item:int_h"]
      boundaries: [4, 5, 6] embedding_dim: 16 } }
    feature_configs { tokenize_feature {
      feature_name: "token_g" expression: "item:token_g" vocab_file: "@TOKENIZER@"
      embedding_dim: 16 } }
    feature_configs { sequence_id_feature {
      feature_name: "click_seq_cat_simple" expression: "item:click_seq_cat_simple"
      sequence_length: 50 sequence_delim: ";" vocab_file: "id_vocab_list_0" asset_dir: "@ASSETS@"
      default_bucketize_value: 0 embedding_dim: 16 } }
    feature_configs { sequence_raw_feature {
      feature_name: "click_seq_int_simple" expression: "user:click_seq_int_simple"
      sequence_length: 50 sequence_delim: ";" } }
    feature_configs { sequence_feature {
      sequence_name: "click_seq" sequence_length: 50 sequence_delim: ";"
      sequence_pk: "user:click_seq"
      features { id_feature {
        feature_name: "cat_a" expression: "item:cat_a" hash_bucket_size: 10 embedding_dim: 16 } }
      features { raw_feature {
        feature_name: "int_a" expression: "item:int_a" boundaries: [7, 8, 9] embedding_dim: 16 } }
    } }
  )pb", "@TOKENIZER@", FgData("bpe_bytelevel_tokenizer.json")), "@ASSETS@", asset_dir);
}

const char* const kExpectedFgJson = R"json({"features": [
  {"feature_type": "id_feature", "feature_name": "cat_a", "default_value": "",
   "expression": "item:cat_a", "value_type": "string", "need_prefix": false,
   "num_buckets": 100, "value_dim": 0},
  {"feature_type": "raw_feature", "feature_name": "int_a", "default_value": "0",
   "expression": "item:int_a", "value_type": "float", "boundaries": [1.0, 2.0, 3.0]},
  {"feature_type": "combo_feature", "feature_name": "combo_c", "default_value": "",
   "expression": ["user:combo_uc", "item:combo_ic"], "value_type": "string",
   "need_prefix": false, "hash_bucket_size": 1000, "value_dim": 0},
  {"feature_type": "lookup_feature", "feature_name": "lookup_d", "map": "user:map_d",
   "key": "item:key_d", "default_value": "0", "value_type": "string", "needDiscrete": true,
   "needKey": false, "combiner": "", "vocab_list": ["0", "<OOV>", "a", "b", "c"],
   "default_bucketize_value": 1, "value_dim": 1},
  {"feature_type": "match_feature", "feature_name": "match_e", "user": "user:nested_map",
   "category": "item:key_e", "item": "item:key_f", "matchType": "hit", "default_value": "0",
   "value_type": "string", "needDiscrete": true, "show_category": false, "show_item": false,
   "vocab_dict": {"e": 2, "f": 3, "g": 4, "0": 0}, "default_bucketize_value": 1,
   "value_dim": 1},
  {"feature_type": "expr_feature", "feature_name": "expr_f", "expression": "int_g+int_h",
   "variables": ["item:int_g", "item:int_h"], "default_value": "0", "value_type": "float",
   "boundaries": [4.0, 5.0, 6.0]},
  {"feature_type": "tokenize_feature", "feature_name": "token_g", "default_value": "",
   "vocab_file": "@TOKENIZER@", "expression": "item:token_g", "tokenizer_type": "bpe",
   "output_type": "word_id", "output_delim": "\u0003"},
  {"feature_type": "sequence_id_feature", "feature_name": "click_seq_cat_simple",
   "default_value": "0", "expression": "item:click_seq_cat_simple", "value_type": "string",
   "need_prefix": false, "vocab_file": "@VOCAB@", "default_bucketize_value": 0, "value_dim": 1,
   "sequence_delim": ";", "sequence_length": 50},
  {"feature_type": "sequence_raw_feature", "feature_name": "click_seq_int_simple",
   "default_value": "0", "expression": "user:click_seq_int_simple", "value_type": "float",
   "sequence_delim": ";", "sequence_length": 50},
  {"sequence_name": "click_seq", "sequence_length": 50, "sequence_delim": ";",
   "sequence_pk": "user:click_seq", "features": [
     {"feature_type": "id_feature", "feature_name": "cat_a", "default_value": "0",
      "expression": "item:cat_a", "value_type": "string", "need_prefix": false,
      "hash_bucket_size": 10, "value_dim": 1},
     {"feature_type": "raw_feature", "feature_name": "int_a", "default_value": "0",
      "expression": "item:int_a", "value_type": "float", "boundaries": [7.0, 8.0, 9.0]}
   ]}
]})json";

class CreateFgJsonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::WriteFile(dir_.File("assets/id_vocab_list_0"), "a\nb\nc\n");
    config_ = fg::testing::Config(TestFeaturesConfig(dir_.File("assets")));
    tokenizer_name_ = "bpe_bytelevel_tokenizer_" +
                      Md5Hex(ReadFileToString(FgData("bpe_bytelevel_tokenizer.json"))) + ".json";
    vocab_name_ = "id_vocab_list_0_" + Md5Hex("a\nb\nc\n");
  }
  json Expected() const {
    return json::parse(ReplaceAll(ReplaceAll(kExpectedFgJson, "@TOKENIZER@", tokenizer_name_),
                                  "@VOCAB@", vocab_name_));
  }

  testing::TempDir dir_;
  protos::EasyRecConfig config_;
  std::string tokenizer_name_;
  std::string vocab_name_;
};

TEST_F(CreateFgJsonTest, EveryTypeOfTheReferenceCaseWithCopiedAssets) {
  json fg = Create(config_, dir_);
  EXPECT_EQ(fg, Expected()) << fg.dump(2);
  // The assets sit next to fg.json under their md5 names, byte for byte.
  EXPECT_EQ(ReadFileToString(dir_.File("out/" + tokenizer_name_)),
            ReadFileToString(FgData("bpe_bytelevel_tokenizer.json")));
  EXPECT_EQ(ReadFileToString(dir_.File("out/" + vocab_name_)), "a\nb\nc\n");
  EXPECT_EQ(ListDirectory(dir_.File("out")),
            (std::vector<std::string>{tokenizer_name_, "fg.json", vocab_name_}));
  // 4-space indent, as TorchEasyRec's json.dump(indent=4); control characters escaped.
  std::string text = ReadFileToString(dir_.File("out/fg.json"));
  EXPECT_EQ(text.rfind("{\n    \"features\": [\n        {\n            \"feature_type\"", 0), 0u)
      << text.substr(0, 80);
  EXPECT_NE(text.find("\"output_delim\": \"\\u0003\""), std::string::npos);
  // Running again over the existing output is fine (assets are not rewritten).
  EXPECT_EQ(Create(config_, dir_), Expected());
}

// A zch feature hashes into the whole int64 range as TorchEasyRec's fg.json says; its table
// maps those ids to zch_size rows.
TEST(CreateFgJsonZch, HashesIntoTheInt64Range) {
  testing::TempDir dir;
  auto config = fg::testing::Config(R"pb(
    data_config { fg_mode: FG_DAG }
    feature_configs { id_feature {
      feature_name: "z" expression: "item:z" hash_bucket_size: 7 zch { zch_size: 100 lru {} } embedding_dim: 8 } }
  )pb");
  const json fg = Create(config, dir);
  EXPECT_EQ(fg["features"][0]["hash_bucket_size"].get<uint64_t>(), 9223372036854775807ull);
}

TEST_F(CreateFgJsonTest, WithoutAssetCopiesTheResolvedPathsAreReferenced) {
  json fg = BuildFgJson(config_, false, nullptr);
  EXPECT_EQ(fg["features"][6]["vocab_file"], FgData("bpe_bytelevel_tokenizer.json"));
  EXPECT_EQ(fg["features"][7]["vocab_file"], dir_.File("assets/id_vocab_list_0"));
}

TEST_F(CreateFgJsonTest, RemoveBucketizerKeepsDefaultBucketizeValueAndTokenizerVocab) {
  json fg = Create(config_, dir_, /*remove_bucketizer=*/true);
  json expected = json::parse(R"json({"features": [
    {"feature_type": "id_feature", "feature_name": "cat_a", "default_value": "",
     "expression": "item:cat_a", "value_type": "string", "need_prefix": false, "value_dim": 0},
    {"feature_type": "raw_feature", "feature_name": "int_a", "default_value": "0",
     "expression": "item:int_a", "value_type": "float"},
    {"feature_type": "combo_feature", "feature_name": "combo_c", "default_value": "",
     "expression": ["user:combo_uc", "item:combo_ic"], "value_type": "string",
     "need_prefix": false, "value_dim": 0},
    {"feature_type": "lookup_feature", "feature_name": "lookup_d", "map": "user:map_d",
     "key": "item:key_d", "default_value": "0", "value_type": "string", "needDiscrete": true,
     "needKey": false, "combiner": "", "default_bucketize_value": 1, "value_dim": 1},
    {"feature_type": "match_feature", "feature_name": "match_e", "user": "user:nested_map",
     "category": "item:key_e", "item": "item:key_f", "matchType": "hit", "default_value": "0",
     "value_type": "string", "needDiscrete": true, "show_category": false, "show_item": false,
     "default_bucketize_value": 1, "value_dim": 1},
    {"feature_type": "expr_feature", "feature_name": "expr_f", "expression": "int_g+int_h",
     "variables": ["item:int_g", "item:int_h"], "default_value": "0", "value_type": "float"},
    {"feature_type": "tokenize_feature", "feature_name": "token_g", "default_value": "",
     "vocab_file": "@TOKENIZER@", "expression": "item:token_g", "tokenizer_type": "bpe",
     "output_type": "word_id", "output_delim": "\u0003"},
    {"feature_type": "sequence_id_feature", "feature_name": "click_seq_cat_simple",
     "default_value": "0", "expression": "item:click_seq_cat_simple", "value_type": "string",
     "need_prefix": false, "default_bucketize_value": 0, "value_dim": 1,
     "sequence_delim": ";", "sequence_length": 50},
    {"feature_type": "sequence_raw_feature", "feature_name": "click_seq_int_simple",
     "default_value": "0", "expression": "user:click_seq_int_simple", "value_type": "float",
     "sequence_delim": ";", "sequence_length": 50},
    {"sequence_name": "click_seq", "sequence_length": 50, "sequence_delim": ";",
     "sequence_pk": "user:click_seq", "features": [
       {"feature_type": "id_feature", "feature_name": "cat_a", "default_value": "0",
        "expression": "item:cat_a", "value_type": "string", "need_prefix": false,
        "value_dim": 1},
       {"feature_type": "raw_feature", "feature_name": "int_a", "default_value": "0",
        "expression": "item:int_a", "value_type": "float"}
     ]}
  ]})json");
  expected["features"][6]["vocab_file"] = tokenizer_name_;
  EXPECT_EQ(fg, expected) << fg.dump(2);
}

TEST_F(CreateFgJsonTest, CommandLineFlagsReservesAndResourceName) {
  testing::WriteFile(dir_.File("pipeline.config"), TestFeaturesConfig(dir_.File("assets")));
  const std::string out = dir_.File("cli");
  EXPECT_EQ(CreateFgJsonMain({"--pipeline_config_path", dir_.File("pipeline.config"),
                              "--fg_output_dir=" + out, "--reserves= label , request_id,",
                              "--fg_resource_name", "my_fg.json", "--remove_bucketizer"}),
            0);
  json fg = ReadJson(out + "/my_fg.json");
  EXPECT_EQ(fg["reserves"], json::parse(R"(["label", "request_id"])"));
  EXPECT_FALSE(fg["features"][0].contains("num_buckets"));
  EXPECT_FALSE(PathExists(out + "/fg.json"));

  // --remove_bucketizer=false / true and `--remove_bucketizer false`; no --reserves, no key.
  EXPECT_EQ(CreateFgJsonMain({"--pipeline_config_path=" + dir_.File("pipeline.config"),
                              "--fg_output_dir=" + out, "--remove_bucketizer=false"}),
            0);
  fg = ReadJson(out + "/fg.json");
  EXPECT_EQ(fg, Expected());
  EXPECT_FALSE(fg.contains("reserves"));
  EXPECT_EQ(CreateFgJsonMain({"--pipeline_config_path=" + dir_.File("pipeline.config"),
                              "--remove_bucketizer", "false", "--fg_output_dir", out}),
            0);
  EXPECT_EQ(ReadJson(out + "/fg.json"), Expected());
  EXPECT_EQ(CreateFgJsonMain({"--pipeline_config_path=" + dir_.File("pipeline.config"),
                              "--fg_output_dir=" + out, "--remove-bucketizer=TRUE"}),
            0);
  EXPECT_FALSE(ReadJson(out + "/fg.json")["features"][1].contains("boundaries"));

  EXPECT_TZREC_ERROR(CreateFgJsonMain({"--pipeline_config_path=" + dir_.File("pipeline.config"),
                                       "--fg_output_dir=" + out, "--remove_bucketizer=maybe"}),
                     "--remove_bucketizer takes true or false");
  EXPECT_TZREC_ERROR(CreateFgJsonMain({"--pipeline_config_path=" + dir_.File("pipeline.config")}),
                     "--fg_output_dir is required");
  EXPECT_TZREC_ERROR(CreateFgJsonMain({"--fg_output_dir=" + out}),
                     "--pipeline_config_path is required");
  EXPECT_TZREC_ERROR(CreateFgJsonMain({"--pipeline_config_path=" + dir_.File("pipeline.config"),
                                       "--fg_output_dir=" + out, "--odps_project_name=p"}),
                     "not supported yet");
}

TEST_F(CreateFgJsonTest, EditConfigJsonApplies) {
  testing::WriteFile(dir_.File("pipeline.config"), TestFeaturesConfig(dir_.File("assets")));
  const std::string out = dir_.File("cli");
  EXPECT_EQ(CreateFgJsonMain({"--pipeline_config_path=" + dir_.File("pipeline.config"),
                              "--fg_output_dir=" + out, "--edit_config_json",
                              R"({"feature_configs[0].id_feature.num_buckets": 7})"}),
            0);
  EXPECT_EQ(ReadJson(out + "/fg.json")["features"][0]["num_buckets"], 7);
}

TEST(CreateFgJson, LookupValueDimTwoIsAStubAndARawFeature) {
  testing::TempDir dir;
  auto config = fg::testing::Config(R"pb(
    data_config { fg_mode: FG_DAG }
    feature_configs { lookup_feature {
      feature_name: "kv" map: "user:kv_map" key: "item:cate" value_dim: 2
      normalizer: "method=log10" } }
    feature_configs { sequence_feature {
      sequence_name: "seq" sequence_length: 5 sequence_delim: "|"
      features { lookup_feature {
        feature_name: "kv" map: "user:kv_map" key: "user:cate" value_dim: 2 default_value: ""
        sequence_fields: ["cate"] boundaries: [0.5, 1.5] embedding_dim: 8 } } } }
  )pb");
  json fg = Create(config, dir);
  json expected = json::parse(R"json({"features": [
    {"feature_type": "lookup_feature", "feature_name": "kv__lookup", "map": "user:kv_map",
     "key": "item:cate", "default_value": "", "value_type": "string", "needDiscrete": true,
     "needKey": false, "combiner": "", "value_dim": 1, "stub_type": true},
    {"feature_type": "raw_feature", "feature_name": "kv", "default_value": "0",
     "expression": "feature:kv__lookup", "separator": ",", "value_dim": 2,
     "value_type": "float", "normalizer": "method=log10"},
    {"sequence_name": "seq", "sequence_length": 5, "sequence_delim": "|",
     "sequence_pk": "user:seq", "features": [
       {"feature_type": "lookup_feature", "feature_name": "kv__lookup", "map": "user:kv_map",
        "key": "user:cate", "default_value": "0", "value_type": "string", "needDiscrete": true,
        "needKey": false, "combiner": "", "value_dim": 1, "stub_type": true,
        "sequence_fields": ["cate"]},
       {"feature_type": "raw_feature", "feature_name": "kv", "default_value": "0",
        "expression": "feature:kv__lookup", "separator": ",", "value_dim": 2,
        "value_type": "float", "boundaries": [0.5, 1.5], "sequence_fields": ["kv__lookup"]}
     ]}
  ]})json");
  EXPECT_EQ(fg, expected) << fg.dump(2);
}

TEST(CreateFgJson, TokenizeWithTextNormalizerIsAStubAndTheTokenizer) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("assets/stop_chars.txt"), "!\n?\n");
  testing::WriteFile(dir.File("assets/tok.json"),
                     ReadFileToString(FgData("bpe_bytelevel_tokenizer.json")));
  auto config = fg::testing::Config(ReplaceAll(R"pb(
    data_config { fg_mode: FG_DAG fg_encoded_multival_sep: "," }
    feature_configs { tokenize_feature {
      feature_name: "title_tok" expression: "item:title" vocab_file: "tok.json"
      asset_dir: "@ASSETS@" embedding_dim: 8
      text_normalizer {
        max_length: 128 stop_char_file: "stop_chars.txt"
        norm_options: [TEXT_UPPER2LOWER, TEXT_SBC2DBC, TEXT_CHT2CHS, TEXT_FILTER, TEXT_REMOVE_SPACE]
      } } }
  )pb", "@ASSETS@", dir.File("assets")));
  json fg = Create(config, dir, /*remove_bucketizer=*/true);
  const std::string tok = "tok_" + Md5Hex(ReadFileToString(dir.File("assets/tok.json"))) + ".json";
  const std::string stop = "stop_chars_" + Md5Hex("!\n?\n") + ".txt";
  json expected = json::parse(ReplaceAll(ReplaceAll(R"json({"features": [
    {"feature_type": "text_normalizer", "feature_name": "title_tok__text_norm",
     "expression": "item:title", "is_gbk_input": false, "is_gbk_output": false,
     "stub_type": true, "max_length": 128, "stop_char_file": "@STOP@", "remove_space": true,
     "parameter": 60},
    {"feature_type": "tokenize_feature", "feature_name": "title_tok", "default_value": "",
     "vocab_file": "@TOK@", "expression": "feature:title_tok__text_norm",
     "tokenizer_type": "bpe", "output_type": "word_id", "output_delim": ","}
  ]})json", "@STOP@", stop), "@TOK@", tok));
  EXPECT_EQ(fg, expected) << fg.dump(2);
  EXPECT_TRUE(PathExists(dir.File("out/" + tok)));
  EXPECT_TRUE(PathExists(dir.File("out/" + stop)));
}

TEST(CreateFgJson, OtherTypesAndSequenceRules) {
  testing::TempDir dir;
  testing::WriteFile(dir.File("libmy_op.so"), "not really a library");
  auto config = fg::testing::Config(ReplaceAll(R"pb(
    data_config { fg_mode: FG_DAG }
    feature_configs { id_feature {
      feature_name: "tags" expression: "user:tags" hash_bucket_size: 50 weighted: true
      separator: "," value_dim: 2 fg_value_type: "int64" stub_type: false embedding_dim: 8 } }
    feature_configs { overlap_feature {
      feature_name: "ov" query: "user:q" title: "item:t" method: "is_contain" } }
    feature_configs { kv_dot_product {
      feature_name: "kvd" query: "user:q" document: "item:d" kv_delimiter: "="
      separator: "|" normalizer: "method=log10" } }
    feature_configs { bool_mask_feature {
      feature_name: "masked" expression: ["user:ids", "user:mask"] num_buckets: 10
      embedding_dim: 8 } }
    feature_configs { combine_feature {
      feature_name: "comb" expression: "user:c" combiner: "MEAN" num_buckets: 10
      value_map { key: "b" value: 2 } value_map { key: "a" value: 0.5 } embedding_dim: 8 } }
    feature_configs { expr_feature {
      feature_name: "ex" expression: "a*10" variables: ["user:a"] num_buckets: 100
      fill_missing: 0 embedding_dim: 8 } }
    feature_configs { custom_feature {
      feature_name: "ed" operator_name: "EditDistance"
      operator_lib_file: "pyfg/lib/libedit_distance.so" expression: ["user:query", "item:title"]
      operator_params { fields { key: "encoding" value { string_value: "utf-8" } } } } }
    feature_configs { custom_feature {
      feature_name: "mine" operator_name: "MyOp" operator_lib_file: "libmy_op.so"
      asset_dir: "@DIR@" is_op_thread_safe: true expression: ["user:x"] boundaries: [1]
      operator_params { fields { key: "k" value { number_value: 3 } } } embedding_dim: 8 } }
    feature_configs { sequence_expr_feature {
      feature_name: "ts_diff" expression: "request_time - event_time"
      variables: ["user:request_time", "user:event_time"] sequence_fields: ["event_time"]
      sequence_length: 50 sequence_delim: "|" } }
    feature_configs { sequence_combo_feature {
      feature_name: "seq_combo" expression: ["user:id_str", "item:iid_str"] hash_bucket_size: 100
      sequence_length: 50 embedding_dim: 8 } }
    feature_configs { match_feature {
      feature_name: "m_all" nested_map: "user:nm" pkey: "ALL" skey: "item:brand" } }
  )pb", "@DIR@", dir.path()));
  json fg = Create(config, dir);
  const std::string lib = "libmy_op_" + Md5Hex("not really a library") + ".so";
  json expected = json::parse(ReplaceAll(R"json({"features": [
    {"feature_type": "id_feature", "feature_name": "tags", "default_value": "",
     "expression": "user:tags", "value_type": "int64", "need_prefix": false, "separator": ",",
     "hash_bucket_size": 50, "weighted": true, "value_dim": 2, "stub_type": false},
    {"feature_type": "overlap_feature", "feature_name": "ov", "query": "user:q",
     "title": "item:t", "method": "is_contain", "value_type": "float", "separator": "\u001d"},
    {"feature_type": "kv_dot_product", "feature_name": "kvd", "default_value": "0",
     "query": "user:q", "document": "item:d", "separator": "|", "kv_delimiter": "=",
     "normalizer": "method=log10"},
    {"feature_type": "bool_mask_feature", "feature_name": "masked", "default_value": "",
     "expression": ["user:ids", "user:mask"], "num_buckets": 10, "value_dim": 0},
    {"feature_type": "combine_feature", "feature_name": "comb", "default_value": "",
     "expression": "user:c", "value_type": "int64", "need_prefix": false, "combiner": "mean",
     "value_map": {"a": 0.5, "b": 2.0}, "num_buckets": 10, "value_dim": 1},
    {"feature_type": "expr_feature", "feature_name": "ex", "expression": "a*10",
     "variables": ["user:a"], "default_value": "0", "value_type": "int64", "fill_missing": 0.0,
     "num_buckets": 100},
    {"feature_type": "custom_feature", "feature_name": "ed", "default_value": "0",
     "operator_name": "EditDistance", "operator_lib_file": "pyfg/lib/libedit_distance.so",
     "is_op_thread_safe": false, "expression": ["user:query", "item:title"],
     "value_type": "float", "encoding": "utf-8", "value_dim": 1},
    {"feature_type": "custom_feature", "feature_name": "mine", "default_value": "0",
     "operator_name": "MyOp", "operator_lib_file": "@LIB@", "is_op_thread_safe": true,
     "expression": ["user:x"], "value_type": "float", "k": 3.0, "boundaries": [1.0],
     "value_dim": 1},
    {"feature_type": "sequence_expr_feature", "feature_name": "ts_diff",
     "expression": "request_time - event_time",
     "variables": ["user:request_time", "user:event_time"], "default_value": "0",
     "value_type": "float", "value_dim": 1, "sequence_fields": ["event_time"],
     "sequence_delim": "|", "sequence_length": 50},
    {"feature_type": "sequence_combo_feature", "feature_name": "seq_combo",
     "default_value": "0", "expression": ["user:id_str", "item:iid_str"],
     "value_type": "string", "need_prefix": false, "hash_bucket_size": 100, "value_dim": 1,
     "sequence_delim": ";", "sequence_length": 50},
    {"feature_type": "match_feature", "feature_name": "m_all", "user": "user:nm",
     "category": "ALL", "item": "item:brand", "matchType": "multihit", "default_value": "0",
     "value_type": "float", "needDiscrete": false, "show_category": false, "show_item": false}
  ]})json", "@LIB@", lib));
  EXPECT_EQ(fg, expected) << fg.dump(2);
  EXPECT_EQ(ReadFileToString(dir.File("out/" + lib)), "not really a library");
  EXPECT_FALSE(PathExists(dir.File("out/libedit_distance.so")));
}

TEST(CreateFgJson, ErrorsNameTheFeatureAndWriteNothing) {
  testing::TempDir dir;
  CreateFgJsonOptions options;
  options.fg_output_dir = dir.File("out");
  auto missing_vocab = fg::testing::Config(R"pb(
    data_config { fg_mode: FG_DAG }
    feature_configs { id_feature {
      feature_name: "cat" expression: "item:cat" vocab_file: "nope.txt" asset_dir: "/no/such/dir"
      default_bucketize_value: 1 embedding_dim: 8 } }
  )pb");
  EXPECT_TZREC_ERROR(CreateFgJson(missing_vocab, options),
                     "feature_configs[0].id_feature.vocab_file");
  EXPECT_TZREC_ERROR(CreateFgJson(missing_vocab, options), "/no/such/dir/nope.txt");
  auto missing_stop_chars = fg::testing::Config(ReplaceAll(R"pb(
    data_config { fg_mode: FG_DAG }
    feature_configs { id_feature { feature_name: "ok" expression: "item:ok" num_buckets: 3 } }
    feature_configs { sequence_feature { sequence_name: "s" sequence_length: 3 sequence_delim: ";"
      features { tokenize_feature {
        feature_name: "t" expression: "item:t" vocab_file: "@TOK@"
        text_normalizer { stop_char_file: "/no/such/stop.txt" } } } } }
  )pb", "@TOK@", FgData("bpe_bytelevel_tokenizer.json")));
  EXPECT_TZREC_ERROR(CreateFgJson(missing_stop_chars, options),
                     "feature_configs[1].sequence_feature.features[0].tokenize_feature."
                     "text_normalizer.stop_char_file: asset file '/no/such/stop.txt' not found");
  auto missing_lib = fg::testing::Config(R"pb(
    data_config { fg_mode: FG_DAG }
    feature_configs { custom_feature {
      feature_name: "c" operator_name: "Op" operator_lib_file: "/no/such/libop.so"
      expression: ["user:x"] } }
  )pb");
  EXPECT_TZREC_ERROR(CreateFgJson(missing_lib, options),
                     "feature_configs[0].custom_feature.operator_lib_file: asset file "
                     "'/no/such/libop.so' not found");
  EXPECT_FALSE(PathExists(dir.File("out")));

  auto bad_overlap = fg::testing::Config(R"pb(
    data_config { fg_mode: FG_DAG }
    feature_configs { overlap_feature {
      feature_name: "o" query: "user:q" title: "item:t" method: "is_common" } }
  )pb");
  EXPECT_TZREC_ERROR(CreateFgJson(bad_overlap, options), "invalid method 'is_common'");
  auto bad_kv = fg::testing::Config(R"pb(
    data_config { fg_mode: FG_DAG }
    feature_configs { kv_dot_product {
      feature_name: "k" query: "user:q" document: "item:d" kv_delimiter: "::" } }
  )pb");
  EXPECT_TZREC_ERROR(CreateFgJson(bad_kv, options), "invalid kv_delimiter");
  auto zch = fg::testing::Config(R"pb(
    data_config { fg_mode: FG_DAG }
    feature_configs { id_feature {
      feature_name: "z" expression: "item:z" zch { zch_size: 100 } embedding_dim: 8 } }
  )pb");
  EXPECT_TZREC_ERROR(CreateFgJson(zch, options), "id_feature.zch: needs an eviction policy");

  // An output directory that cannot be created (a file is in the way).
  testing::WriteFile(dir.File("file"), "x");
  auto ok = fg::testing::Config(R"pb(
    feature_configs { id_feature { feature_name: "ok" expression: "item:ok" num_buckets: 3 } }
  )pb");
  options.fg_output_dir = dir.File("file/out");
  EXPECT_TZREC_ERROR(CreateFgJson(ok, options), "cannot create directory");
  options.fg_output_dir = "";
  EXPECT_TZREC_ERROR(CreateFgJson(ok, options), "--fg_output_dir is required");
}

TEST(CreateFgJson, ReferenceConfigs) {
  for (const char* name : {"dbmtl_taobao.config", "dssm_taobao.config"}) {
    SCOPED_TRACE(name);
    testing::TempDir dir;
    auto config = LoadPipelineConfig(testing::ReferenceConfig(name));
    json fg = Create(config, dir);
    ASSERT_TRUE(fg["features"].is_array());
    // One entry per plain feature config, one block per grouped sequence.
    ASSERT_EQ(fg["features"].size(), static_cast<size_t>(config.feature_configs_size()));
    int blocks = 0;
    for (int i = 0; i < config.feature_configs_size(); ++i) {
      const auto& fc = config.feature_configs(i);
      const json& entry = fg["features"][i];
      if (fc.has_sequence_feature()) {
        ++blocks;
        EXPECT_EQ(entry["sequence_name"], fc.sequence_feature().sequence_name());
        EXPECT_EQ(entry["features"].size(),
                  static_cast<size_t>(fc.sequence_feature().features_size()));
      } else if (fc.has_id_feature()) {
        EXPECT_EQ(entry["feature_type"], "id_feature");
        EXPECT_EQ(entry["feature_name"], fc.id_feature().feature_name());
        EXPECT_EQ(entry["expression"], fc.id_feature().expression());
      } else {
        EXPECT_EQ(entry["feature_name"], fc.raw_feature().feature_name());
      }
    }
    EXPECT_EQ(blocks, std::string(name) == "dssm_taobao.config" ? 1 : 0);
    if (std::string(name) == "dssm_taobao.config") {
      const json& block = fg["features"].back();
      json expected = json::parse(R"json({
        "sequence_name": "click_50_seq", "sequence_length": 100, "sequence_delim": "|",
        "sequence_pk": "user:click_50_seq", "features": [
          {"feature_type": "id_feature", "feature_name": "adgroup_id", "default_value": "0",
           "expression": "item:adgroup_id", "value_type": "string", "need_prefix": false,
           "num_buckets": 846812, "value_dim": 1},
          {"feature_type": "id_feature", "feature_name": "cate_id", "default_value": "0",
           "expression": "item:cate_id", "value_type": "string", "need_prefix": false,
           "num_buckets": 12961, "value_dim": 1},
          {"feature_type": "id_feature", "feature_name": "brand", "default_value": "0",
           "expression": "item:brand", "value_type": "string", "need_prefix": false,
           "num_buckets": 461498, "value_dim": 1}]})json");
      EXPECT_EQ(block, expected) << block.dump(2);
      // price's boundaries are float32 values widened to double, as Python writes them.
      for (const json& entry : fg["features"]) {
        if (entry.value("feature_name", "") == "price") {
          EXPECT_EQ(entry["boundaries"][0].get<double>(), static_cast<double>(1.1f));
        }
      }
    }
  }
}

}  // namespace
}  // namespace tzrec
