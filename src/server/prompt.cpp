#include "server/prompt.h"

#include "server/api_error.h"

namespace basalt::server {

PromptRenderer::PromptRenderer(const Model& model)
    : tmpl_(tok::ChatTemplate::from_checkpoint(model.checkpoint())) {
  const std::string& cls =
      model.config().hf_class.empty() ? model.config().arch : model.config().hf_class;
  const std::string& src = tmpl_.source();
  tool_format_ = tool_format_for_model(cls, tmpl_.is_fallback() ? std::string() : src);
  // Qwen3 writes <think> even where its template does not mention it (the embedded model).
  reasoning_ = src.find("<think>") != std::string::npos || model.config().arch == "qwen3";
}

std::string PromptRenderer::render(const nlohmann::ordered_json& messages,
                                   const nlohmann::ordered_json& tools,
                                   const nlohmann::ordered_json& extra) const {
  try {
    const nlohmann::ordered_json none;
    return tmpl_.render(messages, tools.is_array() && !tools.empty() ? tools : none,
                        /*add_generation_prompt=*/true, extra.is_object() ? extra : none);
  } catch (const tok::ChatTemplateError& e) {
    // The template's raise_exception() and shape errors come from the request's messages.
    throw ApiError(400, e.what(), "messages", "invalid_messages");
  }
}

}  // namespace basalt::server
