// Negative samplers against their definitions: weighted draws match the weights (chi-square),
// batch items and positive edges are never drawn, hard negatives come from the edge table, the
// dataset appends the sampled items' features after the batch's rows; bad tables fail naming
// file and line.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "test_util.h"
#include "tzrec/config/pipeline_config.h"
#include "tzrec/data/parquet/parquet_writer.h"
#include "tzrec/features/feature.h"
#include "tzrec/input/dataset.h"
#include "tzrec/input/sampler.h"
#include "tzrec/protos/sampler.pb.h"

namespace tzrec {
namespace {

using testing::TempDir;
using testing::WriteFile;

// Chi-square statistic of `counts` against probabilities proportional to `weights`.
double ChiSquare(const std::vector<int64_t>& counts, const std::vector<double>& weights) {
  double total = 0, weight_sum = 0;
  for (int64_t c : counts) total += static_cast<double>(c);
  for (double w : weights) weight_sum += w;
  double chi = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (weights[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "item " << i << " has weight 0";
      continue;
    }
    const double expected = total * weights[i] / weight_sum;
    chi += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return chi;
}

TEST(AliasTable, FrequenciesMatchWeights) {
  std::vector<float> weights;
  for (int i = 0; i < 40; ++i) weights.push_back(static_cast<float>((i * 7) % 11));  // zeros included
  AliasTable table(weights);
  std::mt19937_64 rng(3);
  std::vector<int64_t> counts(weights.size());
  for (int i = 0; i < 400000; ++i) ++counts[table.Draw(rng)];
  // 36 non-zero weights: 35 degrees of freedom, p = 0.001 critical value 66.6.
  EXPECT_LT(ChiSquare(counts, std::vector<double>(weights.begin(), weights.end())), 66.6);
}

// Items 100..139 with weight (i % 5) + 1 and attributes "<id>\x02c<id % 3>\x02<id / 10.0>".
std::string ItemTable(int items = 40) {
  std::string text = "id:int64\tweight:float\tattrs:string\n";
  for (int i = 0; i < items; ++i) {
    const int id = 100 + i;
    text += std::to_string(id) + "\t" + std::to_string(i % 5 + 1) + "\t" + std::to_string(id) +
            "\x02" "c" + std::to_string(id % 3) + "\x02" + std::to_string(id / 10.0) + "\n";
  }
  return text;
}

protos::NegativeSampler V1Config(const std::string& path, int num_sample) {
  protos::NegativeSampler config;
  config.set_input_path(path);
  config.set_num_sample(num_sample);
  for (const char* attr : {"item_id", "cate", "price"}) config.add_attr_fields(attr);
  config.set_item_id_field("item_id");
  config.set_attr_delimiter("\x02");
  return config;
}

std::shared_ptr<const Sampler> Make(const std::string& name, const google::protobuf::Message& config,
                                    bool eval = false) {
  SamplerContext context;
  context.config = &config;
  context.where = "data_config." + name;
  context.eval = eval;
  return SamplerRegistry().Get(name)(context);
}

TEST(NegativeSampler, WeightedExcludingTheBatchsItems) {
  TempDir dir;
  WriteFile(dir.File("items.txt"), ItemTable());
  auto config = V1Config(dir.File("items.txt"), 64);
  config.set_num_eval_sample(8);
  auto sampler = Make("negative_sampler", config);
  EXPECT_EQ(Make("negative_sampler", config, /*eval=*/true)->num_sample(), 8);
  SamplerInput input;
  input.item_ids = {100, 105, 117, 117, 999};  // 999: not in the table
  std::mt19937_64 rng(5);
  std::vector<int64_t> counts(40);
  for (int round = 0; round < 3000; ++round) {
    SampledItems sampled = sampler->Sample(input, rng);
    ASSERT_EQ(sampled.items.size(), 64u);
    ASSERT_EQ(sampled.num_negatives, 64);
    EXPECT_TRUE(sampled.hard_neg_indices.empty());
    for (uint32_t item : sampled.items) ++counts[item];
  }
  std::vector<double> weights;
  for (int i = 0; i < 40; ++i) weights.push_back(i == 0 || i == 5 || i == 17 ? 0.0 : i % 5 + 1);
  // 37 items left: 36 degrees of freedom, p = 0.001 critical value 67.98.
  EXPECT_LT(ChiSquare(counts, weights), 67.98);

  // The sampled rows' attributes, named by attr_fields, only those the dataset reads.
  SampledItems sampled = sampler->Sample(input, rng);
  RecordBatch rows = sampler->AttrRows(sampled, {"price", "item_id", "user_id"});
  ASSERT_EQ(rows.num_rows(), 64u);
  ASSERT_EQ(rows.columns.size(), 2u);
  const Column* ids = rows.Find("item_id");
  const Column* price = rows.Find("price");
  ASSERT_TRUE(ids && price);
  EXPECT_EQ(rows.Find("cate"), nullptr);
  for (size_t r = 0; r < rows.num_rows(); ++r) {
    const int64_t id = sampler->items().id(sampled.items[r]);
    EXPECT_EQ(ids->StringAt(r), std::to_string(id));
    EXPECT_EQ(price->StringAt(r), std::to_string(id / 10.0));
    EXPECT_EQ(rows.line_numbers[r], id - 100 + 2);  // header is line 1
  }
  EXPECT_EQ(rows.source, dir.File("items.txt"));
}

TEST(NegativeSampler, SameSeedSameDraws) {
  TempDir dir;
  WriteFile(dir.File("items.txt"), ItemTable());
  auto sampler = Make("negative_sampler", V1Config(dir.File("items.txt"), 16));
  SamplerInput input;
  input.item_ids = {101};
  std::mt19937_64 a(9), b(9);
  EXPECT_EQ(sampler->Sample(input, a).items, sampler->Sample(input, b).items);
}

// The fields every graph sampler (v2, hard) shares, for WriteGraph's tables.
template <typename Config>
void SetGraphFields(const TempDir& dir, Config* config) {
  config->set_user_input_path(dir.File("users.txt"));
  config->set_item_input_path(dir.File("items.txt"));
  for (const char* attr : {"item_id", "cate", "price"}) config->add_attr_fields(attr);
  config->set_item_id_field("item_id");
  config->set_user_id_field("user_id");
  config->set_attr_delimiter("\x02");
}

void WriteGraph(const TempDir& dir) {
  WriteFile(dir.File("items.txt"), ItemTable());
  std::string users = "id:int64\tweight:float\n";
  for (int u = 1; u <= 4; ++u) users += std::to_string(u) + "\t1\n";
  WriteFile(dir.File("users.txt"), users);
  // User u is positive with every item whose id % 4 == u % 4 (10 of 40).
  std::string pos = "userid:int64\titemid:int64\tweight:float\n";
  for (int u = 1; u <= 4; ++u) {
    for (int i = 100; i < 140; ++i) {
      if (i % 4 == u % 4) pos += std::to_string(u) + "\t" + std::to_string(i) + "\t1\n";
    }
  }
  WriteFile(dir.File("pos.txt"), pos);
  // Hard negatives: user 1 has 3 (in this order), user 2 has 1, users 3 and 4 none.
  WriteFile(dir.File("hard.txt"),
            "userid:int64\titemid:int64\tweight:float\n1\t130\t1\n2\t101\t1\n1\t120\t1\n1\t139\t1\n");
}

TEST(NegativeSamplerV2, NeverDrawsAPositiveEdgeOfTheRowsUser) {
  TempDir dir;
  WriteGraph(dir);
  protos::NegativeSamplerV2 config;
  SetGraphFields(dir, &config);
  config.set_pos_edge_input_path(dir.File("pos.txt"));
  config.set_num_sample(10);
  auto sampler = Make("negative_sampler_v2", config);
  EXPECT_EQ(sampler->user_id_field(), "user_id");
  SamplerInput input;
  input.user_ids = {1, 2, 3, 4};
  input.item_ids = {101, 102, 103, 104};
  std::mt19937_64 rng(1);
  std::vector<int64_t> counts(40);
  for (int round = 0; round < 4000; ++round) {
    SampledItems sampled = sampler->Sample(input, rng);
    ASSERT_EQ(sampled.items.size(), 10u);
    // expand = ceil(10 / 4) = 3: draws 0-2 for row 0, 3-5 row 1, 6-8 row 2, 9 row 3.
    for (size_t j = 0; j < sampled.items.size(); ++j) {
      const int64_t user = input.user_ids[j / 3];
      const int64_t item = sampler->items().id(sampled.items[j]);
      ASSERT_NE(item % 4, user % 4) << "drew positive item " << item << " for user " << user;
      if (user == 1) ++counts[sampled.items[j]];
    }
  }
  // Uniform over user 1's 30 non-positive items (weights are not used by v2).
  std::vector<double> uniform(40);
  for (int i = 0; i < 40; ++i) uniform[i] = (100 + i) % 4 == 1 ? 0.0 : 1.0;
  EXPECT_LT(ChiSquare(counts, uniform), 58.3);  // 29 dof, p = 0.001
}

TEST(HardNegativeSampler, HardNegativesComeFromTheEdgeTable) {
  TempDir dir;
  WriteGraph(dir);
  protos::HardNegativeSampler config;
  SetGraphFields(dir, &config);
  config.set_hard_neg_edge_input_path(dir.File("hard.txt"));
  config.set_num_sample(5);
  config.set_num_hard_sample(2);
  auto sampler = Make("hard_negative_sampler", config);
  SamplerInput input;
  input.user_ids = {3, 1, 2, 1};
  input.item_ids = {110, 111, 112, 113};
  std::mt19937_64 rng(2);
  SampledItems sampled = sampler->Sample(input, rng);
  ASSERT_EQ(sampled.num_negatives, 5);
  std::vector<int64_t> hard;
  for (size_t i = 5; i < sampled.items.size(); ++i) hard.push_back(sampler->items().id(sampled.items[i]));
  // Row 1 (user 1): its first 2 hard items in table order; row 2 (user 2): 1; row 3: user 1 again.
  EXPECT_EQ(hard, (std::vector<int64_t>{130, 120, 101, 130, 120}));
  EXPECT_EQ(sampled.hard_neg_indices, (std::vector<int32_t>{1, 0, 1, 1, 2, 0, 3, 0, 3, 1}));
  for (int i = 0; i < 5; ++i) {
    const int64_t id = sampler->items().id(sampled.items[i]);
    EXPECT_TRUE(id < 110 || id > 113) << id;
  }

  protos::HardNegativeSamplerV2 v2;
  SetGraphFields(dir, &v2);
  v2.set_pos_edge_input_path(dir.File("pos.txt"));
  v2.set_hard_neg_edge_input_path(dir.File("hard.txt"));
  v2.set_num_sample(8);
  v2.set_num_hard_sample(5);
  sampled = Make("hard_negative_sampler_v2", v2)->Sample(input, rng);
  ASSERT_EQ(sampled.num_negatives, 8);
  ASSERT_EQ(sampled.items.size(), 8u + 3 + 1 + 3);
  // num_hard_sample 0 (a config that leaves the required field out): every hard item.
  config.set_num_hard_sample(0);
  SampledItems all = Make("hard_negative_sampler", config)->Sample(input, rng);
  EXPECT_EQ(all.items.size(), 5u + 3 + 1 + 3);
  for (int j = 0; j < 8; ++j) {
    const int64_t user = input.user_ids[j / 2];
    ASSERT_NE(sampler->items().id(sampled.items[j]) % 4, user % 4);
  }
}

TEST(NegativeSampler, BadTablesNameFileAndLine) {
  TempDir dir;
  WriteFile(dir.File("short.txt"), "id:int64\tweight:float\tattrs:string\n1\t1\ta\x02" "b\x02" "c\n2\t1\ta\x02" "b\n");
  EXPECT_TZREC_ERROR(Make("negative_sampler", V1Config(dir.File("short.txt"), 4)),
                     "short.txt:3: item 2 has 2 attributes");
  WriteFile(dir.File("weight.txt"), "id:int64\tweight:float\tattrs:string\n1\tnan\ta\x02" "b\x02" "c\n");
  EXPECT_TZREC_ERROR(Make("negative_sampler", V1Config(dir.File("weight.txt"), 4)),
                     "weight.txt:2: column 'weight:float' must be a finite weight");
  WriteFile(dir.File("noid.txt"), "item:int64\tweight:float\tattrs:string\n1\t1\ta\x02" "b\x02" "c\n");
  EXPECT_TZREC_ERROR(Make("negative_sampler", V1Config(dir.File("noid.txt"), 4)), "needs a column 'id'");
  WriteFile(dir.File("dup.txt"), "id:int64\tweight:float\tattrs:string\n1\t1\ta\x02" "b\x02" "c\n1\t1\ta\x02" "b\x02" "c\n");
  EXPECT_TZREC_ERROR(Make("negative_sampler", V1Config(dir.File("dup.txt"), 4)),
                     "dup.txt:3: item id 1 appears twice");
  EXPECT_TZREC_ERROR(Make("negative_sampler", V1Config(dir.File("missing*.txt"), 4)),
                     "data_config.negative_sampler: input path pattern");

  WriteGraph(dir);
  WriteFile(dir.File("badedge.txt"), "userid:int64\titemid:int64\tweight:float\n1\t100\t1\n1\t5\t1\n");
  protos::NegativeSamplerV2 config;
  SetGraphFields(dir, &config);
  config.set_pos_edge_input_path(dir.File("badedge.txt"));
  config.set_num_sample(4);
  EXPECT_TZREC_ERROR(Make("negative_sampler_v2", config), "badedge.txt:3: item 5 is not in the item table");
}

// Parquet tables (TorchEasyRec's tables exported from MaxCompute as Parquet) read as their
// text twins: the same ids, weights, attributes and edges.
TEST(NegativeSampler, ParquetTablesReadAsTheirTextTwins) {
  TempDir dir;
  WriteFile(dir.File("items.txt"), "id:int64\tweight:float\tattrs:string\n7\t0.5\ta\x02" "1\n9\t2\tb\x02" "2\n");
  WriteFile(dir.File("edges.txt"), "userid:int64\titemid:int64\tweight:float\n1\t9\t1\n1\t7\t1\n");
  auto column = [](const std::string& name, ColumnType type) {
    ParquetColumn c;
    c.name = c.values.name = name;
    c.values.type = type;
    return c;
  };
  {
    ParquetFileWriter writer(dir.File("items.parquet"), {ParquetFieldSpec::Plain("id", ParquetType::kInt64),
                                                         ParquetFieldSpec::Plain("weight", ParquetType::kDouble),
                                                         ParquetFieldSpec::Plain("attrs", ParquetType::kString)});
    ParquetColumn id = column("id", ColumnType::kInt64), weight = column("weight", ColumnType::kDouble),
                  attrs = column("attrs", ColumnType::kString);
    id.values.ints = {7, 9};
    id.values.valid = {1, 1};
    weight.values.doubles = {0.5, 2};
    weight.values.valid = {1, 1};
    attrs.values.AppendString("a\x02" "1", true);
    attrs.values.AppendString("b\x02" "2", true);
    writer.Write({id, weight, attrs});
    writer.Close();
  }
  {
    ParquetFileWriter writer(dir.File("edges.parquet"), {ParquetFieldSpec::Plain("userid", ParquetType::kInt64),
                                                         ParquetFieldSpec::Plain("itemid", ParquetType::kInt64),
                                                         ParquetFieldSpec::Plain("weight", ParquetType::kDouble)});
    ParquetColumn user = column("userid", ColumnType::kInt64), item = column("itemid", ColumnType::kInt64),
                  weight = column("weight", ColumnType::kDouble);
    user.values.ints = {1, 1};
    item.values.ints = {9, 7};
    weight.values.doubles = {1, 1};
    user.values.valid = item.values.valid = weight.values.valid = {1, 1};
    writer.Write({user, item, weight});
    writer.Close();
  }
  const SamplerItemTable text(dir.File("items.txt"), "", "\x02", 2, "test");
  const SamplerItemTable parquet(dir.File("items.parquet"), "", "\x02", 2, "test");
  ASSERT_EQ(parquet.size(), text.size());
  for (uint32_t i = 0; i < text.size(); ++i) {
    EXPECT_EQ(parquet.id(i), text.id(i));
    EXPECT_EQ(parquet.weight(i), text.weight(i));
    EXPECT_EQ(parquet.Attr(i, 0), text.Attr(i, 0));
    EXPECT_EQ(parquet.Attr(i, 1), text.Attr(i, 1));
  }
  const SamplerEdgeTable text_edges(dir.File("edges.txt"), "", text, {}, "test");
  const SamplerEdgeTable parquet_edges(dir.File("edges.parquet"), "", parquet, {}, "test");
  size_t a = 0, b = 0;
  const uint32_t* x = text_edges.Begin(1, &a);
  const uint32_t* y = parquet_edges.Begin(1, &b);
  ASSERT_EQ(a, 2u);
  ASSERT_EQ(b, a);
  EXPECT_TRUE(std::equal(x, x + a, y));
  EXPECT_TRUE(parquet_edges.Has(1, static_cast<uint32_t>(parquet.Find(7))));
}

TEST(NegativeSampler, DatasetAppendsSampledItemsAfterTheBatch) {
  TempDir dir;
  WriteFile(dir.File("items.txt"), ItemTable());
  std::string data = "user_id,item_id,price,clk\n";
  for (int r = 0; r < 6; ++r) data += std::to_string(r) + "," + std::to_string(100 + r) + ",1.5,1\n";
  WriteFile(dir.File("train.csv"), data);
  auto config = ParsePipelineConfigText(R"(
    data_config { dataset_type: CsvDataset with_header: true label_fields: "clk" batch_size: 4
      negative_sampler { num_sample: 3 attr_fields: ["item_id", "cate", "price"]
                         item_id_field: "item_id" attr_delimiter: "\x02" input_path: "ITEMS" } }
    feature_configs { id_feature { feature_name: "user_id" num_buckets: 100 embedding_dim: 4 } }
    feature_configs { id_feature { feature_name: "item_id" num_buckets: 1000 embedding_dim: 4 } }
    feature_configs { raw_feature { feature_name: "price" } }
  )", "test");
  config.mutable_data_config()->mutable_negative_sampler()->set_input_path(dir.File("items.txt"));
  auto features = CreateFeatures(config.feature_configs(), config.data_config());
  ASSERT_EQ(features.size(), 3u);
  EXPECT_EQ(features[0]->data_group(), "__BASE__");
  EXPECT_EQ(features[1]->data_group(), "__NEG__");
  EXPECT_EQ(features[2]->data_group(), "__NEG__");
  std::vector<const Feature*> views;
  for (const auto& f : features) views.push_back(f.get());
  Dataset dataset(config.data_config(), views, dir.File("train.csv"), DatasetMode::kTrain, 7);
  auto stream = dataset.Open(0);
  ParsedBatch batch;
  std::vector<int64_t> sizes;
  while (stream->Next(&batch)) {
    sizes.push_back(batch.size);
    EXPECT_EQ(batch.sampled_rows, 3);
    EXPECT_EQ(batch.sampled_group, "__NEG__");
    EXPECT_EQ(std::set<std::string>(batch.sampled_features.begin(), batch.sampled_features.end()),
              (std::set<std::string>{"item_id", "price"}));
    EXPECT_TRUE(batch.id_columns.empty());
    EXPECT_EQ(batch.sparse.at("user_id").lengths.size(), static_cast<size_t>(batch.size));
    const SparseValues& items = batch.sparse.at("item_id");
    ASSERT_EQ(items.lengths.size(), static_cast<size_t>(batch.size + 3));
    ASSERT_EQ(items.values.size(), static_cast<size_t>(batch.size + 3));
    std::set<int64_t> own(items.values.begin(), items.values.begin() + batch.size);
    const DenseValues& price = batch.dense.at("price");
    ASSERT_EQ(price.values.size(), static_cast<size_t>(batch.size + 3));
    for (int64_t j = batch.size; j < batch.size + 3; ++j) {
      const int64_t id = items.values[j];
      EXPECT_TRUE(id >= 100 && id < 140) << id;
      EXPECT_FALSE(own.count(id)) << "sampled an item of the batch: " << id;
      EXPECT_FLOAT_EQ(price.values[j], static_cast<float>(id / 10.0));
    }
  }
  EXPECT_EQ(sizes, (std::vector<int64_t>{4, 2}));

  // force_base_data_group: everything in __BASE__, user features padded with empty rows.
  config.mutable_data_config()->set_force_base_data_group(true);
  features = CreateFeatures(config.feature_configs(), config.data_config());
  views.clear();
  for (const auto& f : features) views.push_back(f.get());
  EXPECT_EQ(features[1]->data_group(), "__BASE__");
  EXPECT_TRUE(features[1]->negative());
  Dataset padded(config.data_config(), views, dir.File("train.csv"), DatasetMode::kTrain, 7);
  stream = padded.Open(0);
  ASSERT_TRUE(stream->Next(&batch));
  EXPECT_EQ(batch.sampled_group, "__BASE__");
  const SparseValues& users = batch.sparse.at("user_id");
  ASSERT_EQ(users.lengths.size(), 7u);
  EXPECT_EQ(users.lengths[4] + users.lengths[5] + users.lengths[6], 0);
  EXPECT_EQ(users.values.size(), 4u);

  // Predict reads no sampler; an item id that is not an integer is an error naming the row.
  Dataset predict(config.data_config(), views, dir.File("train.csv"), DatasetMode::kPredict, 7);
  EXPECT_EQ(predict.sampler(), nullptr);
  WriteFile(dir.File("bad.csv"), "user_id,item_id,price,clk\n1,x7,1,1\n");
  Dataset bad(config.data_config(), views, dir.File("bad.csv"), DatasetMode::kTrain, 7);
  stream = bad.Open(0);
  EXPECT_TZREC_ERROR(stream->Next(&batch), "bad.csv:2");
}

}  // namespace
}  // namespace tzrec
