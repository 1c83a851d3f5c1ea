// POST /v1/responses (OpenAI Responses API), stateless: no previous_response_id, nothing
// stored. Output items: reasoning, message (output_text), function_call.
#include <fmt/format.h>

#include "server/api.h"
#include "server/sse.h"

namespace basalt::server {
namespace {

// Responses input items → the template's messages.
json response_messages(const json& body) {
  json out = json::array();
  if (auto ins = get_string(body, "instructions"); ins && !ins->empty())
    out.push_back({{"role", "system"}, {"content", *ins}});
  auto it = body.find("input");
  if (it == body.end() || it->is_null()) throw ApiError(400, "'input' is required", "input");
  if (it->is_string()) {
    out.push_back({{"role", "user"}, {"content", it->get<std::string>()}});
    return out;
  }
  if (!it->is_array())
    throw ApiError(400, "'input' must be a string or an array of items", "input");
  if (it->empty()) throw ApiError(400, "'input' must not be empty", "input");
  std::string pending_reasoning;
  auto assistant = [&]() -> json& {  // the assistant message calls and reasoning attach to
    if (out.empty() || out.back()["role"] != "assistant") {
      out.push_back({{"role", "assistant"}, {"content", ""}});
      if (!pending_reasoning.empty())
        out.back()["reasoning_content"] = std::exchange(pending_reasoning, {});
    }
    return out.back();
  };
  for (size_t i = 0; i < it->size(); ++i) {
    const json& item = (*it)[i];
    const std::string where = fmt::format("input[{}]", i);
    if (!item.is_object()) throw ApiError(400, where + " must be an object", where);
    const std::string type = item.value("type", "message");
    if (type == "message") {
      auto role = get_string(item, "role");
      if (!role ||
          (*role != "user" && *role != "assistant" && *role != "system" && *role != "developer"))
        throw ApiError(400, where + " needs 'role' user, assistant, system or developer",
                       where + ".role");
      auto c = item.find("content");
      const std::string text = content_text(c == item.end() ? json() : *c, where + ".content");
      if (*role == "assistant") {
        json& a = assistant();
        a["content"] = a["content"].get<std::string>() + text;
      } else {
        out.push_back({{"role", *role == "developer" ? "system" : *role}, {"content", text}});
      }
    } else if (type == "function_call") {
      auto name = get_string(item, "name");
      if (!name) throw ApiError(400, where + " needs a string 'name'", where + ".name");
      json& a = assistant();
      if (!a.contains("tool_calls")) a["tool_calls"] = json::array();
      a["tool_calls"].push_back(
          {{"id", item.value("call_id", "")},
           {"type", "function"},
           {"function",
            {{"name", *name},
             {"arguments", parse_arguments(get_string(item, "arguments").value_or("{}"))}}}});
    } else if (type == "function_call_output") {
      auto o = item.find("output");
      out.push_back({{"role", "tool"},
                     {"tool_call_id", item.value("call_id", "")},
                     {"content", content_text(o == item.end() ? json() : *o, where + ".output")}});
    } else if (type == "reasoning") {
      std::string text;
      for (const char* k : {"content", "summary"})
        if (const json* parts = get_array(item, k))
          for (const json& p : *parts)
            if (p.is_object() && p.contains("text") && p["text"].is_string())
              text += p["text"].get<std::string>();
      pending_reasoning += text;
    } else {
      throw ApiError(400, fmt::format("{}: item type '{}' is not supported", where, type),
                     where + ".type");
    }
  }
  return out;
}

// Responses tools ({"type": "function", "name", "parameters"}) → OpenAI chat tools.
json response_tools(const json& body) {
  json out = json::array();
  const json* tools = get_array(body, "tools");
  if (!tools) return out;
  for (const json& t : *tools) {
    if (!t.is_object() || t.value("type", "") != "function" || !t.contains("name"))
      throw ApiError(400,
                     "only function tools ({\"type\": \"function\", \"name\": ...}) are supported",
                     "tools");
    json f = {{"name", t["name"]}};
    if (t.contains("description")) f["description"] = t["description"];
    if (t.contains("parameters")) f["parameters"] = t["parameters"];
    out.push_back({{"type", "function"}, {"function", f}});
  }
  return out;
}

// Builds the output items as events arrive (both for streaming and the final object).
class ResponseBuilder : public StreamFormat {
 public:
  ResponseBuilder(json base, bool streaming) : base_(std::move(base)), streaming_(streaming) {}

