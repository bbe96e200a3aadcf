#include "tzrec/serving/server.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <set>
#include <chrono>
#include <condition_variable>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <array>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <tuple>

#include "tzrec/batch/batch.h"
#include "tzrec/common/error.h"
#include "tzrec/common/flags.h"
#include "tzrec/common/fs.h"
#include "tzrec/common/logging.h"
#include "tzrec/common/strings.h"
#include "tzrec/input/dataset.h"
#include "tzrec/serving/item_table.h"
#include "tzrec/serving/exported_model.h"
#include "tzrec/serving/request_decoding.h"

namespace tzrec {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// The newest numbered version directory under `path`, or `path` itself when it is an export.
std::pair<std::string, std::string> ResolveVersion(const std::string& path) {
  if (IsExportDir(path)) return {path, "1"};
  int64_t best = -1;
  for (const std::string& name : ListDirectory(path)) {
    int64_t version;
    if (ParseInt64(name, &version) && version >= 0 && IsExportDir(JoinPath(path, name))) {
      best = std::max(best, version);
    }
  }
  if (best < 0) {
    Fail("--model_path '", path, "' is neither an export directory nor a directory of numbered "
         "export directories");
  }
  return {JoinPath(path, std::to_string(best)), std::to_string(best)};
}

// Latency histogram in Prometheus form (seconds).
class Histogram {
 public:
  void Observe(double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = 0; i < kBounds.size(); ++i) {
      if (seconds <= kBounds[i]) ++counts_[i];
    }
    ++count_;
    sum_ += seconds;
  }
  void Print(const std::string& name, const std::string& help, std::string* out) const {
    std::lock_guard<std::mutex> lock(mutex_);
    *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    for (size_t i = 0; i < kBounds.size(); ++i) {
      *out += StrCat(name, "_bucket{le=\"", kBounds[i], "\"} ", counts_[i], "\n");
    }
    *out += StrCat(name, "_bucket{le=\"+Inf\"} ", count_, "\n", name, "_sum ", sum_, "\n", name,
                   "_count ", count_, "\n");
  }

 private:
  static constexpr std::array<double, 12> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005,
                                                     0.01, 0.025, 0.05, 0.1, 0.25, 1.0};
  mutable std::mutex mutex_;
  std::array<uint64_t, 12> counts_{};
  uint64_t count_ = 0;
  double sum_ = 0;
};

// One loaded version: what requests parsed with it are scored by.
struct LoadedModel {
  std::string dir, version;
  Json manifest;
  std::unique_ptr<Pipeline> pipeline;
  std::string list_separator;
};

std::shared_ptr<LoadedModel> LoadModel(const std::string& dir, const std::string& version) {
  auto model = std::make_shared<LoadedModel>();
  model->dir = dir;
  model->version = version;
  model->manifest = ReadExportManifest(dir);
  model->pipeline = LoadExportedPipeline(dir, PipelineMode::kPredict);
  model->list_separator = model->pipeline->config.data_config().fg_encoded_multival_sep();
  // Warm-up before the version serves: one forward on a few synthetic rows, so that its first
  // requests do not pay for one-time allocations and kernel setup.
  c10::NoGradGuard no_grad;
  ScopedGemmPrecision precision(model->pipeline->model->gemm_precision());
  model->pipeline->model->Predict(SyntheticBatch(model->pipeline->FeaturePointers(), 8, 1));
  return model;
}

// ServeOptions::model_workers resolved: by default as many workers as the cores hold
// model_threads-wide forwards.
int ModelWorkers(const ServeOptions& options) {
  if (options.model_workers > 0) return options.model_workers;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return options.model_threads > 0 ? std::max(1, cores / options.model_threads) : 1;
}

struct Job {
  std::shared_ptr<LoadedModel> model;
  ParsedBatch parsed;
  Clock::time_point enqueued;
  std::promise<std::map<std::string, at::Tensor>> result;
};

}  // namespace

struct Server::Impl {
  ServeOptions options;
  std::string name;
  // The version new requests use; swapped whole by a reload (requests in flight keep theirs).
  std::mutex model_mutex;
  std::shared_ptr<LoadedModel> current;
  std::mutex reload_mutex;  // one reload at a time
  std::string failed_dir;   // the last version that failed to load (polls skip it)
  std::condition_variable poll_wakeup;
  std::thread poller;
  std::atomic<uint64_t> reloads{0}, failed_reloads{0};

