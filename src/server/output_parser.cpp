// OutputParser core: UTF-8 and stop-string stages, the mode machine's driver, reasoning and
// content. The tool-call forms are in tool_call_formats.cpp.
#include "server/output_parser.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>

#include "server/output_parser_util.h"

namespace basalt::server {

using detail::find_cut;
using detail::is_ws;
using detail::kWs;

namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Length of the prefix of s that ends on a UTF-8 character boundary (an incomplete trailing
// sequence waits for its next bytes).
size_t utf8_complete_prefix(std::string_view s) {
  size_t n = s.size();
  for (size_t k = 1; k <= 4 && k <= n; ++k) {
    auto c = static_cast<unsigned char>(s[n - k]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > k ? n - k : n;
  }
  return n;
}

}  // namespace

namespace detail {

Cut find_cut(std::string_view buf, std::initializer_list<std::string_view> markers, bool final) {
  Cut best{std::string_view::npos, -1};
  int i = 0;
  for (auto m : markers) {
    size_t p = buf.find(m);
    if (p < best.pos) best = {p, i};
    ++i;
  }
  if (best.marker >= 0) return best;
  if (final) return {buf.size(), -1};
  size_t hold = 0;
  for (auto m : markers) {
    for (size_t k = std::min(m.size() - 1, buf.size()); k > hold; --k) {
      if (buf.ends_with(m.substr(0, k))) {
        hold = k;
        break;
      }
    }
  }
  return {buf.size() - hold, -1};
}

bool starts_or_prefix(std::string_view buf, std::string_view marker, bool& complete) {
  complete = buf.starts_with(marker);
  return complete || marker.starts_with(buf);
}

}  // namespace detail

OutputParser::OutputParser(ParserOptions opt) : opt_(std::move(opt)) {
  trim_ = opt_.reasoning || opt_.tools != ToolCallFormat::None;
  if (opt_.reasoning) {
    mode_ = Mode::ReasoningStart;
  } else {
    mode_ = Mode::ContentStart;
  }
}

std::vector<ParserEvent> OutputParser::push(std::string_view delta) {
  std::vector<ParserEvent> out;
  if (finished_) return out;
  out_ = &out;
  utf8_tail_.append(delta);
  size_t n = utf8_complete_prefix(utf8_tail_);
  std::string text = utf8_tail_.substr(0, n);
  utf8_tail_.erase(0, n);

  feed(text);
  out_ = nullptr;
  return out;
}

std::vector<ParserEvent> OutputParser::finish() {
  std::vector<ParserEvent> out;
  if (finished_) return out;
  out_ = &out;
  // An incomplete UTF-8 character at the very end cannot complete any more.
  if (!utf8_tail_.empty()) feed(kReplacement);
  utf8_tail_.clear();
  final_ = true;
  run();
  close_at_end();
  finished_ = true;
  out_ = nullptr;
  return out;
}

void OutputParser::feed(std::string_view text) {
  buf_.append(text);
  run();
}

void OutputParser::run() {
  while (step()) {
  }
}

void OutputParser::consume(size_t n) {
  if (collecting_raw_) call_raw_.append(buf_, 0, n);
  buf_.erase(0, n);
}

bool OutputParser::step() {
  switch (mode_) {
    case Mode::ReasoningStart:
      return step_reasoning_start();
    case Mode::Reasoning:
      return step_reasoning();
    case Mode::ContentStart:
      return step_content_start();
    case Mode::Content:
      return step_content();
    case Mode::CallStart:
      return step_call_start();
    case Mode::JsonHeader:
      return step_json_header();
    case Mode::JsonArgs:
      return step_json_args();
    case Mode::JsonArgsString:
      return step_json_args_string();
    case Mode::JsonTail:
      return step_json_tail();
    case Mode::JsonAfter:
      return step_json_after();
    case Mode::JsonBroken:
      return step_json_broken();
    case Mode::XmlFunction:
      return step_xml_function();
    case Mode::XmlBody:
      return step_xml_body();
    case Mode::XmlParamName:
      return step_xml_param_name();
    case Mode::XmlParamValue:
      return step_xml_param_value();
    case Mode::XmlAfter:
      return step_xml_after();
    case Mode::RawCall:
      return step_raw_call();
    case Mode::Done:
      return false;
  }
  return false;
}

// Whatever is still open when the text ends (finish or a stop string).
void OutputParser::close_at_end() {
  if (in_call_) end_call();  // cut off: the arguments stay as streamed (not closed)
  if (collecting_raw_) {
    call_raw_ += buf_;
    buf_.clear();
    fail_call_to_content();
  }
  buf_.clear();  // content and reasoning flush themselves; what is left was inside a call
  mode_ = Mode::Done;
}

// ---- reasoning ----

bool OutputParser::step_reasoning_start() {
  size_t ws = buf_.find_first_not_of(kWs);
  std::string_view rest =
      ws == std::string::npos ? std::string_view() : std::string_view(buf_).substr(ws);
  bool complete = false;
  if (detail::starts_or_prefix(rest, kThinkOpen, complete) && !complete) {
    if (!final_) return false;  // could still be "<think>"
  }
  if (complete) {
    buf_.erase(0, ws + kThinkOpen.size());
    mode_ = Mode::Reasoning;
    return true;
  }
  // No opening tag: the prompt opened the block already, or the model answers directly.
  mode_ = opt_.starts_in_reasoning ? Mode::Reasoning : Mode::ContentStart;
  return true;
}

bool OutputParser::step_reasoning() {
  auto cut = find_cut(buf_, {kThinkClose}, final_);
  emit_reasoning(std::string_view(buf_).substr(0, cut.pos));
  if (cut.marker < 0) {
    buf_.erase(0, cut.pos);
    return false;
  }
  buf_.erase(0, cut.pos + kThinkClose.size());
  reasoning_ws_.clear();  // trailing whitespace of the reasoning is not part of it
  mode_ = Mode::ContentStart;
  return true;
}

// ---- content ----

bool OutputParser::step_content_start() {
  if (opt_.tools != ToolCallFormat::Llama3Json) {
    mode_ = Mode::Content;
    return true;
  }
  // Llama 3: a tool call is the whole message: it starts with '{' or <|python_tag|>.
  size_t ws = buf_.find_first_not_of(kWs);
  if (ws == std::string::npos) {
    if (final_) mode_ = Mode::Content;
    return final_;
  }
  std::string_view rest = std::string_view(buf_).substr(ws);
  bool tag = false;
  if (detail::starts_or_prefix(rest, kPythonTag, tag) && !tag && !final_) return false;
  if (tag || rest[0] == '{') {
    buf_.erase(0, ws + (tag ? kPythonTag.size() : 0));
    llama_ = true;
    collecting_raw_ = true;  // the tag itself is a special token, not content
    call_raw_.clear();
    mode_ = Mode::CallStart;
    return true;
  }
  mode_ = Mode::Content;
  return true;
}

bool OutputParser::step_content() {
  detail::Cut cut;
  switch (opt_.tools) {
    case ToolCallFormat::Hermes:
      cut = find_cut(buf_, {"<tool_call>"}, final_);
      break;
    case ToolCallFormat::QwenXml:
      // Qwen3-Coder sometimes leaves out <tool_call> (vLLM accepts a bare <function=); a stray
      // </tool_call> left by that is dropped.
      cut = find_cut(buf_, {"<tool_call>", "<function=", "</tool_call>"}, final_);
      break;
    default:
      cut = {buf_.size(), -1};
  }
  emit_content(std::string_view(buf_).substr(0, cut.pos));
  buf_.erase(0, cut.pos);
  if (cut.marker < 0) return false;
  if (cut.marker == 0) {
    buf_.erase(0, std::string_view("<tool_call>").size());
    collecting_raw_ = true;
    call_raw_ = "<tool_call>";
    wrapped_ = true;
    llama_ = false;
    mode_ = Mode::CallStart;
  } else if (cut.marker == 1) {
    collecting_raw_ = true;
    call_raw_.clear();
    wrapped_ = false;
    mode_ = Mode::XmlFunction;
  } else {
    buf_.erase(0, std::string_view("</tool_call>").size());
  }
  return true;
}

// ---- emission ----

void OutputParser::emit(ParserEvent::Kind kind, std::string_view text) {
  if (text.empty()) return;
  if (kind == ParserEvent::Content) content_ += text;
  if (kind == ParserEvent::Reasoning) reasoning_ += text;
  if (kind == ParserEvent::ToolCallArgs) calls_.back().arguments += text;
  int index = kind == ParserEvent::ToolCallArgs ? static_cast<int>(calls_.size()) - 1 : 0;
  if (!out_->empty() && out_->back().kind == kind && out_->back().index == index) {
    out_->back().text += text;
    return;
  }
  out_->push_back({kind, std::string(text), index, {}, {}});
}

// With reasoning or tools on, whitespace between blocks is layout, not content: leading
// whitespace is dropped, and a whitespace run is held until non-whitespace text follows it.
static void trimmed_piece(std::string_view s, bool& started, std::string& held_ws,
                          std::string& piece) {
  piece.clear();
  size_t last = s.find_last_not_of(kWs);
  if (last == std::string_view::npos) {
    if (started) held_ws += s;
    return;
  }
  size_t first = started ? 0 : s.find_first_not_of(kWs);
  piece = held_ws;
  piece += s.substr(first, last + 1 - first);
  held_ws = s.substr(last + 1);
  started = true;
}

void OutputParser::emit_content(std::string_view s) {
  if (!trim_) return emit(ParserEvent::Content, s);
  std::string piece;
  trimmed_piece(s, content_started_, content_ws_, piece);
  emit(ParserEvent::Content, piece);
}

void OutputParser::emit_reasoning(std::string_view s) {
  std::string piece;
  trimmed_piece(s, reasoning_started_, reasoning_ws_, piece);
  emit(ParserEvent::Reasoning, piece);
}

void OutputParser::begin_call(std::string name) {
  collecting_raw_ = false;
  call_raw_.clear();
  in_call_ = true;
  ParserEvent e{
      ParserEvent::ToolCallBegin, {}, static_cast<int>(calls_.size()), make_tool_call_id(), name};
  calls_.push_back({e.id, name, {}});
  out_->push_back(std::move(e));
}

void OutputParser::emit_args(std::string_view s) {
  emit(ParserEvent::ToolCallArgs, s);
}

void OutputParser::end_call() {
  in_call_ = false;
  out_->push_back({ParserEvent::ToolCallEnd, {}, static_cast<int>(calls_.size()) - 1, {}, {}});
}

void OutputParser::fail_call_to_content() {
  collecting_raw_ = false;
  emit_content(call_raw_);
  call_raw_.clear();
}

// ---- free functions ----

static std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

ToolCallFormat tool_format_for_model(const std::string& hf_class_or_arch,
                                     const std::string& chat_template_source) {
  const std::string& t = chat_template_source;
  if (t.find("<function=") != std::string::npos) return ToolCallFormat::QwenXml;
  if (t.find("<tool_call>") != std::string::npos) return ToolCallFormat::Hermes;
  if (t.find("<|python_tag|>") != std::string::npos || t.find("ipython") != std::string::npos)
    return ToolCallFormat::Llama3Json;
  if (!t.empty()) return ToolCallFormat::None;  // the template teaches no tool format
  std::string a = lower(hf_class_or_arch);
  if (a.find("qwen3_5") != std::string::npos || a.find("qwen3.5") != std::string::npos ||
      a.find("coder") != std::string::npos)
    return a.find("qwen") != std::string::npos ? ToolCallFormat::QwenXml : ToolCallFormat::None;
  if (a.find("qwen2") != std::string::npos || a.find("qwen3") != std::string::npos)
    return ToolCallFormat::Hermes;
  return ToolCallFormat::None;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  size_t end = prompt.find_last_not_of(kWs);
  if (end == std::string_view::npos) return false;
  return prompt.substr(0, end + 1).ends_with(kThinkOpen);
}

void add_tool_schema(ParserOptions& opt, const std::string& tool_name,
                     const nlohmann::json& schema) {
  auto& types = opt.param_types[tool_name];
  if (!schema.is_object() || !schema.contains("properties") || !schema["properties"].is_object())
    return;
  for (const auto& [key, prop] : schema["properties"].items()) {
    if (!prop.is_object() || !prop.contains("type")) continue;
    const auto& t = prop["type"];
    if (t.is_string()) {
      types[key] = t.get<std::string>();
    } else if (t.is_array()) {  // ["integer", "null"]: the first non-null type
      for (const auto& x : t)
        if (x.is_string() && x.get<std::string>() != "null") {
          types[key] = x.get<std::string>();
          break;
        }
    }
  }
}

std::string make_tool_call_id() {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<int> pick(0, 61);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[pick(rng)];
  return id;
}

}  // namespace basalt::server
