// `tzrec serve`: an HTTP server that scores raw feature rows with an export directory, running
// feature generation with the very code training used.
//
// Requests are JSON. Rows carry the model's input columns as the training data had them (raw
// inputs for FG_DAG configs, encoded features for FG_NONE); numbers, strings or arrays
// (multi-value / sequence inputs, joined as a Parquet LIST column would be). Endpoints:
//   POST /v1/models/<m>:predict   {"instances": [{column: value, ...}, ...]}
//                                  -> {"predictions": [{output: value, ...}, ...]}
//   POST /v1/models/<m>/rank       the TorchEasyRec Processor's shape: {"user_features": {...},
//                                  "item_ids": [...], "item_id_column": "<column>" (default
//                                  item_id), "context_features": {column: [one per item]}}
//                                  -> {"item_ids": [...], "outputs": {output: [one per item]}}
//   POST /v2/models/<m>/infer      KServe v2 on generated features: `<f>.values` / `.lengths` /
//                                  `.weights` / `.key_lengths` tensors (TorchEasyRec's names), no FG
//   GET  /v2/health/live, /v2/health/ready, /v2/models/<m> (KServe v2 metadata)
//   GET  /metrics                  Prometheus text: requests, rows, batches, latencies
//   POST /v2/repository/models/<m>/load  load the newest version now
// Versions: `model_path` is an export or a directory of numbered exports (the highest serves).
// A new version is loaded beside the serving one (polled, or on the load call) and swapped in
// at once; requests parsed before the swap finish with the old one, so none fails, and a
// version that does not load leaves the old one serving.
// Up to model_workers forwards run at once (each with model_threads intra-op threads), so that
// on a machine of several cores one batch does not wait for another. Without a batching window
// and with one intra-op thread, a request runs on its own connection thread while a slot is
// free; otherwise it is queued and
// the model worker threads run dynamic batches (up to max_batch_rows rows, waiting at most
// max_queue_delay_us for more). A full queue answers 503, a malformed request 400 naming what
// is wrong, a body over max_request_bytes 413.
//
// Thread-safety: Server's methods may be called from any thread; Stop() waits for the
// requests in flight.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tzrec {

struct ServeOptions {
  std::string model_path;   // an export directory, or a directory of numbered versions of one
  std::string model_name;   // default: the export directory's name
  std::string host = "127.0.0.1";
  int port = 8000;          // 0: any free port (see Server::port())
  int http_threads = 64;      // one per open keep-alive connection (cpp-httplib holds a thread per connection)
  int64_t max_batch_rows = 1024;
  int64_t max_queue_delay_us = 0;
  int64_t max_queue_size = 256;        // requests waiting; more are answered 503
  int64_t max_request_bytes = 16 << 20;
  int model_threads = 1;               // intra-op threads of each forward; 0: all cores
  int model_workers = 0;               // batches run at once; 0: cores / model_threads (at least 1)
  int64_t poll_interval_ms = 0;        // > 0: swap in a newer version when one appears
  std::string item_table_path;         // rank requests' item features (serving/item_table.h)
  std::string item_table_key;          // its item id column
  double item_empty_score = 0.0;       // outputs of items missing from the item table
};

class Server {
 public:
  // Loads the model (failing naming the directory) and binds the port.
  explicit Server(const ServeOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  // Serves until Stop() (blocking).
  void Run();
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

int ServeMain(const std::vector<std::string>& args);

}  // namespace tzrec