  httplib::Server http;
  int bound_port = 0;

  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::shared_ptr<Job>> queue;
  bool stopping = false;
  std::vector<std::thread> workers;  // model threads (ServeOptions::model_workers)
  int model_workers = 1;             // ModelWorkers(options): batches running at once, at most
  int running = 0;                   // batches running now (workers' and requests' own)

  std::atomic<uint64_t> requests_ok{0}, requests_client_error{0}, requests_rejected{0},
      requests_failed{0}, rows{0}, batches{0};
  Histogram request_latency, queue_latency, fg_latency, model_latency;

  std::unique_ptr<ItemTable> items;  // --item_table_path: item features of rank requests

  void Load() {
    auto [dir, version] = ResolveVersion(options.model_path);
    current = LoadModel(dir, version);
    name = options.model_name.empty() ? current->manifest.value("model", "model") : options.model_name;
  }

  // A reload loads (and warms up) the new version while the current one serves: on a thread
  // of its own with one intra-op thread and a lower CPU priority, so that it takes the cores'
  // idle time instead of the requests' (loading the Criteo bench export with two OpenMP threads
  // at normal priority raised request p99 from about 6 ms to 90 ms).
  static std::shared_ptr<LoadedModel> LoadInBackground(const std::string& dir, const std::string& version) {
    std::shared_ptr<LoadedModel> loaded;
    std::exception_ptr error;
    std::thread loader([&] {
      try {
        at::set_num_threads(1);
        setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);  // this thread only
        loaded = LoadModel(dir, version);
      } catch (...) {
        error = std::current_exception();
      }
    });
    loader.join();
    if (error) std::rethrow_exception(error);
    return loaded;
  }

  std::shared_ptr<LoadedModel> Current() {
    std::lock_guard<std::mutex> lock(model_mutex);
    return current;
  }

  // Loads the newest version when it differs from the current one (or always, `force`), then
  // swaps it in; a version that fails to load leaves the current one serving. Returns the
  // version serving afterwards.
  std::string Reload(bool force) {
    std::lock_guard<std::mutex> reload_lock(reload_mutex);
    auto serving = Current();
    std::string dir, version;
    try {
      std::tie(dir, version) = ResolveVersion(options.model_path);
    } catch (const Error& e) {
      ++failed_reloads;
      throw RequestError(400, StrCat("reload: ", e.what()));
    }
    if (!force && (dir == serving->dir || dir == failed_dir)) return serving->version;
    std::shared_ptr<LoadedModel> loaded;
    try {
      loaded = LoadInBackground(dir, version);
    } catch (const Error& e) {
      ++failed_reloads;
      failed_dir = dir;
      LOG_WARNING << "reload of " << dir << " failed; version " << serving->version
                  << " keeps serving: " << e.what();
      throw RequestError(400, StrCat("loading version ", version, " failed (version ",
                                     serving->version, " keeps serving): ", e.what()));
    }
    {
      std::lock_guard<std::mutex> lock(model_mutex);
      current = loaded;
    }
    ++reloads;
    LOG_INFO << "now serving version " << version << " (" << dir << ")";
    return version;
  }

  void Poll() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      poll_wakeup.wait_for(lock, std::chrono::milliseconds(options.poll_interval_ms));
      if (stopping) break;
      lock.unlock();
      try {
        Reload(false);
      } catch (const std::exception&) {
        // Logged once by Reload; polls skip that directory, the load call retries it.
      }
      lock.lock();
    }
  }

  // Parses rows on the calling (HTTP) thread, then waits for the model thread's batch.
  // Returns the outputs and the version that computed them.
  std::pair<std::map<std::string, at::Tensor>, std::string> Score(const std::vector<const Json*>& rows,
                                                                   const std::string& source) {
    if (rows.empty()) throw RequestError(400, source + ": no rows");
    std::shared_ptr<LoadedModel> model = Current();
    RecordBatch records = RowsToRecords(rows, model->list_separator, source);
    return ScoreRecords(std::move(model), records);
  }

  // Feature generation of `records` on the calling thread, then the model thread's batch.
  std::pair<std::map<std::string, at::Tensor>, std::string> ScoreRecords(std::shared_ptr<LoadedModel> model,
                                                                         const RecordBatch& records) {
    const auto start = Clock::now();
    auto job = std::make_shared<Job>();
    job->model = std::move(model);
    const Pipeline& pipeline = *job->model->pipeline;
    try {
      job->parsed = ParseFeatureRows(pipeline.FeaturePointers(), pipeline.generator.get(), records);
    } catch (const Error& e) {
      throw RequestError(400, e.what());
    }
    fg_latency.Observe(std::chrono::duration<double>(Clock::now() - start).count());
    return Enqueue(job);
  }

  // KServe v2 infer on generated features (no FG).
  // `wanted_version`: the one the URL names (empty: any); only the serving version answers.
  Json Infer(const Json& body, const std::string& wanted_version) {
    auto job = std::make_shared<Job>();
    job->model = Current();
    if (!wanted_version.empty() && wanted_version != job->model->version) {
      throw RequestError(404, StrCat("version ", wanted_version, " of model '", name, "' is not loaded (version ",
                                     job->model->version, " serves)"));
    }
    job->parsed = TensorsToParsed(*job->model->pipeline, body);
    const int64_t rows = job->parsed.size;
    auto [outputs, version] = Enqueue(job);
    std::set<std::string> wanted;
    if (body.contains("outputs") && body["outputs"].is_array()) {
      for (const auto& o : body["outputs"]) {
        if (!o.is_object() || !o.contains("name") || !o["name"].is_string()) {
          throw RequestError(400, "outputs: every entry needs a string name");
        }
        wanted.insert(o["name"].get<std::string>());
        if (!outputs.count(o["name"].get<std::string>())) {
          throw RequestError(400, StrCat("outputs: the model has no output '", o["name"].get<std::string>(), "'"));
        }
      }
    }
    Json out = Json::array();
    for (const auto& [key, tensor] : outputs) {
      if (!wanted.empty() && !wanted.count(key)) continue;
      Json shape = {rows};
      for (int64_t d = 1; d < tensor.dim(); ++d) shape.push_back(tensor.size(d));
      out.push_back({{"name", key}, {"datatype", "FP32"}, {"shape", shape},
                     {"data", std::vector<float>(tensor.data_ptr<float>(), tensor.data_ptr<float>() + tensor.numel())}});
    }
    Json result = {{"model_name", name}, {"model_version", version}, {"outputs", std::move(out)}};
    if (body.contains("id")) result["id"] = body["id"];
    return result;
  }

  // Runs the job's batch on the calling thread when a model slot is free and nothing waits
  // (no batching window to fill): saves two thread hand-offs per request, which on a small
  // machine under load are scheduling delays rather than microseconds. Only for one intra-op
  // thread: a wider forward would give every connection thread an OpenMP team of its own
  // (measured: p50 2.0 -> 4.3 ms at 400 rank requests/s). Otherwise the job queues for the
  // model workers, which batch what waits.
  std::pair<std::map<std::string, at::Tensor>, std::string> Enqueue(const std::shared_ptr<Job>& job) {
    auto future = job->result.get_future();
    bool run_here = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (stopping) throw RequestError(503, "the server is shutting down");
      if (static_cast<int64_t>(queue.size()) >= options.max_queue_size) {
        ++requests_rejected;
        throw RequestError(503, StrCat("the queue is full (", options.max_queue_size, " requests)"));
      }
      job->enqueued = Clock::now();
      if (options.max_queue_delay_us == 0 && options.model_threads == 1 && queue.empty() &&
          running < model_workers) {
        ++running;
        run_here = true;
      } else {
        queue.push_back(job);
      }
    }
    if (run_here) {
      c10::NoGradGuard no_grad;
      std::vector<std::shared_ptr<Job>> jobs{job};
      RunBatch(jobs);
      {
        std::lock_guard<std::mutex> lock(mutex);
        --running;
      }
    }
    changed.notify_all();
    return {future.get(), job->model->version};
  }

  void RunModel() {
    if (options.model_threads > 0) at::set_num_threads(options.model_threads);
    c10::NoGradGuard no_grad;
    while (true) {
      std::vector<std::shared_ptr<Job>> jobs;
      {
        std::unique_lock<std::mutex> lock(mutex);
        // Stopping drains the queue first.
        changed.wait(lock, [&] { return (!queue.empty() && running < model_workers) || (stopping && queue.empty()); });
        if (queue.empty()) return;
        const auto deadline = queue.front()->enqueued + std::chrono::microseconds(options.max_queue_delay_us);
        auto queued_rows = [&] {
          int64_t n = 0;
          for (const auto& job : queue) n += job->parsed.size;
          return n;
        };
        while (!stopping && queued_rows() < options.max_batch_rows &&
               changed.wait_until(lock, deadline) != std::cv_status::timeout) {
        }
        // One batch runs one version: it stops at a request parsed with another.
        int64_t total = 0;
        while (!queue.empty() &&
               (jobs.empty() || (total + queue.front()->parsed.size <= options.max_batch_rows &&
                                 queue.front()->model == jobs.front()->model))) {
          total += queue.front()->parsed.size;
          jobs.push_back(std::move(queue.front()));
          queue.pop_front();
        }
        if (jobs.empty()) continue;  // another worker took what was queued
        ++running;
      }
      RunBatch(jobs);
      {
        std::lock_guard<std::mutex> lock(mutex);
        --running;
      }
      changed.notify_all();
    }
  }

  // One forward over the jobs' rows (all parsed with the same version); answers every job.
  void RunBatch(std::vector<std::shared_ptr<Job>>& jobs) {
    const auto start = Clock::now();
    for (const auto& job : jobs) {
      queue_latency.Observe(std::chrono::duration<double>(start - job->enqueued).count());
    }
    try {
      ParsedBatch combined = std::move(jobs[0]->parsed);
      for (size_t i = 1; i < jobs.size(); ++i) combined.Append(jobs[i]->parsed);
      const int64_t size = combined.size;
      Model& model = *jobs.front()->model->pipeline->model;
      ScopedGemmPrecision precision(model.gemm_precision());
      Predictions predictions = model.Predict(ToBatch(std::move(combined)));
      // Counted before any answer leaves: a client that reads /metrics right after its
      // answer must see its rows.
      rows += size;
      ++batches;
      model_latency.Observe(std::chrono::duration<double>(Clock::now() - start).count());
      int64_t begin = 0;
      for (const auto& job : jobs) {
        const int64_t n = job->parsed.size;
        std::map<std::string, at::Tensor> out;
        for (const auto& [key, tensor] : predictions) out[key] = tensor.narrow(0, begin, n).contiguous();
        begin += n;
        job->result.set_value(std::move(out));
      }
    } catch (...) {
      model_latency.Observe(std::chrono::duration<double>(Clock::now() - start).count());
      for (const auto& job : jobs) {
        try {
          job->result.set_exception(std::current_exception());
        } catch (const std::future_error&) {
        }
      }
    }
  }

  static Json OutputsOfRow(const std::map<std::string, at::Tensor>& outputs, int64_t row) {
    Json out = Json::object();
    for (const auto& [key, tensor] : outputs) {
      if (tensor.dim() == 1) {
        out[key] = tensor.data_ptr<float>()[row];
        continue;
      }
      // [B, D] -> [D floats]; [B, K, D] (MIND's interests) -> K lists of D floats.
      const int64_t width = tensor.size(-1);
      const int64_t lists = tensor.dim() == 3 ? tensor.size(1) : 1;
      const float* values = tensor.data_ptr<float>() + row * lists * width;
      Json rows = Json::array();
      for (int64_t l = 0; l < lists; ++l) rows.push_back(std::vector<float>(values + l * width, values + (l + 1) * width));
      out[key] = tensor.dim() == 3 ? rows : rows[0];
    }
    return out;
  }

  Json Predict(const Json& body) {
    if (!body.is_object() || !body.contains("instances") || !body["instances"].is_array()) {
      throw RequestError(400, "expected {\"instances\": [{column: value, ...}, ...]}");
    }
    std::vector<const Json*> rows;
    for (const auto& row : body["instances"]) rows.push_back(&row);
    auto [outputs, version] = Score(rows, "instances");
    Json predictions = Json::array();
    for (size_t r = 0; r < rows.size(); ++r) predictions.push_back(OutputsOfRow(outputs, r));
    return {{"predictions", std::move(predictions)}, {"model_version", version}};
  }

  Json Rank(const Json& body) {
    if (!body.is_object()) throw RequestError(400, "expected a JSON object");
    if (!body.contains("item_ids")) throw RequestError(400, "item_ids: a non-empty array is required");
    const Json& item_ids = body["item_ids"];
    const std::string id_column = body.value("item_id_column", items ? items->key_column() : "item_id");
    static const Json kEmpty = Json::object();
    const Json& user = body.contains("user_features") ? body["user_features"] : kEmpty;
    const Json& context = body.contains("context_features") ? body["context_features"] : kEmpty;
    std::shared_ptr<LoadedModel> model = Current();
    if (model->pipeline->tower == "user") {
      throw RequestError(400, "this is the user tower of a retrieval model: it embeds users, not items "
                              "(send the user's features to :predict)");
    }
    const std::string list_separator = model->list_separator;
    RecordBatch records = RankToRecords(user, id_column, item_ids, context, list_separator);
    // With an item table, items missing from it are not scored: every output of theirs is
    // --item_empty_score (the TorchEasyRec Processor's item_empty_score), and the answer lists them.
    const size_t count = records.num_rows();
    std::vector<size_t> known;
    std::vector<int64_t> known_rows;
    Json unknown = Json::array();
    const std::vector<int64_t> table_rows =
        items ? items->Find(*records.Find(id_column)) : std::vector<int64_t>(count, 0);
    for (size_t i = 0; i < count; ++i) {
      if (table_rows[i] >= 0) {
        known.push_back(i);
        known_rows.push_back(table_rows[i]);
      } else {
        unknown.push_back(item_ids[i]);
      }
    }
    std::map<std::string, at::Tensor> outputs;
    std::string version = model->version;
    if (!known.empty()) {
      RecordBatch known_records = known.size() == count ? std::move(records) : SelectRows(records, known);
      if (items) items->AppendItemColumns(known_rows, &known_records);
      std::tie(outputs, version) = ScoreRecords(model, known_records);
    }
    Json columns = Json::object();
    for (const auto& output : model->manifest["outputs"]) {
      const std::string key = output["name"].get<std::string>();
      int64_t width = 1;
      for (size_t d = 1; d < output["shape"].size(); ++d) width *= output["shape"][d].get<int64_t>();
      auto it = outputs.find(key);
      std::vector<float> values(count * width, static_cast<float>(options.item_empty_score));
      if (it != outputs.end()) {
        const float* scored = it->second.data_ptr<float>();
        for (size_t k = 0; k < known.size(); ++k) {
          std::copy(scored + k * width, scored + (k + 1) * width, values.begin() + known[k] * width);
        }
      }
      columns[key] = std::move(values);
    }
    Json result = {{"item_ids", item_ids}, {"model_version", version}, {"outputs", std::move(columns)}};
    if (!unknown.empty()) result["items_not_found"] = std::move(unknown);
    return result;
  }

  Json Metadata() {
    const auto model = Current();
    const Json& manifest = model->manifest;
    const std::string& version = model->version;
    Json inputs = Json::array(), outputs = Json::array();
    auto kserve_dtype = [](const std::string& dtype) {
      return dtype == "int64" ? "INT64" : dtype == "float32" ? "FP32" : "BYTES";
    };
    for (const auto& input : manifest["inputs"]) {
      inputs.push_back({{"name", input["name"]}, {"datatype", kserve_dtype(input["dtype"])}, {"shape", input["shape"]}});
    }
    for (const auto& output : manifest["outputs"]) {
      outputs.push_back({{"name", output["name"]}, {"datatype", kserve_dtype(output["dtype"])}, {"shape", output["shape"]}});
    }
    return {{"name", name}, {"versions", {version}}, {"platform", "tzrec-cpp"},
            {"inputs", inputs}, {"outputs", outputs}};
  }

  std::string MetricsText() const {
    std::string out;
    auto counter = [&](const std::string& metric, const std::string& help, const std::string& labels,
                       uint64_t value) {
      out += StrCat("# HELP ", metric, " ", help, "\n# TYPE ", metric, " counter\n", metric, labels,
                    " ", value, "\n");
    };
    counter("tzrec_request_success_total", "requests answered 200", "", requests_ok.load());
    counter("tzrec_request_client_error_total", "requests answered 4xx", "", requests_client_error.load());
    counter("tzrec_request_rejected_total", "requests refused with a full queue (503)", "",
            requests_rejected.load());
    counter("tzrec_request_failure_total", "requests that failed on the server (5xx)", "",
            requests_failed.load());
    counter("tzrec_inference_rows_total", "rows scored", "", rows.load());
    counter("tzrec_inference_batches_total", "model executions (rows / batches = mean batch)", "",
            batches.load());
    counter("tzrec_model_reloads_total", "new versions swapped in", "", reloads.load());
    counter("tzrec_model_failed_reloads_total", "versions that failed to load (the old one kept serving)",
            "", failed_reloads.load());
    request_latency.Print("tzrec_request_duration_seconds", "request latency", &out);
    queue_latency.Print("tzrec_queue_duration_seconds", "time a request waited for the model", &out);
    fg_latency.Print("tzrec_fg_duration_seconds", "feature generation per request", &out);
    model_latency.Print("tzrec_model_duration_seconds", "model execution per batch", &out);
    return out;
  }

  void Route(const std::string& method, const httplib::Request& req, httplib::Response& res,
             const std::function<Json()>& handler) {
    // Connection threads parse and run feature generation with one intra-op thread each: a
    // team of OpenMP threads per connection would spin against the model thread (bench: rank
    // p99 at half of saturation 6-12 ms with two, about 4 ms with one).
    static thread_local const bool one_intra_op_thread = (at::set_num_threads(1), true);
    (void)one_intra_op_thread;
    const auto start = Clock::now();
    int status = 200;
    Json body;
    try {
      body = handler();
    } catch (const RequestError& e) {
      status = e.status;
      body = {{"error", e.what()}};
    } catch (const Error& e) {
      status = 500;
      body = {{"error", e.what()}};
    } catch (const std::exception& e) {
      status = 500;
      body = {{"error", StrCat("internal error: ", e.what())}};
    }
    if (status == 200) {
      ++requests_ok;
    } else if (status == 503) {
      // counted where it was refused
    } else if (status < 500) {
      ++requests_client_error;
    } else {
      ++requests_failed;
      LOG_WARNING << method << " " << req.path << ": " << body["error"].get<std::string>();
    }
    res.status = status;
    res.set_content(body.dump(), "application/json");
    request_latency.Observe(std::chrono::duration<double>(Clock::now() - start).count());
  }

  Json ParseBody(const httplib::Request& req) const {
    Json body = Json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw RequestError(400, "the body is not valid JSON");
    return body;
  }

  void CheckModel(const std::string& model) const {
    if (model != name) throw RequestError(404, StrCat("no model '", model, "' (this server has '", name, "')"));
  }

  void Setup() {
    http.set_payload_max_length(static_cast<size_t>(options.max_request_bytes));
    http.set_keep_alive_max_count(100000);
    http.set_keep_alive_timeout(30);
    http.set_tcp_nodelay(true);
    const int threads = std::max(1, options.http_threads);
    http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http.Get("/v2/health/live", [this](const httplib::Request& req, httplib::Response& res) {
      Route("GET", req, res, [] { return Json{{"live", true}}; });
    });
    http.Get("/v2/health/ready", [this](const httplib::Request& req, httplib::Response& res) {
      Route("GET", req, res, [] { return Json{{"ready", true}}; });
    });
    http.Get(R"(/v2/models/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
      Route("GET", req, res, [&] {
        CheckModel(req.matches[1]);
        return Metadata();
      });
    });
    http.Post(R"(/v1/models/([^/:]+):predict)", [this](const httplib::Request& req, httplib::Response& res) {
      Route("POST", req, res, [&] {
        CheckModel(req.matches[1]);
        return Predict(ParseBody(req));
      });
    });
    http.Post(R"(/v1/models/([^/:]+)/rank)", [this](const httplib::Request& req, httplib::Response& res) {
      Route("POST", req, res, [&] {
        CheckModel(req.matches[1]);
        return Rank(ParseBody(req));
      });
    });
    http.Post(R"(/v2/models/([^/]+)(?:/versions/([^/]+))?/infer)", [this](const httplib::Request& req, httplib::Response& res) {
      Route("POST", req, res, [&] {
        CheckModel(req.matches[1]);
        return Infer(ParseBody(req), req.matches[2]);
      });
    });
    http.Post(R"(/v2/repository/models/([^/]+)/load)", [this](const httplib::Request& req, httplib::Response& res) {
      Route("POST", req, res, [&] {
        CheckModel(req.matches[1]);
        return Json{{"model_version", Reload(true)}};
      });
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(MetricsText(), "text/plain; version=0.0.4");
    });
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string message = res.status == 413 ? "the request body is too large"
                                  : res.status == 404 ? "no such endpoint: " + req.path
                                                      : "bad request";
      res.set_content(Json{{"error", message}}.dump(), "application/json");
    });
    if (options.port == 0) {
      bound_port = http.bind_to_any_port(options.host);
    } else {
      bound_port = http.bind_to_port(options.host, options.port) ? options.port : -1;
    }
    if (bound_port < 0) Fail("cannot listen on ", options.host, ":", options.port);
    RaiseListenBacklog(bound_port);
  }

  // Debian's cpp-httplib library listens with a backlog of 5 (compiled in): a burst of new
  // connections overflows it and the extra SYNs wait for a retransmit (1 s, then 3 s). listen()
  // again on the bound socket raises the backlog; the socket is found by its port.
  static void RaiseListenBacklog(int port) {
    for (int fd = 0; fd < 4096; ++fd) {
      sockaddr_storage address{};
      socklen_t length = sizeof(address);
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) continue;
      int listening = 0;
      socklen_t size = sizeof(listening);
      if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &size) != 0 || !listening) continue;
      int bound = -1;
      if (address.ss_family == AF_INET) bound = ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
      if (address.ss_family == AF_INET6) bound = ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
      if (bound == port && listen(fd, SOMAXCONN) == 0) return;
    }
    LOG_WARNING << "could not raise the listen backlog of port " << port
                << ": bursts of new connections may wait for SYN retransmits";
  }
};

