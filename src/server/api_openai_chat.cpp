// POST /v1/chat/completions (OpenAI Chat Completions), streaming and not.
#include <fmt/format.h>

#include "server/api.h"
#include "server/sse.h"

namespace basalt::server {
namespace {

// OpenAI messages → the template's messages (see prompt.h).
json chat_messages(const json& body) {
  const json* msgs = get_array(body, "messages");
  if (!msgs) throw ApiError(400, "'messages' is required", "messages");
  if (msgs->empty()) throw ApiError(400, "'messages' must not be empty", "messages");
  json out = json::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) throw ApiError(400, where + " must be an object", where);
    auto role = get_string(m, "role");
    if (!role) throw ApiError(400, where + " needs a string 'role'", where + ".role");
    json t = {{"role", *role}};
    if (*role == "developer") t["role"] = "system";
    if (*role != "system" && *role != "developer" && *role != "user" && *role != "assistant" &&
        *role != "tool")
      throw ApiError(400, fmt::format("{}: unknown role '{}'", where, *role), where + ".role");
    auto c = m.find("content");
    t["content"] = content_text(c == m.end() ? json() : *c, where + ".content");
    if (*role == "assistant") {
      for (const char* k : {"reasoning_content", "reasoning"})
        if (auto r = get_string(m, k)) t["reasoning_content"] = *r;
      if (const json* calls = get_array(m, "tool_calls")) {
        json tc = json::array();
        for (const json& c2 : *calls) {
          const json* f = c2.is_object() ? get_object(c2, "function") : nullptr;
          if (!f || !get_string(*f, "name"))
            throw ApiError(400, where + ".tool_calls: each needs 'function' with a 'name'",
                           where + ".tool_calls");
          json args = json::object();
          if (auto a = f->find("arguments"); a != f->end())
            args = a->is_string() ? parse_arguments(a->get<std::string>()) : *a;
          tc.push_back({{"id", c2.value("id", "")},
                        {"type", "function"},
                        {"function", {{"name", (*f)["name"]}, {"arguments", args}}}});
        }
        t["tool_calls"] = tc;
      }
    }
    if (*role == "tool") {
      if (auto id = get_string(m, "tool_call_id")) t["tool_call_id"] = *id;
      if (auto n = get_string(m, "name")) t["name"] = *n;
    }
    out.push_back(std::move(t));
  }
  return out;
}

