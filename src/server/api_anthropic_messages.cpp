// POST /v1/messages and /v1/messages/count_tokens (Anthropic Messages API): content blocks
// text / thinking / tool_use / tool_result, streaming as message_start … message_stop.
#include <fmt/format.h>

#include "server/api.h"
#include "server/sse.h"

namespace basalt::server {
namespace {

std::string block_text(const json& content, const std::string& where) {
  if (content.is_string() || content.is_null()) return content_text(content, where);
  if (!content.is_array())
    throw ApiError(400, where + " must be a string or an array of blocks", where);
  std::string s;
  for (const json& b : content) {
    if (!b.is_object()) throw ApiError(400, where + " blocks must be objects", where);
    const std::string type = b.value("type", "");
    if (type == "text") {
      auto t = get_string(b, "text");
      if (!t) throw ApiError(400, where + ": a text block needs a string 'text'", where);
      s += *t;
    } else {
      throw ApiError(400, fmt::format("{}: block type '{}' is not supported here", where, type),
                     where);
    }
  }
  return s;
}

// Anthropic system + messages → the template's messages.
json anthropic_messages(const json& body) {
  json out = json::array();
  if (auto it = body.find("system"); it != body.end() && !it->is_null()) {
    std::string sys = block_text(*it, "system");
    if (!sys.empty()) out.push_back({{"role", "system"}, {"content", sys}});
  }
  const json* msgs = get_array(body, "messages");
  if (!msgs) throw ApiError(400, "messages: Field required", "messages");
  if (msgs->empty()) throw ApiError(400, "messages: at least one message is required", "messages");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string where = fmt::format("messages.{}", i);
    if (!m.is_object()) throw ApiError(400, where + ": must be an object", where);
    auto role = get_string(m, "role");
    if (!role || (*role != "user" && *role != "assistant"))
      throw ApiError(400, where + ".role: must be 'user' or 'assistant'", where);
    auto c = m.find("content");
    if (c == m.end() || c->is_null())
      throw ApiError(400, where + ".content: Field required", where);
    if (c->is_string()) {
      out.push_back({{"role", *role}, {"content", c->get<std::string>()}});
      continue;
    }
    if (!c->is_array())
      throw ApiError(400, where + ".content: must be a string or an array", where);
    json msg = {{"role", *role}, {"content", ""}};
    std::string text, reasoning;
    json calls = json::array();
    for (size_t k = 0; k < c->size(); ++k) {
      const json& b = (*c)[k];
      const std::string bw = fmt::format("{}.content.{}", where, k);
      if (!b.is_object()) throw ApiError(400, bw + ": must be an object", bw);
      const std::string type = b.value("type", "");
      if (type == "text") {
        auto t = get_string(b, "text");
        if (!t) throw ApiError(400, bw + ".text: Field required", bw);
        text += *t;
      } else if (type == "thinking" && *role == "assistant") {
        reasoning += get_string(b, "thinking").value_or("");
      } else if (type == "redacted_thinking") {
        continue;
      } else if (type == "tool_use" && *role == "assistant") {
        auto name = get_string(b, "name");
        if (!name) throw ApiError(400, bw + ".name: Field required", bw);
        const json* input = get_object(b, "input");
        calls.push_back(
            {{"id", b.value("id", "")},
             {"type", "function"},
             {"function", {{"name", *name}, {"arguments", input ? *input : json::object()}}}});
      } else if (type == "tool_result" && *role == "user") {
        auto rc = b.find("content");
        std::string result = block_text(rc == b.end() ? json() : *rc, bw + ".content");
        if (b.value("is_error", false)) result = "Error: " + result;
        out.push_back(
            {{"role", "tool"}, {"tool_call_id", b.value("tool_use_id", "")}, {"content", result}});
      } else {
        throw ApiError(
            400,
            fmt::format("{}: block type '{}' is not supported in a {} message", bw, type, *role),
            bw);
      }
    }
    if (*role == "user" && text.empty() && !out.empty() && out.back()["role"] == "tool") continue;
    msg["content"] = text;
    if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
    if (!calls.empty()) msg["tool_calls"] = calls;
    out.push_back(std::move(msg));
  }
  return out;
}

json anthropic_tools(const json& body) {
  json out = json::array();
  const json* tools = get_array(body, "tools");
  if (!tools) return out;
  for (const json& t : *tools) {
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
      throw ApiError(400, "tools: each tool needs a string 'name'", "tools");
    if (t.contains("type") && t["type"] != "custom" && !t.contains("input_schema"))
      continue;  // server tools (web search…) the model cannot run here
    json f = {{"name", t["name"]}};
    if (t.contains("description")) f["description"] = t["description"];
    f["parameters"] = t.value("input_schema", json::object());
    out.push_back({{"type", "function"}, {"function", f}});
  }
  return out;
}

struct Prepared {
  json messages, tools, extra;
  bool tools_on = false;
};

Prepared prepare(const json& body) {
  Prepared p;
  p.messages = anthropic_messages(body);
  p.tools = anthropic_tools(body);
  p.tools_on = !p.tools.empty();
  if (const json* tc = get_object(body, "tool_choice"); tc && tc->value("type", "") == "none")
    p.tools_on = false;
  p.extra = json::object();
  if (const json* th = get_object(body, "thinking"))
    p.extra["enable_thinking"] = th->value("type", "") == "enabled";
  return p;
}

std::string stop_reason(const Generation& g) {
  if (g.finish_reason() == "tool_calls") return "tool_use";
  if (g.finish_reason() == "length") return "max_tokens";
  if (g.stop_string()) return "stop_sequence";
  return "end_turn";
}

class MessageStream : public StreamFormat {
 public:
  MessageStream(std::string id, std::string model, int64_t input_tokens)
      : id_(std::move(id)), model_(std::move(model)), input_tokens_(input_tokens) {}