Server::Server(const ServeOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  if (options.max_batch_rows <= 0) Fail("--max_batch_size must be > 0");
  if (options.max_queue_delay_us < 0 || options.max_queue_size < 0) {
    Fail("--max_queue_delay_us and --max_queue_size must not be negative");
  }
  if (options.model_threads < 0 || options.model_workers < 0) {
    Fail("--model_threads and --model_workers must not be negative");
  }
  impl_->Load();
  if (!options.item_table_path.empty()) {
    const protos::DataConfig& data = impl_->current->pipeline->config.data_config();
    ItemTableOptions items;
    items.path = options.item_table_path;
    items.key_column = options.item_table_key;
    if (!data.delimiter().empty()) items.csv_delimiter = data.delimiter()[0];
    items.list_separator = impl_->current->list_separator;
    impl_->items = std::make_unique<ItemTable>(items);
  } else if (!options.item_table_key.empty()) {
    Fail("--item_table_key needs --item_table_path");
  }
  impl_->Setup();
  impl_->model_workers = ModelWorkers(options);
  for (int w = 0; w < impl_->model_workers; ++w) impl_->workers.emplace_back([this] { impl_->RunModel(); });
  if (options.poll_interval_ms > 0) impl_->poller = std::thread([this] { impl_->Poll(); });
  LOG_INFO << "serving " << impl_->name << " version " << impl_->current->version << " ("
           << impl_->current->dir << ") on " << options.host << ":" << impl_->bound_port << " ("
           << ModelWorkers(options) << " model workers of "
           << (options.model_threads > 0 ? options.model_threads : at::get_num_threads()) << " intra-op threads)";
}

