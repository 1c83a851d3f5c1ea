// A parsed Jinja template, rendered many times. The subset and its deviations from jinja2 are
// listed in docs/chat_templates.md.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/jinja/ast.h"

namespace basalt::tok::jinja {

class Template {
 public:
  // Lexes and parses with transformers' settings (trim_blocks, lstrip_blocks); throws
  // TemplateError (with the line) on a syntax error.
  explicit Template(const std::string& source);
  // Throws TemplateError (with the line) when rendering fails or the template raises.
  std::string render(const DictObj& vars) const;

 private:
  std::shared_ptr<const Body> body_;
};

// JSON -> Value, keeping object key order as the json type holds it.
Value value_from_json(const nlohmann::ordered_json& j);
Value value_from_json(const nlohmann::json& j);

}  // namespace basalt::tok::jinja
