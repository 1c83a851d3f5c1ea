#include <fmt/format.h>

#include <chrono>
#include <random>
#include <utility>

#include "core/error.h"
#include "server/api.h"
#include "server/sse.h"

namespace basalt::server {

void check_model(const ServerContext& ctx, const json& body) {
  auto m = get_string(body, "model");
  if (m && *m != ctx.opt.served_name)
    throw ApiError(404,
                   fmt::format("The model '{}' does not exist; this server serves '{}'", *m,
                               ctx.opt.served_name),
                   "model", "model_not_found");
}

void check_prompt_fits(const ServerContext& ctx, size_t prompt_tokens) {
  const int64_t max_ctx = ctx.engine.max_context();
  if (int64_t(prompt_tokens) >= max_ctx)
    throw ApiError(400,
                   fmt::format("This model's maximum context length is {} tokens; the prompt has "
                               "{} tokens (at most {} leave room for one generated token)",
                               max_ctx, prompt_tokens, max_ctx - 1),
                   "messages", "context_length_exceeded");
}

std::vector<int32_t> encode_chat(const ServerContext& ctx, const json& messages, const json& tools,
                                 const json& extra, std::string* rendered) {
  std::string text;
  try {
    text = ctx.prompt.render(messages, tools, extra);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "messages");
  }
  std::vector<int32_t> ids;
  try {
    ids = ctx.tok.encode(text, /*add_special=*/false, /*parse_special=*/true);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "messages");
  }
  if (rendered) *rendered = std::move(text);
  return ids;
}

EngineRequest engine_request(const ServerContext& ctx, const GenParams& g,
                             std::vector<int32_t> prompt) {
  if (prompt.empty()) throw ApiError(400, "the prompt is empty", "prompt");
  check_prompt_fits(ctx, prompt.size());
  EngineRequest r;
  const int64_t room = ctx.engine.max_context() - int64_t(prompt.size());
  r.max_new_tokens = g.max_tokens > 0 ? std::min(g.max_tokens, room) : room;
  r.prompt = std::move(prompt);
  r.sampling = g.sampling;
  r.logprobs = g.logprobs;
  r.top_logprobs = g.logprobs ? std::max(g.top_logprobs, 0) : 0;
  r.ignore_eos = g.ignore_eos;
  if (!g.ignore_eos) r.stop_ids = ctx.end_of_turn_ids;
  if (g.forced_output) {
    if (!ctx.opt.test_hooks)
      throw ApiError(400,
                     "'basalt_forced_output' is a test hook: start the server with "
                     "--enable-test-hooks to use it",
                     "basalt_forced_output");
    r.forced_output = ctx.tok.encode(*g.forced_output, false, true);
    if (r.forced_output.empty())
      throw ApiError(400, "'basalt_forced_output' is empty", "basalt_forced_output");
  }
  return r;
}

ParserOptions parser_options(const ServerContext& ctx, const json& tools, bool tools_on,
                             const std::string& rendered_prompt) {
  ParserOptions o;
  o.reasoning = ctx.prompt.reasoning();
  o.starts_in_reasoning = o.reasoning && prompt_opens_reasoning(rendered_prompt);
  if (tools_on && tools.is_array() && !tools.empty()) {
    o.tools = ctx.prompt.tool_format();
    if (o.tools == ToolCallFormat::None) o.tools = ToolCallFormat::Hermes;
    for (const json& t : tools) {
      const json& f = t.contains("function") ? t["function"] : t;
      if (f.contains("parameters") && f["parameters"].is_object())
        add_tool_schema(o, f.value("name", ""), f["parameters"]);
    }
  }
  return o;
}

json openai_function_tools(const json& body) {
  const json* tools = get_array(body, "tools");
  json out = json::array();
  if (!tools) return out;
  for (const json& t : *tools) {
    if (!t.is_object()) throw ApiError(400, "'tools' must hold objects", "tools");
    const std::string type = t.value("type", "function");
    if (type != "function")
      throw ApiError(400, fmt::format("tool type '{}' is not supported (function only)", type),
                     "tools");
    const json* f = get_object(t, "function");
    if (!f || !get_string(*f, "name"))
      throw ApiError(400, "each tool needs 'function' with a string 'name'", "tools");
    out.push_back(t);
  }
  return out;
}

void gather(const std::vector<GenEvent>& evs, GenResult& r) {
  for (const GenEvent& e : evs) {
    switch (e.kind) {
      case ParserEvent::Content:
        r.content += e.text;
        break;
      case ParserEvent::Reasoning:
        r.reasoning += e.text;
        break;
      case ParserEvent::ToolCallBegin:
        r.calls.push_back({e.id, e.name, ""});
        break;
      case ParserEvent::ToolCallArgs:
        if (!r.calls.empty()) r.calls.back().arguments += e.text;
        break;
      default:
        break;
    }
    r.logprobs.insert(r.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
  }
}

json parse_arguments(const std::string& args) {
  json j = json::parse(args, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : json::object();
}

namespace {

struct StreamState {
  std::shared_ptr<Generation> gen;
  std::shared_ptr<StreamFormat> fmt;
  bool begun = false, ended = false;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

}  // namespace

void stream_sse(httplib::Response& res, std::shared_ptr<Generation> gen,
                std::shared_ptr<StreamFormat> fmt) {
  auto st = std::make_shared<StreamState>();
  st->gen = std::move(gen);
  st->fmt = std::move(fmt);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st](size_t, httplib::DataSink& sink) {
        auto write = [&](const std::string& s) {
          if (s.empty()) return true;  // an empty write would end httplib's chunk loop
          st->last_write = std::chrono::steady_clock::now();
          return sink.write(s.data(), s.size());
        };
        if (!st->begun) {
          st->begun = true;
          if (!write(st->fmt->begin())) {
            st->gen->cancel();
            return false;
          }
          return true;
        }
        std::vector<GenEvent> evs;
        const bool done = st->gen->poll(evs, std::chrono::milliseconds(200));
        std::string out = evs.empty() ? std::string() : st->fmt->on_events(evs);
        if (done) out += st->fmt->end(*st->gen);
        // Idle (queued behind other requests): a comment every few seconds finds a client
        // that went away, so its request leaves the queue.
        if (out.empty() &&
            std::chrono::steady_clock::now() - st->last_write > std::chrono::seconds(3))
          out = sse_comment("waiting");
        if (!write(out)) {
          st->gen->cancel();
          return false;
        }
        if (done) {
          note_request_tokens(st->gen->prompt_tokens(), st->gen->completion_tokens());
          st->ended = true;
          sink.done();
        }
        return true;
      },
      [st](bool) {
        if (!st->ended) st->gen->cancel();
      });
}

std::string random_id(const std::string& prefix, size_t n) {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string s = prefix;
  for (size_t i = 0; i < n; ++i) s += kChars[rng() % (sizeof(kChars) - 1)];
  return s;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace basalt::server
