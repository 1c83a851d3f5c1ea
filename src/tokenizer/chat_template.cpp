// ChatTemplate: finds a checkpoint's template and renders it with the variables and message
// normalization of transformers' apply_chat_template (tokenization_utils_base.py and
// utils/chat_template_utils.py, transformers 5.x).
#include "tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "tokenizer/jinja/template.h"

namespace basalt::tok {

struct ChatTemplate::Impl {
  std::string name;  // where the template came from, for messages
  std::string source;
  std::optional<jinja::Template> tmpl;
  std::string tool_use_source;
  std::optional<jinja::Template> tool_use;
  // special_tokens_map: bos_token, eos_token, pad_token, unk_token (those that are set)
  std::vector<std::pair<std::string, std::string>> specials;
  bool fallback = false;
};

namespace {

const char* kChatML =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for part in message['content'] %}"
    "{%- if part['type'] == 'text' %}{{- part['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

[[noreturn]] void rethrow(const std::string& name, const jinja::TemplateError& e) {
  if (e.raised) throw ChatTemplateError("[chat_template] " + std::string(e.what()), true);
  std::string msg = "[chat_template] " + name + ": " + e.what();
  if (e.line > 0) msg += " at line " + std::to_string(e.line);
  throw ChatTemplateError(msg, false);
}

jinja::Template compile(const std::string& name, const std::string& source) {
  try {
    return jinja::Template(source);
  } catch (const jinja::TemplateError& e) {
    rethrow(name, e);
  }
}

// tokenizer_config.json writes special tokens as a string or as an AddedToken object.
std::string token_string(const nlohmann::json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string())
    return j["content"].get<std::string>();
  return {};
}

std::optional<std::string> read_text_file(const std::filesystem::path& p) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) return std::nullopt;
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::shared_ptr<ChatTemplate::Impl> make_impl(std::string name, std::string source,
                                              std::string tool_use_source) {
  auto impl = std::make_shared<ChatTemplate::Impl>();
  impl->name = std::move(name);
  if (source.empty()) {
    source = kChatML;
    impl->fallback = true;
  }
  impl->source = std::move(source);
  impl->tmpl.emplace(compile(impl->name, impl->source));
  if (!tool_use_source.empty()) {
    impl->tool_use_source = std::move(tool_use_source);
    impl->tool_use.emplace(compile(impl->name + " (tool_use)", impl->tool_use_source));
  }
  return impl;
}

// tokenizer_config "chat_template": a string or [{"name": ..., "template": ...}].
void templates_from_config(const nlohmann::json& ct, const std::string& name, std::string& def,
                           std::string& tool_use) {
  if (ct.is_string()) {
    def = ct.get<std::string>();
  } else if (ct.is_array()) {
    for (const auto& t : ct) {
      if (!t.is_object() || !t.contains("name") || !t.contains("template") ||
          !t["template"].is_string())
        throw ChatTemplateError(
            "[chat_template] " + name + ": chat_template list entries need 'name' and 'template'",
            false);
      std::string n = t["name"].is_string() ? t["name"].get<std::string>() : "";
      if (n == "default") def = t["template"].get<std::string>();
      if (n == "tool_use") tool_use = t["template"].get<std::string>();
    }
    if (def.empty() && !ct.empty())
      throw ChatTemplateError("[chat_template] " + name +
                                  ": this model has several chat templates and none is named "
                                  "'default'",
                              false);
  } else if (!ct.is_null()) {
    throw ChatTemplateError(
        "[chat_template] " + name + ": chat_template must be a string or a list", false);
  }
}

template <typename J>
std::string render_impl(const ChatTemplate::Impl& impl, const J& messages, const J& tools,
                        bool add_generation_prompt, const J& extra) {
  using jinja::Value;
  if (!messages.is_array())
    throw ChatTemplateError("[chat_template] messages must be an array", false);
  if (!tools.is_null() && !tools.is_array())
    throw ChatTemplateError("[chat_template] tools must be an array or null", false);
  if (!extra.is_null() && !extra.is_object())
    throw ChatTemplateError("[chat_template] extra variables must be an object", false);

  // transformers: drop null-valued keys (_normalize_chat_messages), then offer a message's
  // reasoning as both "thinking" and "reasoning_content" (_alias_reasoning_fields).
  std::vector<Value> msgs;
  msgs.reserve(messages.size());
  for (const auto& m : messages) {
    if (!m.is_object())
      throw ChatTemplateError("[chat_template] each message must be an object", false);
    auto d = std::make_shared<jinja::DictObj>();
    const J* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      auto it = m.find(key);
      if (it != m.end() && !it->is_null()) {
        reasoning = &*it;
        break;
      }
    }
    if (reasoning) d->set("thinking", jinja::value_from_json(*reasoning));
    for (auto it = m.begin(); it != m.end(); ++it)
      if (!it->is_null()) d->set(it.key(), jinja::value_from_json(*it));
    if (reasoning) d->set("reasoning_content", jinja::value_from_json(*reasoning));
    msgs.emplace_back(std::move(d));
  }

  jinja::DictObj vars;
  for (const auto& [k, v] : impl.specials) vars.set(k, Value(v));
  vars.set("messages", jinja::make_list(std::move(msgs)));
  vars.set("tools", tools.is_null() ? Value(jinja::None{}) : jinja::value_from_json(tools));
  vars.set("documents", Value(jinja::None{}));
  vars.set("add_generation_prompt", Value(add_generation_prompt));
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it)
      vars.set(it.key(), jinja::value_from_json(*it));

  // transformers picks the "tool_use" template whenever tools is not None.
  bool use_tools = !tools.is_null() && impl.tool_use.has_value();
  const jinja::Template& t = use_tools ? *impl.tool_use : *impl.tmpl;
  try {
    return t.render(vars);
  } catch (const jinja::TemplateError& e) {
    rethrow(use_tools ? impl.name + " (tool_use)" : impl.name, e);
  }
}

}  // namespace