  std::string begin() override {
    json r = response("in_progress");
    std::string s = ev("response.created", {{"response", r}});
    return s + ev("response.in_progress", {{"response", r}});
  }

  std::string on_events(const std::vector<GenEvent>& evs) override {
    std::string s;
    for (const GenEvent& e : evs) {
      switch (e.kind) {
        case ParserEvent::Reasoning:
          if (e.text.empty()) break;
          if (open_ != Open::Reasoning) s += open_item(Open::Reasoning, {});
          text_ += e.text;
          s += ev("response.reasoning_text.delta", {{"item_id", item_id_},
                                                    {"output_index", index_},
                                                    {"content_index", 0},
                                                    {"delta", e.text}});
          break;
        case ParserEvent::Content:
          if (e.text.empty()) break;
          if (open_ != Open::Message) s += open_item(Open::Message, {});
          text_ += e.text;
          s += ev("response.output_text.delta", {{"item_id", item_id_},
                                                 {"output_index", index_},
                                                 {"content_index", 0},
                                                 {"delta", e.text},
                                                 {"logprobs", json::array()}});
          break;
        case ParserEvent::ToolCallBegin:
          s += open_item(Open::Call, e);
          break;
        case ParserEvent::ToolCallArgs:
          text_ += e.text;
          s += ev("response.function_call_arguments.delta",
                  {{"item_id", item_id_}, {"output_index", index_}, {"delta", e.text}});
          break;
        case ParserEvent::ToolCallEnd:
          s += close_item();
          break;
        default:
          break;
      }
    }
    return s;
  }

