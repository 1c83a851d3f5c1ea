// HttpServer: cpp-httplib routes for every endpoint, authentication, API-style errors (also
// for httplib's own 404/413), one log line per request and the request metrics.
#pragma once
#include <memory>
#include <string>

#include "server/server_context.h"

namespace httplib {
class Server;
}

namespace basalt::server {

constexpr size_t kMaxBodyBytes = 8u << 20;  // larger bodies get 413
constexpr int kListenBacklog = 1024;        // pending connections the kernel queues

class HttpServer {
 public:
  explicit HttpServer(ServerContext& ctx);
  ~HttpServer();
  // Binds ctx.opt.host:port (port 0: a free one) and returns the port; throws basalt::Error.
  int bind();
  void run();   // serves until stop(); in-flight streams end when ctx.stopping is set
  void stop();  // thread-safe

 private:
  void routes();
  ServerContext& ctx_;
  std::unique_ptr<httplib::Server> svr_;
  int listen_fd_ = -1;  // the listening socket (set while binding)
  bool bound_ = false;
};

}  // namespace basalt::server
