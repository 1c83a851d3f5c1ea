// basalt env / basalt run: the environment a client (OpenAI or Anthropic SDK, a coding agent)
// needs to talk to a running `basalt serve`, with the model name asked from the server.
#include <httplib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "cli/commands.h"
#include "core/error.h"

namespace basalt::cli {
namespace {

struct EnvArgs {
  std::string url = "http://127.0.0.1:8000";
  std::string api_key;
  std::vector<std::string> cmd;
};

std::vector<std::pair<std::string, std::string>> client_env(EnvArgs a) {
  while (!a.url.empty() && a.url.back() == '/') a.url.pop_back();
  if (a.url.size() > 3 && a.url.compare(a.url.size() - 3, 3, "/v1") == 0)
    a.url.resize(a.url.size() - 3);
  if (a.api_key.empty())
    if (const char* k = std::getenv("BASALT_API_KEY")) a.api_key = k;
  httplib::Client cli(a.url);
  if (!cli.is_valid()) fail("[env] '{}' is not a valid http URL", a.url);
  cli.set_connection_timeout(3, 0);
  cli.set_read_timeout(10, 0);
  httplib::Headers h;
  if (!a.api_key.empty()) h.emplace("Authorization", "Bearer " + a.api_key);
  auto res = cli.Get("/v1/models", h);
  if (!res)
    fail("[env] no basalt server answers at {} ({}); start one with `basalt serve`", a.url,
         httplib::to_string(res.error()));
  if (res->status == 401)
    fail("[env] {} wants an API key: pass --api-key or set BASALT_API_KEY", a.url);
  if (res->status != 200) fail("[env] {}/v1/models answered HTTP {}", a.url, res->status);
  std::string model;
  try {
    model = nlohmann::json::parse(res->body).at("data").at(0).at("id").get<std::string>();
  } catch (const std::exception& e) {
    fail("[env] {}/v1/models: unexpected answer: {}", a.url, e.what());
  }
  // SDKs refuse an empty key even when the server needs none.
  const std::string key = a.api_key.empty() ? "basalt" : a.api_key;
  return {{"OPENAI_BASE_URL", a.url + "/v1"},
          {"OPENAI_API_KEY", key},
          {"OPENAI_MODEL", model},
          {"ANTHROPIC_BASE_URL", a.url},
          {"ANTHROPIC_API_KEY", key},
          {"ANTHROPIC_AUTH_TOKEN", key},
          {"ANTHROPIC_MODEL", model},
          {"ANTHROPIC_SMALL_FAST_MODEL", model}};
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int run_env(const EnvArgs& a) {
  for (const auto& [k, v] : client_env(a))
    std::printf("export %s=%s\n", k.c_str(), shell_quote(v).c_str());
  return 0;
}

int run_run(const EnvArgs& a) {
  if (a.cmd.empty()) fail("[run] no command: basalt run -- CMD ARGS");
  for (const auto& [k, v] : client_env(a)) setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& s : a.cmd) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  std::fflush(stdout);
  execvp(argv[0], argv.data());
  fail("[run] cannot run '{}': {}", a.cmd[0], std::strerror(errno));
}

void add_common(CLI::App* sc, EnvArgs& a) {
  sc->add_option("--url", a.url, "The server (default http://127.0.0.1:8000)");
  sc->add_option("--api-key", a.api_key, "Its API key (default $BASALT_API_KEY)");
}

}  // namespace

Runner add_env(CLI::App& app) {
  auto a = std::make_shared<EnvArgs>();
  CLI::App* sc = app.add_subcommand(
      "env", "Print the environment (export lines) for clients of a running basalt serve");
  add_common(sc, *a);
  return [a] { return run_env(*a); };
}

Runner add_run(CLI::App& app) {
  auto a = std::make_shared<EnvArgs>();
  CLI::App* sc = app.add_subcommand(
      "run", "Run a client command with the environment of `basalt env`: basalt run -- CMD ARGS");
  add_common(sc, *a);
  sc->add_option("cmd", a->cmd, "The command and its arguments (after --)")->required();
  return [a] { return run_run(*a); };
}

}  // namespace basalt::cli
