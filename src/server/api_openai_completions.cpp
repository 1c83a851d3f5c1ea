// POST /v1/completions (OpenAI legacy Completions): raw prompt text (or token ids), no
// template, no parsing of the output.
#include <fmt/format.h>

#include "server/api.h"
#include "server/sse.h"

namespace basalt::server {
namespace {

std::vector<int32_t> prompt_tokens(const ServerContext& ctx, const json& body, std::string* text) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) throw ApiError(400, "'prompt' is required", "prompt");
  json p = *it;
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = p[0];
  if (p.is_string()) {
    *text = p.get<std::string>();
    if (text->empty()) throw ApiError(400, "'prompt' must not be empty", "prompt");
    try {
      return ctx.tok.encode(*text, /*add_special=*/true, /*parse_special=*/true);
    } catch (const std::exception& e) {
      throw ApiError(400, e.what(), "prompt");
    }
  }
  if (p.is_array()) {
    if (p.empty()) throw ApiError(400, "'prompt' must not be empty", "prompt");
    std::vector<int32_t> ids;
    for (const json& v : p) {
      if (v.is_array() || v.is_string())
        throw ApiError(400, "more than one prompt is not supported", "prompt");
      if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
          v.get<int64_t>() >= ctx.tok.vocab_size())
        throw ApiError(
            400,
            fmt::format("'prompt' token ids must be integers in [0, {})", ctx.tok.vocab_size()),
            "prompt");
      ids.push_back(v.get<int32_t>());
    }
    *text = ctx.tok.decode(ids);
    return ids;
  }
  throw ApiError(400, "'prompt' must be a string, an array of token ids, or a list of one of those",
                 "prompt");
}

// OpenAI's legacy logprobs: parallel arrays.
json logprobs_json(const std::vector<TokenLogprob>& lps, size_t offset0) {
  json tokens = json::array(), lp = json::array(), top = json::array(), off = json::array();
  size_t off_now = offset0;
  for (const TokenLogprob& t : lps) {
    tokens.push_back(t.text);
    lp.push_back(t.logprob);
    json m = json::object();
    for (const auto& [s, l] : t.top) m[s] = l;
    top.push_back(m);
    off.push_back(off_now);
    off_now += t.text.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}, {"text_offset", off}};
}

json usage_json(const Generation& g) {
  return {{"prompt_tokens", g.prompt_tokens()},
          {"completion_tokens", g.completion_tokens()},
          {"total_tokens", g.prompt_tokens() + g.completion_tokens()}};
}

std::string finish_reason(const Generation& g) {
  return g.finish_reason() == "length" ? "length" : "stop";
}

class CompletionStream : public StreamFormat {
 public:
  CompletionStream(std::string id, std::string model, bool logprobs, bool usage)
      : id_(std::move(id)), model_(std::move(model)), logprobs_(logprobs), usage_(usage) {}
  std::string begin() override { return ""; }
  std::string on_events(const std::vector<GenEvent>& evs) override {
    std::string s;
    for (const GenEvent& e : evs) {
      if (e.text.empty() && e.logprobs.empty()) continue;
      json c = chunk(e.text);
      if (logprobs_) c["choices"][0]["logprobs"] = logprobs_json(e.logprobs, offset_);
      offset_ += e.text.size();
      s += sse_data(c);
    }
    return s;
  }
  std::string end(const Generation& g) override {
    std::string s;
    if (g.finish_reason() == "error") {
      s += sse_data(error_body(ApiFlavor::OpenAI, 500, g.error()));
    } else {
      json c = chunk("");
      c["choices"][0]["finish_reason"] = finish_reason(g);
      s += sse_data(c);
    }
    if (usage_) {
      json u = chunk("");
      u["choices"] = json::array();
      u["usage"] = usage_json(g);
      s += sse_data(u);
    }
    return s + sse_done();
  }

 private:
  json chunk(const std::string& text) const {
    return {{"id", id_},
            {"object", "text_completion"},
            {"created", created_},
            {"model", model_},
            {"choices",
             {{{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", nullptr}}}}};
  }
  std::string id_, model_;
  bool logprobs_, usage_;
  size_t offset_ = 0;
  int64_t created_ = unix_now();
};

}  // namespace

void api_openai_completions(ServerContext& ctx, const httplib::Request& req,
                            httplib::Response& res) {
  const json body = parse_body(req.body);
  check_model(ctx, body);
  GenParams g = parse_gen_params(
      body, Api::Completions, {ctx.engine.max_context(), ctx.model.checkpoint().generation_config});
  const bool echo = get_bool(body, "echo").value_or(false);
  if (get_string(body, "suffix")) throw ApiError(400, "'suffix' is not supported", "suffix");
  if (echo && g.stream) throw ApiError(400, "'echo' is not supported with 'stream'", "echo");
  std::string prompt_text;
  std::vector<int32_t> prompt = prompt_tokens(ctx, body, &prompt_text);

  GenSpec spec;
  spec.req = engine_request(ctx, g, std::move(prompt));
  spec.stop = g.stop;
  spec.logprobs = g.logprobs;
  auto gen = std::make_shared<Generation>(ctx, std::move(spec));
  const std::string id = random_id("cmpl-");

  if (g.stream) {
    stream_sse(
        res, gen,
        std::make_shared<CompletionStream>(id, ctx.opt.served_name, g.logprobs, g.include_usage));
    return;
  }
  std::vector<GenEvent> evs;
  gen->run_to_end(evs);
  if (gen->finish_reason() == "error") throw ApiError(500, gen->error());
  GenResult r;
  gather(evs, r);
  json choice = {
      {"index", 0},
      {"text", echo ? prompt_text + r.content : r.content},
      {"logprobs", g.logprobs ? logprobs_json(r.logprobs, echo ? prompt_text.size() : 0) : json()},
      {"finish_reason", finish_reason(*gen)}};
  json out = {{"id", id},
              {"object", "text_completion"},
              {"created", unix_now()},
              {"model", ctx.opt.served_name},
              {"choices", {choice}},
              {"usage", usage_json(*gen)}};
  note_request_tokens(gen->prompt_tokens(), gen->completion_tokens());
  res.set_content(json_line(out), "application/json");
}

}  // namespace basalt::server
