// A tzrec server run inside a test on a free port. Includes httplib.h: a file that includes
// this header must be compiled with cpp-httplib's flags (CMakeLists.txt lists them), or its
// httplib classes have another layout than the server's. Not thread-safe.
#pragma once

#include <httplib.h>

#include <memory>
#include <thread>

#include "tzrec/serving/server.h"

namespace tzrec::testing {

// A server on a free port, run on its own thread.
struct RunningServer {
  std::unique_ptr<Server> server;
  std::thread thread;
  explicit RunningServer(ServeOptions options) {
    options.port = 0;
    server = std::make_unique<Server>(options);
    thread = std::thread([this] { server->Run(); });
  }
  ~RunningServer() {
    server->Stop();
    thread.join();
  }
  httplib::Client Client() const {
    httplib::Client client("127.0.0.1", server->port());
    client.set_keep_alive(true);
    client.set_tcp_nodelay(true);  // headers and body go out in two writes
    client.set_read_timeout(30, 0);
    return client;
  }
};

}  // namespace tzrec::testing