const char* ChatTemplate::chatml_source() {
  return kChatML;
}

ChatTemplate ChatTemplate::from_string(std::string source, std::string bos_token,
                                       std::string eos_token) {
  ChatTemplate ct;
  auto impl = make_impl("template", std::move(source), "");
  if (!bos_token.empty()) impl->specials.emplace_back("bos_token", std::move(bos_token));
  if (!eos_token.empty()) impl->specials.emplace_back("eos_token", std::move(eos_token));
  ct.impl_ = std::move(impl);
  return ct;
}

ChatTemplate ChatTemplate::from_checkpoint(const io::Checkpoint& ckpt) {
  std::string def, tool_use, name;
  std::vector<std::pair<std::string, std::string>> specials;
  if (ckpt.format == io::CheckpointFormat::Gguf && ckpt.gguf) {
    const io::GgufFile& g = *ckpt.gguf;
    name = ckpt.path;
    if (const auto* v = g.find("tokenizer.chat_template"); v && v->is_string())
      def = v->as_string();
    if (const auto* v = g.find("tokenizer.chat_template.tool_use"); v && v->is_string())
      tool_use = v->as_string();
    const auto* tokens = g.find("tokenizer.ggml.tokens");
    auto token = [&](const char* key) -> std::string {
      const auto* id = g.find(key);
      if (!id || !tokens || !tokens->is_array()) return {};
      int64_t i = id->as_int();
      const auto& arr = tokens->as_array();
      if (i < 0 || i >= static_cast<int64_t>(arr.size()) || !arr[i].is_string()) return {};
      return arr[i].as_string();
    };
    for (auto [var, key] : {std::pair{"bos_token", "tokenizer.ggml.bos_token_id"},
                            std::pair{"eos_token", "tokenizer.ggml.eos_token_id"},
                            std::pair{"unk_token", "tokenizer.ggml.unknown_token_id"},
                            std::pair{"pad_token", "tokenizer.ggml.padding_token_id"}}) {
      std::string s = token(key);
      if (!s.empty()) specials.emplace_back(var, std::move(s));
    }
  } else {
    const nlohmann::json& tc = ckpt.tokenizer_config;
    name = ckpt.path == "<embedded>" ? "<embedded>/tokenizer_config.json"
                                     : ckpt.path + "/tokenizer_config.json";
    // Newer transformers save the template as chat_template.jinja beside the config.
    std::optional<std::string> file;
    if (ckpt.path != "<embedded>" && !ckpt.path.empty()) {
      file = read_text_file(std::filesystem::path(ckpt.path) / "chat_template.jinja");
      if (file) name = ckpt.path + "/chat_template.jinja";
    }
    if (file) {
      def = *file;
    } else if (tc.is_object() && tc.contains("chat_template")) {
      templates_from_config(tc["chat_template"], name, def, tool_use);
    }
    if (tc.is_object()) {
      for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
        auto it = tc.find(key);
        if (it == tc.end()) continue;
        std::string s = token_string(*it);
        if (!s.empty()) specials.emplace_back(key, std::move(s));
      }
    }
  }
  ChatTemplate ct;
  auto impl = make_impl(std::move(name), std::move(def), std::move(tool_use));
  impl->specials = std::move(specials);
  ct.impl_ = std::move(impl);
  return ct;
}

std::string ChatTemplate::render(const nlohmann::json& messages, const nlohmann::json& tools,
                                 bool add_generation_prompt, const nlohmann::json& extra) const {
  return render_impl(*impl_, messages, tools, add_generation_prompt, extra);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra) const {
  return render_impl(*impl_, messages, tools, add_generation_prompt, extra);
}

bool ChatTemplate::is_fallback() const {
  return impl_->fallback;
}
const std::string& ChatTemplate::source() const {
  return impl_->source;
}
bool ChatTemplate::has_tool_use_template() const {
  return impl_->tool_use.has_value();
}

}  // namespace basalt::tok
