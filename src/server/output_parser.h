// OutputParser: turns the model's decoded text, fed as it streams, into content, reasoning and
// tool calls — the events every API adapter (OpenAI chat/responses, Anthropic messages) maps to
// its own wire format. docs/tool_calls.md describes each format and the decisions made here.
//
// Pipeline per push: complete UTF-8 characters only → stop strings (matched on the raw model
// text) → markers (<think>, <tool_call>, <function=, …) → events. Text is held back only while
// it could still become a marker or a stop string, so streaming stays smooth.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "server/json_scanner.h"

namespace basalt::server {

enum class ToolCallFormat {
  None,
  Hermes,      // Qwen2.5/Qwen3: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
  QwenXml,     // Qwen3-Coder/Qwen3.5: <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n
               // </parameter>\n</function>\n</tool_call>
  Llama3Json,  // Llama 3.x: {"name": ..., "parameters": {...}} as the whole message,
               // optionally after <|python_tag|>; several separated by ';'
};

struct ParserOptions {
  ToolCallFormat tools = ToolCallFormat::None;
  bool reasoning = false;            // the model emits <think>…</think> at the start
  bool starts_in_reasoning = false;  // the prompt already opened <think> (a leading <think>
                                     // from the model is then swallowed: both template styles)
  // QwenXml only: tool name → parameter name → JSON-schema "type" ("string", "integer",
  // "number", "boolean", "object", "array"). Known types decide how a value converts;
  // unknown ones use the heuristic in docs/tool_calls.md. Fill with add_tool_schema.
  std::map<std::string, std::map<std::string, std::string>> param_types;
};

struct ParserEvent {
  enum Kind {
    Content,
    Reasoning,
    ToolCallBegin,  // id, name, index
    ToolCallArgs,   // text: the next piece of the arguments JSON string
    ToolCallEnd,    // index
  } kind;
  std::string text;  // Content/Reasoning delta, or arguments delta
  int index = 0;     // tool call index within the message
  std::string id, name;
};

class OutputParser {
 public:
  struct ToolCall {
    std::string id, name, arguments;  // arguments: the concatenated ToolCallArgs deltas
  };

  explicit OutputParser(ParserOptions opt);

  // Feeds the next decoded text (may split markers or UTF-8 characters anywhere); returns the
  // events that are certain now. Stop strings are matched before the parser (StopMatcher).
  std::vector<ParserEvent> push(std::string_view delta);
  // End of generation: flushes held-back text and closes what is open.
  std::vector<ParserEvent> finish();

  // The whole message so far (complete after finish()).
  const std::string& content() const { return content_; }
  const std::string& reasoning() const { return reasoning_; }
  const std::vector<ToolCall>& tool_calls() const { return calls_; }

 private:
  enum class Mode {
    ReasoningStart,  // may still see a leading <think>
    Reasoning,
    ContentStart,  // Llama3Json: decides whether the message is a tool call
    Content,
    CallStart,       // after <tool_call>: JSON or XML?
    JsonHeader,      // {"name": "...", "arguments":   (nothing emitted yet)
    JsonArgs,        // streaming the arguments value
    JsonArgsString,  // arguments given as a JSON string: held, decoded at its end
    JsonTail,        // rest of the call object after the arguments
    JsonAfter,       // Hermes: up to </tool_call>; Llama: ';' or the end
    JsonBroken,      // arguments stopped being valid JSON: the rest is passed raw
    XmlFunction,     // <function=NAME>
    XmlBody,         // <parameter=…> or </function>
    XmlParamName,
    XmlParamValue,
    XmlAfter,  // </tool_call> or another <function=
    RawCall,   // pre-Begin text that matched no streaming form: held to the end marker
    Done,
  };

  void feed(std::string_view text);  // after UTF-8 and stop handling
  void run();                        // steps the mode machine while it makes progress
  bool step();
  bool step_reasoning_start();
  bool step_reasoning();
  bool step_content_start();
  bool step_content();
  bool step_call_start();
  bool step_json_header();
  bool step_json_args();
  bool step_json_args_string();
  bool step_json_tail();
  bool step_json_after();
  bool step_json_broken();
  bool step_xml_function();
  bool step_xml_body();
  bool step_xml_param_name();
  bool step_xml_param_value();
  const std::string* xml_param_type() const;  // schema type of the current XML parameter
  bool step_xml_after();
  bool step_raw_call();
  void close_at_end();  // final_: resolves the mode still open

  void emit_content(std::string_view s);
  void emit_reasoning(std::string_view s);
  void emit(ParserEvent::Kind kind, std::string_view text);
  void begin_call(std::string name);
  void emit_args(std::string_view s);
  void end_call();
  void fail_call_to_content();  // pre-Begin: the held raw call text becomes content
  void consume(size_t n);       // drops n bytes of buf_ (kept in call_raw_ while collecting)

  ParserOptions opt_;
  bool trim_ = false;  // reasoning or tools on: whitespace around blocks is not content

  std::string utf8_tail_;  // an incomplete UTF-8 character
  std::string buf_;        // text not yet resolved by the mode machine
  bool final_ = false;
  bool finished_ = false;
  std::vector<ParserEvent>* out_ = nullptr;

  Mode mode_ = Mode::Content;
  bool content_started_ = false, reasoning_started_ = false;
  std::string content_ws_, reasoning_ws_;  // whitespace held until non-whitespace follows
  bool wrapped_ = true;                    // the call had <tool_call> (XML form may omit it)
  bool llama_ = false;                     // the JSON call is a Llama 3 one (';' separated)
  std::string call_raw_;                   // raw text of a call before its Begin
  std::string held_;                       // JsonArgsString / JsonBroken / XmlParamValue text
  std::string param_name_;
  int params_ = 0;
  bool param_streams_ = false;      // a string-typed XML value: streamed as it is written
  bool param_value_begun_ = false;  // its first character (a layout newline?) has been seen
  JsonScanner scan_;                // validates the streamed arguments
  std::string name_;                // name of the call being parsed

  std::string content_, reasoning_;
  std::vector<ToolCall> calls_;
  bool in_call_ = false;
  bool collecting_raw_ = false;  // call_raw_ is being kept (a call not yet begun)
};

// Picks the tool-call format from the chat template (what it teaches the model to write), else
// from the architecture: "<function=" → QwenXml, "<tool_call>" → Hermes, "<|python_tag|>" or
// "ipython" → Llama3Json; no template: qwen3_5/qwen3-coder → QwenXml, other qwen → Hermes.
ToolCallFormat tool_format_for_model(const std::string& hf_class_or_arch,
                                     const std::string& chat_template_source);
// True when the rendered prompt ends inside an open <think> (set starts_in_reasoning).
bool prompt_opens_reasoning(std::string_view rendered_prompt);
// Records the parameter types of one tool from its JSON-schema "parameters" object.
void add_tool_schema(ParserOptions& opt, const std::string& tool_name,
                     const nlohmann::json& parameters_schema);
// "call_" + 24 random alphanumerics.
std::string make_tool_call_id();

}  // namespace basalt::server
