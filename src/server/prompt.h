// The seam between the API adapters and the chat template: messages in the template's format
// (OpenAI-style: role/content, assistant "tool_calls" with arguments as objects,
// "reasoning_content", role "tool" with "tool_call_id") → the prompt text, through the
// model's own chat template (tok::ChatTemplate; ChatML when the checkpoint has none), and
// what the template tells about the model's output: its tool-call format and reasoning.
// Requests are parsed as ordered_json so tool schemas keep the client's key order.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "models/model.h"
#include "server/output_parser.h"
#include "tokenizer/chat_template.h"

namespace basalt::server {

class PromptRenderer {
 public:
  explicit PromptRenderer(const Model& model);
  // add_generation_prompt is always on. extra: template variables (e.g. enable_thinking).
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     const nlohmann::ordered_json& extra) const;
  const std::string& template_source() const { return tmpl_.source(); }
  ToolCallFormat tool_format() const { return tool_format_; }
  bool reasoning() const { return reasoning_; }  // the model writes <think>…</think>

 private:
  tok::ChatTemplate tmpl_;
  ToolCallFormat tool_format_ = ToolCallFormat::None;
  bool reasoning_ = false;
};

}  // namespace basalt::server