json logprobs_json(const std::vector<TokenLogprob>& lps) {
  auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
  };
  json content = json::array();
  for (const TokenLogprob& lp : lps) {
    json top = json::array();
    for (const auto& [t, l] : lp.top)
      top.push_back({{"token", t}, {"logprob", l}, {"bytes", bytes(t)}});
    content.push_back({{"token", lp.text},
                       {"logprob", lp.logprob},
                       {"bytes", bytes(lp.text)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

json usage_json(const Generation& g) {
  return {{"prompt_tokens", g.prompt_tokens()},
          {"completion_tokens", g.completion_tokens()},
          {"total_tokens", g.prompt_tokens() + g.completion_tokens()},
          {"prompt_tokens_details", {{"cached_tokens", g.cached_tokens()}}}};
}

// "cancelled" only reaches a client when the server is stopping.
std::string finish_reason(const Generation& g) {
  return g.finish_reason() == "cancelled" ? "stop" : g.finish_reason();
}

class ChatStream : public StreamFormat {
 public:
  ChatStream(std::string id, std::string model, bool logprobs, bool usage)
      : id_(std::move(id)), model_(std::move(model)), logprobs_(logprobs), usage_(usage) {}

  std::string begin() override { return sse_data(chunk({{"role", "assistant"}, {"content", ""}})); }

  std::string on_events(const std::vector<GenEvent>& evs) override {
    std::string s;
    for (const GenEvent& e : evs) {
      json delta;
      switch (e.kind) {
        case ParserEvent::Content:
          if (e.text.empty() && e.logprobs.empty()) continue;
          delta = {{"content", e.text}};
          break;
        case ParserEvent::Reasoning:
          delta = {{"reasoning_content", e.text}};
          break;
        case ParserEvent::ToolCallBegin:
          delta = {{"tool_calls",
                    {{{"index", e.index},
                      {"id", e.id},
                      {"type", "function"},
                      {"function", {{"name", e.name}, {"arguments", ""}}}}}}};
          break;
        case ParserEvent::ToolCallArgs:
          delta = {{"tool_calls", {{{"index", e.index}, {"function", {{"arguments", e.text}}}}}}};
          break;
        default:
          continue;
      }
      json c = chunk(delta);
      if (logprobs_ && !e.logprobs.empty()) c["choices"][0]["logprobs"] = logprobs_json(e.logprobs);
      s += sse_data(c);
    }
    return s;
  }

  std::string end(const Generation& g) override {
    std::string s;
    if (g.finish_reason() == "error") {
      s += sse_data(error_body(ApiFlavor::OpenAI, 500, g.error()));
    } else {
      json c = chunk(json::object());
      c["choices"][0]["finish_reason"] = finish_reason(g);
      s += sse_data(c);
    }
    if (usage_) {
      json u = chunk(json::object());
      u["choices"] = json::array();
      u["usage"] = usage_json(g);
      s += sse_data(u);
    }
    return s + sse_done();
  }

 private:
  json chunk(json delta) const {
    return {{"id", id_},
            {"object", "chat.completion.chunk"},
            {"created", created_},
            {"model", model_},
            {"system_fingerprint", "basalt"},
            {"choices",
             {{{"index", 0},
               {"delta", std::move(delta)},
               {"logprobs", nullptr},
               {"finish_reason", nullptr}}}}};
  }
  std::string id_, model_;
  bool logprobs_, usage_;
  int64_t created_ = unix_now();
};

}  // namespace

void api_openai_chat(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const json body = parse_body(req.body);
  check_model(ctx, body);
  GenParams g = parse_gen_params(
      body, Api::Chat, {ctx.engine.max_context(), ctx.model.checkpoint().generation_config});
  const json messages = chat_messages(body);
  json tools = openai_function_tools(body);
  bool tools_on = !tools.empty();
  if (auto it = body.find("tool_choice"); it != body.end() && it->is_string() && *it == "none")
    tools_on = false;
  json extra = json::object();
  if (const json* k = get_object(body, "chat_template_kwargs")) extra = *k;
  std::string rendered;
  std::vector<int32_t> prompt =
      encode_chat(ctx, messages, tools_on ? tools : json::array(), extra, &rendered);

  GenSpec spec;
  spec.req = engine_request(ctx, g, std::move(prompt));
  spec.stop = g.stop;
  spec.parser = parser_options(ctx, tools, tools_on, rendered);
  spec.logprobs = g.logprobs;
  auto gen = std::make_shared<Generation>(ctx, std::move(spec));
  const std::string id = random_id("chatcmpl-");

  if (g.stream) {
    stream_sse(res, gen,
               std::make_shared<ChatStream>(id, ctx.opt.served_name, g.logprobs, g.include_usage));
    return;
  }
  std::vector<GenEvent> evs;
  gen->run_to_end(evs);
  if (gen->finish_reason() == "error") throw ApiError(500, gen->error());
  GenResult r;
  gather(evs, r);
  json msg = {{"role", "assistant"},
              {"content", r.content.empty() && !r.calls.empty() ? json() : json(r.content)},
              {"refusal", nullptr}};
  if (!r.reasoning.empty()) msg["reasoning_content"] = r.reasoning;
  if (!r.calls.empty()) {
    json tc = json::array();
    for (const auto& c : r.calls)
      tc.push_back({{"id", c.id},
                    {"type", "function"},
                    {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    msg["tool_calls"] = tc;
  }
  json out = {{"id", id},
              {"object", "chat.completion"},
              {"created", unix_now()},
              {"model", ctx.opt.served_name},
              {"system_fingerprint", "basalt"},
              {"choices",
               {{{"index", 0},
                 {"message", msg},
                 {"logprobs", g.logprobs ? logprobs_json(r.logprobs) : json()},
                 {"finish_reason", finish_reason(*gen)}}}},
              {"usage", usage_json(*gen)}};
  note_request_tokens(gen->prompt_tokens(), gen->completion_tokens());
  res.set_content(json_line(out), "application/json");
}

}  // namespace basalt::server