Server::~Server() {
  Stop();
  for (auto& worker : impl_->workers) {
    if (worker.joinable()) worker.join();
  }
  if (impl_->poller.joinable()) impl_->poller.join();
}

int Server::port() const { return impl_->bound_port; }

void Server::Run() { impl_->http.listen_after_bind(); }

void Server::Stop() {
  impl_->http.stop();
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->changed.notify_all();
  impl_->poll_wakeup.notify_all();
}

namespace {
int g_signal_pipe = -1;  // written by the signal handler (async-signal-safe)
}  // namespace

int ServeMain(const std::vector<std::string>& args) {
  Flags flags("serve",
              "Serves an export directory over HTTP: feature generation on raw rows with the "
              "training code, dynamic batching, health, metadata and Prometheus metrics.",
              {{"model_path", "export directory, or a directory of numbered export directories"},
               {"model_name", "name in the URLs (default: the model type, e.g. deepfm)"},
               {"host", "address to listen on", false, "127.0.0.1"},
               {"port", "port (0: any free port)", false, "8000"},
               {"http_threads", "connection threads (each open keep-alive connection holds one)", false, "64"},
               {"max_batch_size", "most rows in one model execution", false, "1024"},
               {"max_queue_delay_us", "longest wait for more rows before running a batch", false, "0"},
               {"max_queue_size", "requests waiting for the model before 503", false, "256"},
               {"max_request_bytes", "largest request body (413 above)", false, "16777216"},
               {"model_threads", "intra-op threads of each forward (0: all cores)", false, "1"},
               {"model_workers", "forwards running at once (0: cores / model_threads, one when "
                                 "model_threads is 0)", false, "0"},
               {"poll_interval_ms", "look for a newer version this often and swap it in (0: only "
                                    "POST /v2/repository/models/<name>/load)", false, "0"},
               {"item_table_path", "CSV (with header) or Parquet files of item features: rank "
                                   "requests then need only item ids"},
               {"item_table_key", "the item table's item id column (rank requests' default "
                                  "item_id_column)"},
               {"item_empty_score", "every output of a rank request's items missing from the item "
                                    "table", false, "0"}});
  if (!flags.Parse(args)) return 0;
  ServeOptions options;
  options.model_path = flags.Get("model_path");
  if (options.model_path.empty()) Fail("--model_path is required");
  options.model_name = flags.Get("model_name");
  options.host = flags.Get("host");
  options.port = static_cast<int>(flags.GetInt("port"));
  options.http_threads = static_cast<int>(flags.GetInt("http_threads"));
  options.max_batch_rows = flags.GetInt("max_batch_size");
  options.max_queue_delay_us = flags.GetInt("max_queue_delay_us");
  options.max_queue_size = flags.GetInt("max_queue_size");
  options.max_request_bytes = flags.GetInt("max_request_bytes");
  options.model_threads = static_cast<int>(flags.GetInt("model_threads"));
  options.model_workers = static_cast<int>(flags.GetInt("model_workers"));
  options.poll_interval_ms = flags.GetInt("poll_interval_ms");
  options.item_table_path = flags.Get("item_table_path");
  options.item_table_key = flags.Get("item_table_key");
  if (!ParseDouble(flags.Get("item_empty_score"), &options.item_empty_score)) {
    Fail("--item_empty_score: not a number: ", flags.Get("item_empty_score"));
  }
  // SIGTERM / SIGINT drain: the handler (any thread may take the signal) only writes to a
  // pipe; a watcher thread reads it and stops the server, which finishes what is in flight.
  Server server(options);
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) Fail("serve: cannot create a pipe: ", std::strerror(errno));
  g_signal_pipe = pipe_fds[1];
  struct sigaction action {};
  action.sa_handler = [](int signal) {
    const char byte = static_cast<char>(signal);
    [[maybe_unused]] ssize_t n = write(g_signal_pipe, &byte, 1);
  };
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  std::thread watcher([&server, fd = pipe_fds[0]] {
    char byte = 0;
    if (read(fd, &byte, 1) == 1 && byte != 0) {
      LOG_INFO << "signal " << static_cast<int>(byte)
               << ": finishing the requests in flight, then stopping";
      server.Stop();
    }
  });
  server.Run();
  const char done = 0;
  [[maybe_unused]] ssize_t n = write(pipe_fds[1], &done, 1);  // release the watcher
  watcher.join();
  signal(SIGTERM, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  LOG_INFO << "server stopped";
  return 0;
}

}  // namespace tzrec
