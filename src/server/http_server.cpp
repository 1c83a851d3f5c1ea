#include "server/http_server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "server/api.h"
#include "server/sse.h"

namespace basalt::server {
namespace {

// Per-request bookkeeping for the log line. A request's handler, its content provider and the
// logger all run on the same httplib worker thread, one request after another.
struct RequestLog {
  const httplib::Request* req = nullptr;
  std::chrono::steady_clock::time_point start;
  std::string endpoint;
  int64_t prompt = 0, completion = 0;
};
thread_local RequestLog tl_log;

ApiFlavor flavor_of(const std::string& path) {
  return path.rfind("/v1/messages", 0) == 0 ? ApiFlavor::Anthropic : ApiFlavor::OpenAI;
}

void set_error(httplib::Response& res, ApiFlavor f, int status, const std::string& msg,
               const std::string& param = "", const std::string& code = "") {
  res.status = status;
  res.set_content(json_line(error_body(f, status, msg, param, code)), "application/json");
}

bool key_matches(const httplib::Request& req, const std::string& key) {
  const std::string auth = req.get_header_value("Authorization");
  if (auth.size() > 7 && (auth.rfind("Bearer ", 0) == 0 || auth.rfind("bearer ", 0) == 0) &&
      auth.substr(7) == key)
    return true;
  return req.get_header_value("x-api-key") == key;
}

}  // namespace

void note_request_tokens(int64_t prompt, int64_t completion) {
  tl_log.prompt = prompt;
  tl_log.completion = completion;
}

HttpServer::HttpServer(ServerContext& ctx) : ctx_(ctx), svr_(std::make_unique<httplib::Server>()) {
  // One worker per connection: a streaming request holds its worker for its whole length,
  // and idle keep-alive connections hold theirs, so the pool is far larger than the core count.
  const size_t workers = ctx_.opt.http_threads > 0 ? size_t(ctx_.opt.http_threads) : 256;
  svr_->new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  svr_->set_payload_max_length(kMaxBodyBytes);
  svr_->set_keep_alive_max_count(1000);
  svr_->set_read_timeout(30, 0);
  svr_->set_write_timeout(30, 0);
  svr_->set_tcp_nodelay(true);
  // The listening socket, to raise its backlog once bound (bind()). SO_REUSEADDR only:
  // cpp-httplib's default options set SO_REUSEPORT where the system has it, which lets a second
  // server bind the same port and the kernel then splits the connections between the two (a
  // stale `basalt serve` answered half a load test's requests); with SO_REUSEADDR a port held
  // by a listening process is refused, while one left in TIME_WAIT by a stopped server is not.
  svr_->set_socket_options([this](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (!bound_) listen_fd_ = int(sock);
  });
  routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  int port = ctx_.opt.port;
  if (port == 0) {
    port = svr_->bind_to_any_port(ctx_.opt.host);
    if (port <= 0) fail("[serve] cannot bind to {} (any port)", ctx_.opt.host);
  } else if (!svr_->bind_to_port(ctx_.opt.host, port)) {
    fail("[serve] cannot bind to {}:{} (in use, or not an address of this machine)", ctx_.opt.host,
         port);
  }
  bound_ = true;
  // cpp-httplib (Debian's build) listens with a backlog of 5: a burst of clients connecting
  // at once (64 agents, a load test) overflows it and the kernel drops or resets the
  // connections beyond it while the accept loop catches up. listen() on a listening socket
  // sets a new backlog (capped by net.core.somaxconn).
  if (listen_fd_ >= 0 && ::listen(listen_fd_, kListenBacklog) != 0)
    fail("[serve] listen backlog {} on {}:{}: {}", kListenBacklog, ctx_.opt.host, port,
         std::strerror(errno));
  return port;
}

void HttpServer::run() {
  svr_->listen_after_bind();
}

void HttpServer::stop() {
  svr_->stop();
}

void HttpServer::routes() {
  using Fn = void (*)(ServerContext&, const httplib::Request&, httplib::Response&);
  auto wrap = [this](const char* endpoint, bool auth, auto fn) {
    return [this, endpoint, auth, fn](const httplib::Request& req, httplib::Response& res) {
      tl_log.endpoint = endpoint;
      const ApiFlavor f = flavor_of(req.path);
      try {
        if (auth && !ctx_.opt.api_key.empty() && !key_matches(req, ctx_.opt.api_key)) {
          set_error(res, f, 401,
                    "invalid or missing API key (send 'Authorization: Bearer KEY' or "
                    "'x-api-key: KEY')",
                    "", "invalid_api_key");
          return;
        }
        fn(ctx_, req, res);
      } catch (const ApiError& e) {
        set_error(res, f, e.status, e.what(), e.param, e.code);
      } catch (const Error& e) {
        set_error(res, f, 400, e.what());
      } catch (const std::exception& e) {
        set_error(res, f, 500, std::string("[serve] internal error: ") + e.what());
      }
    };
  };

  svr_->set_pre_routing_handler([](const httplib::Request& req, httplib::Response&) {
    tl_log = RequestLog{&req, std::chrono::steady_clock::now(), "other", 0, 0};
    return httplib::Server::HandlerResponse::Unhandled;
  });

  svr_->Get("/health", wrap("/health", false,
                            [](ServerContext&, const httplib::Request&, httplib::Response& res) {
                              res.set_content("{\"status\":\"ok\"}", "application/json");
                            }));
  svr_->Get("/metrics", wrap("/metrics", false,
                             [](ServerContext& c, const httplib::Request&, httplib::Response& res) {
                               res.set_content(c.metrics.render(c.engine.stats()),
                                               "text/plain; version=0.0.4; charset=utf-8");
                             }));
  auto model_json = [](const ServerContext& c) {
    return json{{"id", c.opt.served_name},
                {"object", "model"},
                {"created", c.created},
                {"owned_by", "basalt"},
                {"max_model_len", c.engine.max_context()},
                // Anthropic's model object
                {"type", "model"},
                {"display_name", c.opt.served_name}};
  };
  svr_->Get("/v1/models",
            wrap("/v1/models", true,
                 [model_json](ServerContext& c, const httplib::Request&, httplib::Response& res) {
                   json j = {{"object", "list"},
                             {"data", {model_json(c)}},
                             {"has_more", false},
                             {"first_id", c.opt.served_name},
                             {"last_id", c.opt.served_name}};
                   res.set_content(json_line(j), "application/json");
                 }));
  svr_->Get(
      R"(/v1/models/(.+))",
      wrap("/v1/models/{id}", true,
           [model_json](ServerContext& c, const httplib::Request& req, httplib::Response& res) {
             if (req.matches[1] != c.opt.served_name)
               throw ApiError(404,
                              "The model '" + std::string(req.matches[1]) +
                                  "' does not exist; this server serves '" + c.opt.served_name +
                                  "'",
                              "model", "model_not_found");
             res.set_content(json_line(model_json(c)), "application/json");
           }));
  svr_->Post("/v1/chat/completions", wrap("/v1/chat/completions", true, Fn(api_openai_chat)));
  svr_->Post("/v1/completions", wrap("/v1/completions", true, Fn(api_openai_completions)));
  svr_->Post("/v1/responses", wrap("/v1/responses", true, Fn(api_openai_responses)));
  svr_->Post("/v1/messages", wrap("/v1/messages", true, Fn(api_anthropic_messages)));
  svr_->Post("/v1/messages/count_tokens",
             wrap("/v1/messages/count_tokens", true, Fn(api_anthropic_count_tokens)));

  // httplib's own errors (no route, body over the limit, unreadable request) get a JSON body.
  svr_->set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        const ApiFlavor f = flavor_of(req.path);
        if (res.status == 413)
          set_error(res, f, 413, "the request body is larger than the limit of 8 MiB", "",
                    "request_too_large");
        else if (res.status == 404)
          set_error(res, f, 404, "no endpoint " + req.method + " " + req.path, "", "not_found");
        else if (res.status == 405)
          set_error(res, f, 405, "method " + req.method + " not allowed on " + req.path);
        else
          set_error(res, f, res.status,
                    "request failed with HTTP status " + std::to_string(res.status));
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr_->set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        set_error(res, flavor_of(req.path), 500, "[serve] internal error: " + what);
      });

  svr_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const bool ours = tl_log.req == &req;
    const std::string endpoint = ours ? tl_log.endpoint : "other";
    const double ms = ours ? std::chrono::duration<double, std::milli>(
                                 std::chrono::steady_clock::now() - tl_log.start)
                                 .count()
                           : 0.0;
    ctx_.metrics.count_request(endpoint, res.status);
    std::fprintf(stderr, "%s %s %d prompt=%lld completion=%lld %.0fms\n", req.method.c_str(),
                 req.path.c_str(), res.status, (long long)(ours ? tl_log.prompt : 0),
                 (long long)(ours ? tl_log.completion : 0), ms);
    tl_log.req = nullptr;
  });
}

}  // namespace basalt::server
