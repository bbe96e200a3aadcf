// tzrec serve: answers equal predict's for the same raw rows, under concurrent keep-alive
// clients with dynamic batching; bad requests get 4xx naming the problem, never a crash.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <tuple>
#include <random>
#include <thread>

#include "serve_test_util.h"
#include "test_util.h"
#include "train_test_util.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/strings.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/serving/predict.h"
#include "tzrec/serving/server.h"
#include "tzrec/train/checkpoint.h"
#include "tzrec/train/trainer.h"

namespace tzrec {
namespace {

using Json = nlohmann::json;

// A trained small DeepFM exported, its eval rows as JSON objects (CSV text values) and
// predict's probabilities for them.
struct Fixture {
  testing::TempDir dir;
  std::vector<Json> rows;
  std::vector<double> probs;

  Fixture() {
    testing::TrainAndExportSmallModel(dir);
    PredictOptions predict;
    predict.scripted_model_path = dir.File("export");
    predict.predict_input_path = dir.File("data/eval/*.csv");
    predict.predict_output_path = dir.File("pred");
    predict.output_columns = "probs";
    predict.reserved_columns = "ALL_COLUMNS";
    Predict(predict);
    std::vector<std::string> lines = Split(ReadFileToString(dir.File("pred/part-0.csv")), "\n");
    std::vector<std::string> header = Split(lines[0], ",");
    for (size_t i = 1; i < lines.size(); ++i) {
      if (lines[i].empty()) continue;
      std::vector<std::string> cells = Split(lines[i], ",");
      Json row = Json::object();
      for (size_t c = 1; c < header.size(); ++c) row[header[c]] = cells[c];
      rows.push_back(row);
      double p = 0;
      ParseDouble(cells[0], &p);
      probs.push_back(p);
    }
  }
};

Fixture& Shared() {
  static Fixture* fixture = new Fixture();
  return *fixture;
}

using testing::RunningServer;

ServeOptions Options() {
  ServeOptions options;
  options.model_path = Shared().dir.File("export");
  options.model_name = "small";
  options.model_threads = 1;
  return options;
}

TEST(Serve, PredictionsEqualPredictsForTheSameRows) {
  Fixture& f = Shared();
  RunningServer running(Options());
  auto client = running.Client();
  Json body = {{"instances", f.rows}};
  auto res = client.Post("/v1/models/small:predict", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  Json answer = Json::parse(res->body);
  ASSERT_EQ(answer["predictions"].size(), f.rows.size());
  for (size_t i = 0; i < f.rows.size(); ++i) {
    EXPECT_NEAR(answer["predictions"][i]["probs"].get<double>(), f.probs[i], 1e-6) << i;
  }
  // The ranking shape: one user's features once, items by id, per-item context.
  Json user = f.rows[0];
  Json items = Json::array(), context = Json::array();
  for (size_t i = 0; i < 5; ++i) {
    items.push_back(f.rows[i]["c1"]);
    context.push_back(f.rows[i]["x"]);
  }
  user.erase("c1");
  user.erase("x");
  Json rank = {{"user_features", user}, {"item_ids", items}, {"item_id_column", "c1"},
               {"context_features", {{"x", context}}}};
  res = client.Post("/v1/models/small/rank", rank.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  Json ranked = Json::parse(res->body);
  ASSERT_EQ(ranked["outputs"]["probs"].size(), 5u);
  // Row i of the rank request is row 0's user features with row i's item and context.
  Json expected_rows = Json::array();
  for (size_t i = 0; i < 5; ++i) {
    Json row = user;
    row["c1"] = items[i];
    row["x"] = context[i];
    expected_rows.push_back(row);
  }
  res = client.Post("/v1/models/small:predict", Json{{"instances", expected_rows}}.dump(), "application/json");
  ASSERT_EQ(res->status, 200);
  Json same = Json::parse(res->body);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(ranked["outputs"]["probs"][i], same["predictions"][i]["probs"]);
  }
  // Health and metadata.
  EXPECT_EQ(client.Get("/v2/health/live")->status, 200);
  EXPECT_EQ(client.Get("/v2/health/ready")->status, 200);
  res = client.Get("/v2/models/small");
  ASSERT_EQ(res->status, 200);
  Json meta = Json::parse(res->body);
  EXPECT_EQ(meta["name"], "small");
  EXPECT_EQ(meta["outputs"][0]["name"], "logits");
  EXPECT_EQ(meta["inputs"][0]["datatype"], "FP32");
}

// With --item_table_path a rank request names only item ids: each item's columns come from the
// table (as FeatureStore feeds the TorchEasyRec Processor), unknown items get defaults.
TEST(Serve, RankTakesItemFeaturesFromTheItemTable) {
  Fixture& f = Shared();
  std::map<std::string, std::string> x_of;  // c1 -> x of its first row
  std::vector<std::string> ids;
  std::string table = "c1,x\n";
  for (const Json& row : f.rows) {
    const std::string id = row["c1"].get<std::string>();
    if (id.empty() || x_of.count(id)) continue;
    x_of[id] = row["x"].get<std::string>();
    ids.push_back(id);
    table += id + "," + x_of[id] + "\n";
  }
  ASSERT_GE(ids.size(), 5u);
  testing::WriteFile(f.dir.File("items.csv"), table);
  ServeOptions options = Options();
  options.item_table_path = f.dir.File("items.csv");
  options.item_table_key = "c1";
  RunningServer running(options);
  auto client = running.Client();
  Json user = f.rows[0];
  user.erase("c1");
  user.erase("x");
  Json items = Json::array();
  for (size_t i = 0; i < 5; ++i) items.push_back(ids[i]);
  items.push_back("987654");  // not in the table
  auto res = client.Post("/v1/models/small/rank", Json{{"user_features", user}, {"item_ids", items}}.dump(),
                         "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  Json ranked = Json::parse(res->body);
  EXPECT_EQ(ranked["items_not_found"], Json::array({"987654"}));
  Json expected_rows = Json::array();
  for (size_t i = 0; i < 5; ++i) {
    Json row = user;
    row["c1"] = items[i];
    row["x"] = x_of[ids[i]];
    expected_rows.push_back(row);
  }
  res = client.Post("/v1/models/small:predict", Json{{"instances", expected_rows}}.dump(), "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  Json same = Json::parse(res->body);
  ASSERT_EQ(ranked["outputs"]["probs"].size(), 6u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(ranked["outputs"]["probs"][i], same["predictions"][i]["probs"]) << i;
  EXPECT_EQ(ranked["outputs"]["probs"][5], 0.0);  // --item_empty_score
  EXPECT_EQ(ranked["outputs"]["logits"][5], 0.0);
  // Only unknown items: nothing is scored.
  res = client.Post("/v1/models/small/rank", Json{{"user_features", user}, {"item_ids", {"987654"}}}.dump(),
                    "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json::parse(res->body)["outputs"]["probs"], Json::array({0.0}));

  // A table that repeats an id, or lacks the key column, stops the server at start.
  testing::WriteFile(f.dir.File("repeated.csv"), "c1,x\n3,0.5\n3,0.7\n");
  options.item_table_path = f.dir.File("repeated.csv");
  try {
    Server server(options);
    ADD_FAILURE() << "a repeated item id was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("repeated.csv:3: item id '3' repeats (first at "), std::string::npos)
        << e.what();
  }
  options.item_table_path = f.dir.File("items.csv");
  options.item_table_key = "item";
  EXPECT_THROW(Server server(options), Error);
}

// KServe v2 infer on generated features (TorchEasyRec's input names) answers what :predict
// answers for the raw rows; bad tensors are 400s naming the input.
TEST(Serve, KServeInferOnGeneratedFeaturesEqualsPredictOnRawRows) {
  Fixture& f = Shared();
  RunningServer running(Options());
  auto client = running.Client();
  const size_t n = 20;
  Json x = Json::array(), c0 = Json::array(), c1 = Json::array();
  Json c0_lengths = Json::array(), c1_lengths = Json::array();
  for (size_t i = 0; i < n; ++i) {
    double v = 0;
    ParseDouble(f.rows[i]["x"].get<std::string>(), &v);
    x.push_back(v);
    // Cells hold ids separated by \x03 (multi-value); an empty cell is a row without ids.
    for (auto [column, values, lengths] : {std::tuple{"c0", &c0, &c0_lengths}, std::tuple{"c1", &c1, &c1_lengths}}) {
      int count = 0;
      for (const std::string& text : Split(f.rows[i][column].get<std::string>(), "\x03")) {
        int64_t id = 0;
        if (!ParseInt64(text, &id)) continue;
        values->push_back(id);
        ++count;
      }
      lengths->push_back(count);
    }
  }
  auto tensor = [](const std::string& name, const char* type, Json data, Json shape) {
    return Json{{"name", name}, {"datatype", type}, {"shape", shape}, {"data", data}};
  };
  Json request = {{"id", "r1"},
                  {"inputs", {tensor("x.values", "FP32", x, {n, 1}), tensor("c0.values", "INT64", c0, {c0.size()}),
                              tensor("c0.lengths", "INT64", c0_lengths, {n}),
                              tensor("c1.values", "INT64", c1, {c1.size()}),
                              tensor("c1.lengths", "INT64", c1_lengths, {n})}},
                  {"outputs", {{{"name", "probs"}}}}};
  auto res = client.Post("/v2/models/small/infer", request.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  Json answer = Json::parse(res->body);
  EXPECT_EQ(answer["id"], "r1");
  ASSERT_EQ(answer["outputs"].size(), 1u);
  EXPECT_EQ(answer["outputs"][0]["name"], "probs");
  EXPECT_EQ(answer["outputs"][0]["shape"], Json({n}));
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(answer["outputs"][0]["data"][i].get<double>(), f.probs[i], 1e-6) << i << " " << f.rows[i].dump();
  }
  // The URL may name the version: the serving one answers, another is 404.
  const std::string version = answer["model_version"].get<std::string>();
  res = client.Post("/v2/models/small/versions/" + version + "/infer", request.dump(), "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json::parse(res->body)["outputs"], answer["outputs"]);
  res = client.Post("/v2/models/small/versions/999/infer", request.dump(), "application/json");
  EXPECT_EQ(res->status, 404) << res->body;
  EXPECT_NE(res->body.find("version 999 of model 'small' is not loaded"), std::string::npos) << res->body;
  auto expect_400 = [&](Json bad, const std::string& message) {
    auto r = client.Post("/v2/models/small/infer", bad.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    EXPECT_NE(r->body.find(message), std::string::npos) << r->body;
  };
  Json bad = request;
  bad["inputs"].erase(1);
  expect_400(bad, "'c0.values' is missing");
  bad = request;
  bad["inputs"][1]["data"][0] = 50;
  expect_400(bad, "'c0.values': id 50 out of range [0, 50)");
  bad = request;
  bad["inputs"][2]["data"][0] = bad["inputs"][2]["data"][0].get<int64_t>() + 1;
  expect_400(bad, StrCat("'c0.values' has ", c0.size(), " ids, its lengths say ", c0.size() + 1));
  bad = request;
  bad["inputs"][0]["data"].erase(0);
  expect_400(bad, "'c0.lengths' has 20 rows, others 19");
  bad = request;
  bad["outputs"][0]["name"] = "nope";
  expect_400(bad, "the model has no output 'nope'");
}

// `clients` keep-alive clients each POST `requests` :predict requests, request r of client c
// with the rows rows_of(c, r); counts the failed requests and the wrong probabilities.
struct ClientCounts {
  int failed = 0, wrong = 0;
};
ClientCounts PredictConcurrently(RunningServer& running, int clients, int requests,
                                 const std::function<std::vector<size_t>(int, int)>& rows_of) {
  Fixture& f = Shared();
  std::atomic<int> wrong{0}, failed{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto client = running.Client();
      for (int r = 0; r < requests; ++r) {
        const std::vector<size_t> rows = rows_of(c, r);
        Json instances = Json::array();
        for (size_t row : rows) instances.push_back(f.rows[row]);
        auto res = client.Post("/v1/models/small:predict", Json{{"instances", instances}}.dump(), "application/json");
        if (!res || res->status != 200) {
          ++failed;
          continue;
        }
        const Json answer = Json::parse(res->body)["predictions"];
        for (size_t k = 0; k < rows.size(); ++k) {
          if (std::abs(answer[k]["probs"].get<double>() - f.probs[rows[k]]) > 1e-6) ++wrong;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return {failed.load(), wrong.load()};
}

TEST(Serve, ConcurrentKeepAliveClientsAreBatchedAndAnsweredExactly) {
  Fixture& f = Shared();
  ServeOptions options = Options();
  options.max_queue_delay_us = 3000;
  options.max_batch_rows = 64;
  RunningServer running(options);
  constexpr int kClients = 8, kRequests = 25;
  const ClientCounts counts = PredictConcurrently(running, kClients, kRequests, [&](int c, int r) {
    return std::vector<size_t>{(c * kRequests + r) % f.rows.size()};
  });
  EXPECT_EQ(counts.failed, 0);
  EXPECT_EQ(counts.wrong, 0);
  auto metrics = running.Client().Get("/metrics");
  ASSERT_EQ(metrics->status, 200);
  auto value = [&](const std::string& name) {
    const size_t at = metrics->body.find("\n" + name + " ");
    EXPECT_NE(at, std::string::npos) << name;
    double v = -1;
    ParseDouble(Trim(metrics->body.substr(at + name.size() + 2, 20).substr(0, metrics->body.substr(at + name.size() + 2).find('\n'))), &v);
    return v;
  };
  EXPECT_EQ(value("tzrec_inference_rows_total"), kClients * kRequests);
  EXPECT_EQ(value("tzrec_request_success_total"), kClients * kRequests);
  // With 8 clients and a 3 ms window, requests share model executions.
  EXPECT_LT(value("tzrec_inference_batches_total"), kClients * kRequests);
  EXPECT_NE(metrics->body.find("tzrec_model_duration_seconds_bucket{le=\"+Inf\"}"), std::string::npos);
}

// Without a batching window a request runs on its own connection thread while one of the
// model_workers slots is free and queues for the workers otherwise: with 8 clients and 3
// slots both paths run at once, concurrent forwards of one model included.
TEST(Serve, RequestsRunConcurrentlyOnTheirOwnThreadsOrTheWorkersAndAreAnsweredExactly) {
  Fixture& f = Shared();
  ServeOptions options = Options();
  options.model_workers = 3;
  RunningServer running(options);
  // Requests of 1 to 8 rows from different places in the data.
  const ClientCounts counts = PredictConcurrently(running, 8, 20, [&](int c, int r) {
    const size_t first = (c * 7 + r * 3) % f.rows.size(), count = 1 + (c + r) % 8;
    std::vector<size_t> rows;
    for (size_t k = 0; k < count; ++k) rows.push_back((first + k) % f.rows.size());
    return rows;
  });
  EXPECT_EQ(counts.failed, 0);
  EXPECT_EQ(counts.wrong, 0);
}

TEST(Serve, BadRequestsAreAnsweredWithTheProblemNamed) {
  Fixture& f = Shared();
  ServeOptions options = Options();
  options.max_request_bytes = 4096;
  RunningServer running(options);
  auto client = running.Client();
  auto post = [&](const std::string& path, const std::string& body) {
    auto res = client.Post(path.c_str(), body, "application/json");
    EXPECT_TRUE(res);
    return res ? std::make_pair(res->status, res->body) : std::make_pair(-1, std::string());
  };
  auto [status, body] = post("/v1/models/small:predict", "{\"instances\": [");
  EXPECT_EQ(status, 400);
  EXPECT_NE(body.find("not valid JSON"), std::string::npos) << body;
  std::tie(status, body) = post("/v1/models/other:predict", "{}");
  EXPECT_EQ(status, 404);
  EXPECT_NE(body.find("no model 'other'"), std::string::npos) << body;
  std::tie(status, body) = post("/v1/models/small:predict", "{\"rows\": []}");
  EXPECT_EQ(status, 400);
  Json bad = f.rows[0];
  bad["x"] = "not-a-number";
  std::tie(status, body) = post("/v1/models/small:predict", Json{{"instances", {bad}}}.dump());
  EXPECT_EQ(status, 400);
  EXPECT_NE(body.find("'x'"), std::string::npos) << body;
  bad = f.rows[0];
  bad["x"] = Json::object();
  std::tie(status, body) = post("/v1/models/small:predict", Json{{"instances", {bad}}}.dump());
  EXPECT_EQ(status, 400);
  EXPECT_NE(body.find("column 'x': expected a number, string or array"), std::string::npos) << body;
  std::tie(status, body) = post("/v1/models/small/rank",
                                R"({"item_ids": [1, 2], "context_features": {"x": [1]}})");
  EXPECT_EQ(status, 400);
  EXPECT_NE(body.find("context_features.x: expected an array of 2 values"), std::string::npos) << body;
  std::tie(status, body) = post("/v1/models/small/rank",
                                R"({"item_ids": [1, 2], "user_features": {"x": 1}, "context_features": {"x": [1, 2]}})");
  EXPECT_EQ(status, 400);
  EXPECT_NE(body.find("context_features: column 'x' is given twice"), std::string::npos) << body;
  std::tie(status, body) = post("/v1/models/small/rank", R"({"item_ids": [1], "user_features": [1]})");
  EXPECT_EQ(status, 400);
  EXPECT_NE(body.find("user_features: expected an object"), std::string::npos) << body;
  std::tie(status, body) = post("/v1/models/small:predict", std::string(8000, ' '));
  EXPECT_EQ(status, 413);
  EXPECT_EQ(client.Get("/nowhere")->status, 404);

  // Mutated bodies (bytes flipped, cut, duplicated): every answer is 200 or 4xx, and the
  // server keeps answering.
  const std::string valid = Json{{"instances", {f.rows[0], f.rows[1]}}}.dump();
  std::mt19937 rng(7);
  int answered = 0;
  for (int i = 0; i < 300; ++i) {
    std::string mutated = valid;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % mutated.size();
      switch (rng() % 3) {
        case 0: mutated[at] = static_cast<char>(rng() % 256); break;
        case 1: mutated.resize(at); break;
        default: mutated.insert(at, mutated.substr(at, rng() % 16)); break;
      }
      if (mutated.empty()) mutated = "x";
    }
    auto res = client.Post("/v1/models/small:predict", mutated, "application/json");
    ASSERT_TRUE(res) << "no answer to body " << i;
    EXPECT_TRUE(res->status == 200 || (res->status >= 400 && res->status < 500))
        << res->status << " " << res->body;
    ++answered;
  }
  EXPECT_EQ(answered, 300);
  EXPECT_EQ(client.Get("/v2/health/live")->status, 200);
}

TEST(Serve, AFullQueueAnswers503AndAMissingModelFailsAtStart) {
  ServeOptions options = Options();
  options.max_queue_size = 0;
  RunningServer running(options);
  auto res = running.Client().Post("/v1/models/small:predict",
                                   Json{{"instances", {Shared().rows[0]}}}.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  EXPECT_NE(res->body.find("queue is full"), std::string::npos);
  options.max_queue_size = 256;
  options.model_workers = -1;
  EXPECT_TZREC_ERROR(Server{options}, "--model_threads and --model_workers must not be negative");
  options.model_workers = 0;
  options.model_path = Shared().dir.File("model");
  EXPECT_TZREC_ERROR(Server{options}, "is neither an export directory nor a directory of numbered");
}

// A new version appears under load: polled, swapped in with no failed request, every answer
// computed by the version it names; a broken version is refused and the old one keeps serving.
TEST(Serve, ReloadUnderLoadFailsNoRequestAndKeepsTheOldVersionWhenTheNewOneIsBroken) {
  Fixture& f = Shared();
  auto checkpoints = ListCheckpoints(f.dir.File("model"));
  ASSERT_GE(checkpoints.size(), 2u);
  // Version 1 from the first checkpoint, version 2 from the last: different weights.
  auto export_version = [&](const std::string& checkpoint, const std::string& where) {
    ExportOptions options;
    options.pipeline_config_path = f.dir.File("model/pipeline.config");
    options.checkpoint_path = checkpoint;
    options.export_dir = where;
    options.quant_from_environment = false;
    ExportModel(options);
  };
  testing::TempDir repo;
  export_version(checkpoints.front().path, repo.File("1"));
  export_version(checkpoints.back().path, repo.File("staged2"));
  std::map<std::string, std::vector<double>> expected;  // version -> probs of rows 0..9
  for (const auto& [version, dir] : {std::pair<std::string, std::string>{"1", repo.File("1")},
                                     {"2", repo.File("staged2")}}) {
    PredictOptions predict;
    predict.scripted_model_path = dir;
    predict.predict_input_path = f.dir.File("data/eval/*.csv");
    predict.predict_output_path = repo.File("pred" + version);
    predict.output_columns = "probs";
    predict.predict_steps = 1;
    Predict(predict);
    auto lines = Split(ReadFileToString(repo.File("pred" + version + "/part-0.csv")), "\n");
    for (size_t i = 1; i <= 10; ++i) {
      double p = 0;
      ParseDouble(lines[i], &p);
      expected[version].push_back(p);
    }
  }
  ASSERT_NE(expected["1"], expected["2"]);

  ServeOptions options = Options();
  options.model_path = repo.path();
  options.poll_interval_ms = 50;
  RunningServer running(options);
  std::atomic<bool> done{false};
  std::atomic<int> failed{0}, wrong{0}, answered_by_2{0}, total{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      auto client = running.Client();
      for (int r = 0; !done; ++r) {
        const size_t row = (c + r) % 10;
        auto res = client.Post("/v1/models/small:predict", Json{{"instances", {f.rows[row]}}}.dump(),
                               "application/json");
        ++total;
        if (!res || res->status != 200) {
          ++failed;
          continue;
        }
        Json answer = Json::parse(res->body);
        const std::string version = answer["model_version"];
        if (version == "2") ++answered_by_2;
        if (!expected.count(version) ||
            std::abs(answer["predictions"][0]["probs"].get<double>() - expected[version][row]) > 1e-6) {
          ++wrong;
        }
      }
    });
  }
  auto wait_for = [](const std::function<bool()>& condition) {
    for (int i = 0; i < 400 && !condition(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return condition();
  };
  EXPECT_TRUE(wait_for([&] { return total > 40; }));
  ASSERT_EQ(std::rename(repo.File("staged2").c_str(), repo.File("2").c_str()), 0);
  EXPECT_TRUE(wait_for([&] { return answered_by_2 > 20; })) << "version 2 never answered";
  // A broken version 3: refused, version 2 keeps serving.
  export_version(checkpoints.front().path, repo.File("staged3"));
  const std::string weights = repo.File("staged3/model.safetensors");
  const std::string bytes = ReadFileToString(weights);
  WriteFileAtomic(weights, bytes.substr(0, bytes.size() / 2));
  ASSERT_EQ(std::rename(repo.File("staged3").c_str(), repo.File("3").c_str()), 0);
  auto client = running.Client();
  EXPECT_TRUE(wait_for([&] {
    auto metrics = client.Get("/metrics");
    return metrics && metrics->body.find("tzrec_model_failed_reloads_total 0") == std::string::npos;
  }));
  const int before = answered_by_2;
  EXPECT_TRUE(wait_for([&] { return answered_by_2 > before + 20; }));
  auto res = client.Post("/v2/repository/models/small/load", "", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_NE(res->body.find("loading version 3 failed (version 2 keeps serving)"), std::string::npos)
      << res->body;
  done = true;
  for (auto& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(total.load(), 100);
}

}  // namespace
}  // namespace tzrec