  std::string end(const Generation& g) override {
    std::string s = close_item();
    usage_ = {{"input_tokens", g.prompt_tokens()},
              {"input_tokens_details", {{"cached_tokens", g.cached_tokens()}}},
              {"output_tokens", g.completion_tokens()},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", g.prompt_tokens() + g.completion_tokens()}};
    if (g.finish_reason() == "error") {
      json r = response("failed");
      r["error"] = {{"code", "server_error"}, {"message", g.error()}};
      return s + ev("response.failed", {{"response", r}});
    }
    if (g.finish_reason() == "length") {
      json r = response("incomplete");
      r["incomplete_details"] = {{"reason", "max_output_tokens"}};
      return s + ev("response.incomplete", {{"response", r}});
    }
    return s + ev("response.completed", {{"response", response("completed")}});
  }

  json response(const std::string& status) const {
    json r = base_;
    r["status"] = status;
    r["output"] = output_;
    r["usage"] = usage_;
    return r;
  }

 private:
  enum class Open { None, Reasoning, Message, Call };

  std::string ev(const std::string& type, json body) {
    body["type"] = type;
    body["sequence_number"] = seq_++;
    return streaming_ ? sse_event(type, body) : std::string();
  }

  std::string open_item(Open kind, const GenEvent& e) {
    std::string s = close_item();
    open_ = kind;
    index_ = int(output_.size());
    text_.clear();
    json item;
    if (kind == Open::Reasoning) {
      item_id_ = random_id("rs_");
      item = {{"type", "reasoning"}, {"id", item_id_}, {"summary", json::array()}};
    } else if (kind == Open::Message) {
      item_id_ = random_id("msg_");
      item = {{"type", "message"},
              {"id", item_id_},
              {"status", "in_progress"},
              {"role", "assistant"},
              {"content", json::array()}};
    } else {
      item_id_ = random_id("fc_");
      call_id_ = e.id;
      name_ = e.name;
      item = {{"type", "function_call"}, {"id", item_id_},  {"call_id", e.id},
              {"name", e.name},          {"arguments", ""}, {"status", "in_progress"}};
    }
    s += ev("response.output_item.added", {{"output_index", index_}, {"item", item}});
    if (kind == Open::Message)
      s += ev("response.content_part.added",
              {{"item_id", item_id_},
               {"output_index", index_},
               {"content_index", 0},
               {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
    return s;
  }

  std::string close_item() {
    std::string s;
    json item;
    if (open_ == Open::None) return s;
    if (open_ == Open::Reasoning) {
      s += ev(
          "response.reasoning_text.done",
          {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"text", text_}});
      item = {{"type", "reasoning"},
              {"id", item_id_},
              {"summary", json::array()},
              {"content", {{{"type", "reasoning_text"}, {"text", text_}}}},
              {"status", "completed"}};
    } else if (open_ == Open::Message) {
      json part = {{"type", "output_text"},
                   {"text", text_},
                   {"annotations", json::array()},
                   {"logprobs", json::array()}};
      s += ev("response.output_text.done", {{"item_id", item_id_},
                                            {"output_index", index_},
                                            {"content_index", 0},
                                            {"text", text_},
                                            {"logprobs", json::array()}});
      s += ev(
          "response.content_part.done",
          {{"item_id", item_id_}, {"output_index", index_}, {"content_index", 0}, {"part", part}});
      item = {{"type", "message"},
              {"id", item_id_},
              {"status", "completed"},
              {"role", "assistant"},
              {"content", {part}}};
    } else {
      s += ev(
          "response.function_call_arguments.done",
          {{"item_id", item_id_}, {"output_index", index_}, {"name", name_}, {"arguments", text_}});
      item = {{"type", "function_call"}, {"id", item_id_},     {"call_id", call_id_},
              {"name", name_},           {"arguments", text_}, {"status", "completed"}};
    }
    s += ev("response.output_item.done", {{"output_index", index_}, {"item", item}});
    output_.push_back(item);
    open_ = Open::None;
    return s;
  }

  json base_;
  bool streaming_;
  json output_ = json::array();
  json usage_ = nullptr;
  Open open_ = Open::None;
  int index_ = 0;
  int64_t seq_ = 0;
  std::string item_id_, call_id_, name_, text_;
};

}  // namespace

void api_openai_responses(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const json body = parse_body(req.body);
  check_model(ctx, body);
  if (get_string(body, "previous_response_id"))
    throw ApiError(400,
                   "'previous_response_id' is not supported: this server is stateless and stores "
                   "no responses; send the whole conversation in 'input'",
                   "previous_response_id");
  if (auto n = get_string(body, "conversation"); n)
    throw ApiError(400, "'conversation' is not supported: this server is stateless",
                   "conversation");
  GenParams g = parse_gen_params(
      body, Api::Responses, {ctx.engine.max_context(), ctx.model.checkpoint().generation_config});
  const json messages = response_messages(body);
  const json tools = response_tools(body);
  bool tools_on = !tools.empty();
  if (auto it = body.find("tool_choice"); it != body.end() && it->is_string() && *it == "none")
    tools_on = false;
  std::string rendered;
  std::vector<int32_t> prompt =
      encode_chat(ctx, messages, tools_on ? tools : json::array(), json::object(), &rendered);

  GenSpec spec;
  spec.req = engine_request(ctx, g, std::move(prompt));
  spec.parser = parser_options(ctx, tools, tools_on, rendered);
  auto gen = std::make_shared<Generation>(ctx, std::move(spec));

  json base = {{"id", random_id("resp_")},
               {"object", "response"},
               {"created_at", unix_now()},
               {"status", "in_progress"},
               {"error", nullptr},
               {"incomplete_details", nullptr},
               {"instructions", body.value("instructions", json())},
               {"max_output_tokens", g.max_tokens > 0 ? json(g.max_tokens) : json()},
               {"model", ctx.opt.served_name},
               {"output", json::array()},
               {"parallel_tool_calls", body.value("parallel_tool_calls", true)},
               {"previous_response_id", nullptr},
               {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
               {"store", false},
               {"temperature", g.sampling.temperature},
               {"text", {{"format", {{"type", "text"}}}}},
               {"tool_choice", body.value("tool_choice", json("auto"))},
               {"tools", body.value("tools", json::array())},
               {"top_p", g.sampling.top_p},
               {"truncation", "disabled"},
               {"usage", nullptr},
               {"user", nullptr},
               {"metadata", json::object()}};
  auto builder = std::make_shared<ResponseBuilder>(std::move(base), g.stream);
  if (g.stream) {
    stream_sse(res, gen, builder);
    return;
  }
  std::vector<GenEvent> evs;
  gen->run_to_end(evs);
  if (gen->finish_reason() == "error") throw ApiError(500, gen->error());
  builder->on_events(evs);
  builder->end(*gen);
  const char* status = gen->finish_reason() == "length" ? "incomplete" : "completed";
  json out = builder->response(status);
  if (gen->finish_reason() == "length")
    out["incomplete_details"] = {{"reason", "max_output_tokens"}};
  note_request_tokens(gen->prompt_tokens(), gen->completion_tokens());
  res.set_content(json_line(out), "application/json");
}

}  // namespace basalt::server
