// Chat templates: a model's own Jinja `chat_template`, rendered the way transformers'
// apply_chat_template(..., tokenize=False) does, byte for byte (tests/golden/chat/).
// The engine is src/tokenizer/jinja/; the subset it implements is in docs/chat_templates.md.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "io/checkpoint.h"

namespace basalt::tok {

// A template that failed to parse or render. from_template(): the template itself called
// raise_exception('msg') (what() is "[chat_template] msg"); such a request is the client's
// fault (HTTP 400), as is usually any render error caused by the messages' shape.
class ChatTemplateError : public basalt::Error {
 public:
  ChatTemplateError(const std::string& msg, bool from_template)
      : basalt::Error(msg), from_template_(from_template) {}
  bool from_template() const { return from_template_; }

 private:
  bool from_template_;
};

class ChatTemplate {
 public:
  // The checkpoint's template: chat_template.jinja next to the tokenizer files, else
  // tokenizer_config.json "chat_template" (a string, or the list-of-{name, template} form:
  // "default", and "tool_use" for requests with tools when present), or GGUF metadata
  // "tokenizer.chat_template" (and "tokenizer.chat_template.tool_use"); ChatML when it has
  // none (is_fallback() true). bos/eos (and pad/unk) token strings come from tokenizer_config
  // / the GGUF vocab, as transformers passes its special_tokens_map.
  static ChatTemplate from_checkpoint(const io::Checkpoint& ckpt);
  static ChatTemplate from_string(std::string source, std::string bos_token, std::string eos_token);

  // messages: OpenAI-style array [{"role": ..., "content": str | [parts], "tool_calls": [...],
  // "tool_call_id": ..., "reasoning_content": ...}], tools: array of OpenAI tool definitions
  // or null; extra: more variables (e.g. {"enable_thinking": false}).
  // Like transformers: keys whose value is null are dropped from each message, and a
  // message's reasoning (reasoning_content / thinking / reasoning) is offered under both
  // "reasoning_content" and "thinking". Throws ChatTemplateError.
  // nlohmann::json sorts object keys; callers that need the client's key order in `tojson`
  // output (tool schemas) should parse requests as ordered_json and use the overload below.
  std::string render(const nlohmann::json& messages, const nlohmann::json& tools,
                     bool add_generation_prompt, const nlohmann::json& extra = {}) const;
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt, const nlohmann::ordered_json& extra = {}) const;

  bool is_fallback() const;
  const std::string& source() const;  // the default template's source
  bool has_tool_use_template() const;

  // The ChatML template used when a checkpoint has none.
  static const char* chatml_source();

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

}  // namespace basalt::tok