  std::string begin() override {
    json msg = {{"id", id_},
                {"type", "message"},
                {"role", "assistant"},
                {"model", model_},
                {"content", json::array()},
                {"stop_reason", nullptr},
                {"stop_sequence", nullptr},
                {"usage", {{"input_tokens", input_tokens_}, {"output_tokens", 0}}}};
    return sse_event("message_start", {{"type", "message_start"}, {"message", msg}}) +
           sse_event("ping", {{"type", "ping"}});
  }

  std::string on_events(const std::vector<GenEvent>& evs) override {
    std::string s;
    for (const GenEvent& e : evs) {
      switch (e.kind) {
        case ParserEvent::Reasoning:
          if (e.text.empty()) break;
          if (open_ != "thinking")
            s += start({{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
          s += delta({{"type", "thinking_delta"}, {"thinking", e.text}});
          break;
        case ParserEvent::Content:
          if (e.text.empty()) break;
          if (open_ != "text") s += start({{"type", "text"}, {"text", ""}});
          s += delta({{"type", "text_delta"}, {"text", e.text}});
          break;
        case ParserEvent::ToolCallBegin:
          s += start(
              {{"type", "tool_use"}, {"id", e.id}, {"name", e.name}, {"input", json::object()}});
          break;
        case ParserEvent::ToolCallArgs:
          if (!e.text.empty()) s += delta({{"type", "input_json_delta"}, {"partial_json", e.text}});
          break;
        case ParserEvent::ToolCallEnd:
          s += stop();
          break;
        default:
          break;
      }
    }
    return s;
  }

  std::string end(const Generation& g) override {
    std::string s = stop();
    if (g.finish_reason() == "error")
      return s + sse_event("error", error_body(ApiFlavor::Anthropic, 500, g.error()));
    s += sse_event(
        "message_delta",
        {{"type", "message_delta"},
         {"delta",
          {{"stop_reason", stop_reason(g)},
           {"stop_sequence", g.stop_string() ? json(*g.stop_string()) : json()}}},
         {"usage",
          {{"input_tokens", g.prompt_tokens()}, {"output_tokens", g.completion_tokens()}}}});
    return s + sse_event("message_stop", {{"type", "message_stop"}});
  }

 private:
  std::string start(json block) {
    std::string s = stop();
    open_ = block["type"];
    return s + sse_event(
                   "content_block_start",
                   {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
  }
  std::string delta(json d) {
    return sse_event("content_block_delta",
                     {{"type", "content_block_delta"}, {"index", index_}, {"delta", d}});
  }
  std::string stop() {
    if (open_.empty()) return "";
    std::string s;
    if (open_ == "thinking")  // clients that replay thinking expect a signature field
      s += delta({{"type", "signature_delta"}, {"signature", ""}});
    s += sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
    open_.clear();
    ++index_;
    return s;
  }
  std::string id_, model_;
  int64_t input_tokens_;
  std::string open_;
  int index_ = 0;
};

}  // namespace

void api_anthropic_messages(ServerContext& ctx, const httplib::Request& req,
                            httplib::Response& res) {
  const json body = parse_body(req.body);
  check_model(ctx, body);
  GenParams g = parse_gen_params(
      body, Api::Messages, {ctx.engine.max_context(), ctx.model.checkpoint().generation_config});
  const Prepared p = prepare(body);
  std::string rendered;
  std::vector<int32_t> prompt =
      encode_chat(ctx, p.messages, p.tools_on ? p.tools : json::array(), p.extra, &rendered);
  const int64_t input_tokens = int64_t(prompt.size());

  GenSpec spec;
  spec.req = engine_request(ctx, g, std::move(prompt));
  spec.stop = g.stop;
  spec.parser = parser_options(ctx, p.tools, p.tools_on, rendered);
  auto gen = std::make_shared<Generation>(ctx, std::move(spec));
  const std::string id = random_id("msg_");

  if (g.stream) {
    stream_sse(res, gen, std::make_shared<MessageStream>(id, ctx.opt.served_name, input_tokens));
    return;
  }
  std::vector<GenEvent> evs;
  gen->run_to_end(evs);
  if (gen->finish_reason() == "error") throw ApiError(500, gen->error());
  GenResult r;
  gather(evs, r);
  json content = json::array();
  if (!r.reasoning.empty())
    content.push_back({{"type", "thinking"}, {"thinking", r.reasoning}, {"signature", ""}});
  if (!r.content.empty()) content.push_back({{"type", "text"}, {"text", r.content}});
  for (const auto& c : r.calls)
    content.push_back({{"type", "tool_use"},
                       {"id", c.id},
                       {"name", c.name},
                       {"input", parse_arguments(c.arguments)}});
  json out = {{"id", id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", ctx.opt.served_name},
              {"content", content},
              {"stop_reason", stop_reason(*gen)},
              {"stop_sequence", gen->stop_string() ? json(*gen->stop_string()) : json()},
              {"usage",
               {{"input_tokens", gen->prompt_tokens()},
                {"output_tokens", gen->completion_tokens()},
                {"cache_read_input_tokens", gen->cached_tokens()},
                {"cache_creation_input_tokens", 0}}}};
  note_request_tokens(gen->prompt_tokens(), gen->completion_tokens());
  res.set_content(json_line(out), "application/json");
}

void api_anthropic_count_tokens(ServerContext& ctx, const httplib::Request& req,
                                httplib::Response& res) {
  const json body = parse_body(req.body);
  check_model(ctx, body);
  const Prepared p = prepare(body);
  std::vector<int32_t> prompt =
      encode_chat(ctx, p.messages, p.tools_on ? p.tools : json::array(), p.extra, nullptr);
  note_request_tokens(int64_t(prompt.size()), 0);
  res.set_content(json_line({{"input_tokens", prompt.size()}}), "application/json");
}

}  // namespace basalt::server
