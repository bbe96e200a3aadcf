// Load generator for bench/serve_throughput.sh: POSTs one request body to a tzrec serve
// endpoint from keep-alive connections and prints latency percentiles and throughput.
//   serve_load <port> <path> <body file> <connections> <seconds> [<requests/s>]
// Without a rate it is a closed loop (each connection sends as soon as it has its answer:
// saturation). With a rate, requests are sent on a fixed schedule spread over the connections
// (an open loop). Latency counts from the scheduled time when the connection was still busy
// with its previous request then (so queueing is not hidden), and from the moment of sending
// otherwise: this generator's own timer lateness (on small VMs sleep_until overshoots by up to
// ~2.5 ms at p99) is not the server's.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: serve_load <port> <path> <body file> <connections> <seconds> [rate]\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const std::string path = argv[2];
  std::ifstream in(argv[3]);
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string body = buffer.str();
  const int connections = std::max(1, std::atoi(argv[4]));
  const double seconds = std::atof(argv[5]);
  const double rate = argc > 6 ? std::atof(argv[6]) : 0.0;
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now() + std::chrono::milliseconds(100);
  const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::mutex mutex;
  std::vector<double> latencies;
  std::atomic<int64_t> failures{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < connections; ++c) {
    threads.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", port);
      client.set_keep_alive(true);
      client.set_tcp_nodelay(true);
      client.set_read_timeout(30, 0);
      std::vector<double> mine;
      Clock::time_point free_since = start;  // when the previous answer arrived
      for (int64_t i = 0;; ++i) {
        Clock::time_point scheduled;
        if (rate > 0) {
          // Request k of the whole run goes at start + k / rate; connection c takes every
          // connections-th one.
          const double at = static_cast<double>(i * connections + c) / rate;
          scheduled = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(at));
          if (scheduled >= end) break;
          std::this_thread::sleep_until(scheduled);
        } else {
          scheduled = std::max(Clock::now(), start);
          std::this_thread::sleep_until(scheduled);
          if (scheduled >= end) break;
        }
        const Clock::time_point since = rate > 0 && free_since <= scheduled ? Clock::now() : scheduled;
        auto res = client.Post(path.c_str(), body, "application/json");
        free_since = Clock::now();
        if (!res || res->status != 200) {
          if (failures++ < 5) {
            std::fprintf(stderr, "failure: %s\n",
                         res ? (std::to_string(res->status) + " " + res->body).c_str()
                             : httplib::to_string(res.error()).c_str());
          }
          continue;
        }
        mine.push_back(std::chrono::duration<double, std::milli>(free_since - since).count());
      }
      std::lock_guard<std::mutex> lock(mutex);
      latencies.insert(latencies.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(std::max(Clock::now(), end) - start).count();
  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double p) {
    return latencies.empty() ? 0.0 : latencies[std::min(latencies.size() - 1, static_cast<size_t>(p * latencies.size()))];
  };
  std::printf("requests=%zu failures=%lld requests_per_sec=%.1f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f\n",
              latencies.size(), static_cast<long long>(failures.load()), latencies.size() / elapsed,
              pct(0.5), pct(0.99), latencies.empty() ? 0.0 : latencies.back());
  return 0;
}
