// The tool-call forms of OutputParser: JSON calls (Hermes <tool_call>{…}</tool_call>, Llama 3
// {"name", "parameters"}) streamed through JsonScanner, the Qwen XML form (<function=…>), and
// the held fallback for calls that match neither streaming form. docs/tool_calls.md.
#include <nlohmann/json.hpp>

#include "server/output_parser.h"
#include "server/output_parser_util.h"

namespace basalt::server {

using detail::find_cut;
using detail::is_ws;
using detail::kWs;
using nlohmann::json;

namespace {

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParamOpen = "<parameter=";
constexpr std::string_view kParamClose = "</parameter>";

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string_view trim(std::string_view s) {
  size_t a = s.find_first_not_of(kWs);
  if (a == std::string_view::npos) return {};
  return s.substr(a, s.find_last_not_of(kWs) + 1 - a);
}

std::string_view rtrim(std::string_view s) {
  size_t b = s.find_last_not_of(kWs);
  return b == std::string_view::npos ? std::string_view() : s.substr(0, b + 1);
}

// The start of a JSON call object, up to its arguments value:
//   {"name": "NAME", "arguments": …   (also "parameters"; an optional "type": "…" member first)
// Matched: end = where the arguments value starts. Keys in another order are a Mismatch: the
// call is then held whole and parsed at its end (step_raw_call).
enum class Header { NeedMore, Mismatch, Matched };

Header match_json_header(std::string_view s, size_t& end, std::string& name) {
  size_t i = 0;
  auto skip_ws = [&] {
    while (i < s.size() && is_ws(s[i])) ++i;
    return i < s.size();
  };
  // A JSON string at s[i] == '"', decoded into out.
  auto read_string = [&](std::string& out) -> Header {
    size_t start = i++;
    while (i < s.size() && s[i] != '"') i += s[i] == '\\' ? 2 : 1;
    if (i >= s.size()) return Header::NeedMore;
    ++i;
    json j = json::parse(s.substr(start, i - start), nullptr, false);
    if (!j.is_string()) return Header::Mismatch;
    out = j.get<std::string>();
    return Header::Matched;
  };
  if (!skip_ws()) return Header::NeedMore;
  if (s[i++] != '{') return Header::Mismatch;
  bool have_name = false;
  for (;;) {
    if (!skip_ws()) return Header::NeedMore;
    if (s[i] != '"') return Header::Mismatch;
    std::string key;
    if (auto r = read_string(key); r != Header::Matched) return r;
    if (!skip_ws()) return Header::NeedMore;
    if (s[i++] != ':') return Header::Mismatch;
    if (!skip_ws()) return Header::NeedMore;
    if (key == "arguments" || key == "parameters") {
      if (!have_name) return Header::Mismatch;
      end = i;
      return Header::Matched;
    }
    if (key != "name" && key != "type") return Header::Mismatch;
    if (s[i] != '"') return Header::Mismatch;
    std::string value;
    if (auto r = read_string(value); r != Header::Matched) return r;
    if (key == "name") {
      name = value;
      have_name = true;
    }
    if (!skip_ws()) return Header::NeedMore;
    if (s[i++] != ',') return Header::Mismatch;
  }
}

// A raw control character inside a JSON string is invalid JSON; models write them in code.
void append_in_string(std::string& out, char c) {
  auto u = static_cast<unsigned char>(c);
  if (u >= 0x20) {
    out += c;
    return;
  }
  switch (c) {
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default: {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
}

// The arguments of a call object as a compact JSON string ("{}" when missing; a string value
// holding JSON is unwrapped).
std::string call_arguments(const json& call) {
  const json* a = nullptr;
  if (call.contains("arguments")) a = &call["arguments"];
  if (!a && call.contains("parameters")) a = &call["parameters"];
  if (!a || a->is_null()) return "{}";
  if (a->is_string()) {
    json inner = json::parse(a->get<std::string>(), nullptr, false);
    return inner.is_discarded() ? a->get<std::string>() : dump(inner);
  }
  return dump(*a);
}

// Calls in a held body: one object, or an array of them, each with a string "name".
bool parse_held_calls(std::string_view body,
                      std::vector<std::pair<std::string, std::string>>& out) {
  json j = json::parse(trim(body), nullptr, false);
  if (j.is_discarded()) return false;
  std::vector<json> items = j.is_array() ? j.get<std::vector<json>>() : std::vector<json>{j};
  for (const auto& c : items) {
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) return false;
    out.emplace_back(c["name"].get<std::string>(), call_arguments(c));
  }
  return !out.empty();
}

std::string lower(std::string_view s) {
  std::string r(s);
  for (auto& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

bool is_string_type(std::string_view t) {
  std::string l = lower(t);
  return l == "string" || l == "str" || l == "text" || l == "enum";
}

// A Qwen XML parameter value → JSON (vLLM's qwen3_coder conventions: one leading and one
// trailing newline belong to the layout; a schema type decides the conversion when known).
json xml_param_value(std::string_view raw, const std::string* schema_type) {
  if (raw.starts_with('\n')) raw.remove_prefix(1);
  if (raw.ends_with('\n')) raw.remove_suffix(1);
  std::string t = schema_type ? lower(*schema_type) : "";
  if (is_string_type(t)) return std::string(raw);
  std::string_view v = trim(raw);
  if (t == "boolean" || t == "bool") {
    std::string b = lower(v);
    if (b == "true" || b == "false") return b == "true";
  }
  json j = json::parse(v, nullptr, false);
  if (!t.empty()) return j.is_discarded() ? json(std::string(raw)) : j;
  // No schema: a value that reads as JSON other than a string is kept as JSON; a number only
  // when it prints back the same (so "007" or a 30-digit id stays a string, exactly as written).
  if (j.is_discarded() || j.is_string()) return std::string(raw);
  if (j.is_number() && dump(j) != v) return std::string(raw);
  return j;
}

}  // namespace

// ---- the start of a call ----

bool OutputParser::step_call_start() {
  size_t ws = buf_.find_first_not_of(kWs);
  if (ws == std::string::npos) {
    consume(buf_.size());
    if (!final_) return false;
    fail_call_to_content();
    mode_ = Mode::Content;
    return true;
  }
  consume(ws);
  if (buf_[0] == '{') {
    mode_ = Mode::JsonHeader;
    return true;
  }
  // Either wrapped form is accepted whatever the configured format: models mix them.
  if (!llama_) {
    bool complete = false;
    if (detail::starts_or_prefix(buf_, kFunctionOpen, complete)) {
      if (complete) {
        mode_ = Mode::XmlFunction;
        return true;
      }
      if (!final_) return false;
    }
  }
  mode_ = Mode::RawCall;
  return true;
}

// Held to the end marker (Llama: to the end of the message), then parsed whole.
bool OutputParser::step_raw_call() {
  bool wrapped = !llama_;
  auto cut = wrapped ? find_cut(buf_, {kCallClose}, final_) : detail::Cut{buf_.size(), -1};
  consume(cut.pos);
  if (cut.marker < 0 && !final_) return false;
  size_t body_at = call_raw_.starts_with(kCallOpen) ? kCallOpen.size() : 0;
  std::vector<std::pair<std::string, std::string>> calls;
  if (parse_held_calls(std::string_view(call_raw_).substr(body_at), calls)) {
    for (auto& [name, args] : calls) {
      begin_call(name);
      emit_args(args);
      end_call();
    }
  } else {
    if (cut.marker >= 0) call_raw_ += kCallClose;
    fail_call_to_content();  // not a call: the model's text, as written
  }
  if (cut.marker >= 0) buf_.erase(0, kCallClose.size());
  mode_ = Mode::Content;
  return true;
}

// ---- JSON calls ----

bool OutputParser::step_json_header() {
  size_t end = 0;
  std::string name;
  Header h = match_json_header(buf_, end, name);
  if (h == Header::NeedMore && !final_) return false;
  if (h != Header::Matched) {
    mode_ = Mode::RawCall;
    return true;
  }
  consume(end);
  begin_call(std::move(name));
  scan_.reset();
  mode_ = Mode::JsonArgs;
  return true;
}

// Streams the arguments value as written, minus whitespace outside strings (compact JSON).
bool OutputParser::step_json_args() {
  std::string piece;
  for (size_t i = 0; i < buf_.size(); ++i) {
    char c = buf_[i];
    if (c == '"' && scan_.at_start()) {  // arguments as a JSON string: decoded at its end
      emit_args(piece);
      buf_.erase(0, i);
      held_.clear();
      mode_ = Mode::JsonArgsString;
      return true;
    }
    bool in_string = scan_.in_string();
    auto st = scan_.feed(c);
    if (st == JsonScanner::Step::Error || st == JsonScanner::Step::DoneBefore) {
      emit_args(piece);
      buf_.erase(0, i);
      held_.clear();
      if (st == JsonScanner::Step::Error) {
        mode_ = Mode::JsonBroken;
      } else {
        end_call();
        scan_.reset_in_object_after_value();
        mode_ = Mode::JsonTail;
      }
      return true;
    }
    if (in_string) {
      append_in_string(piece, c);
    } else if (!is_ws(c)) {
      piece += c;
    }
    if (st == JsonScanner::Step::Done) {
      emit_args(piece);
      buf_.erase(0, i + 1);
      end_call();
      scan_.reset_in_object_after_value();
      mode_ = Mode::JsonTail;
      return true;
    }
  }
  emit_args(piece);
  buf_.clear();
  return false;
}

bool OutputParser::step_json_args_string() {
  for (size_t i = 0; i < buf_.size(); ++i) {
    auto st = scan_.feed(buf_[i]);
    if (st == JsonScanner::Step::Error) {
      buf_.erase(0, i);
      mode_ = Mode::JsonBroken;
      return true;
    }
    held_ += buf_[i];
    if (st == JsonScanner::Step::Done) {
      json s = json::parse(held_, nullptr, false);
      std::string text = s.is_string() ? s.get<std::string>() : held_;
      json inner = json::parse(text, nullptr, false);
      emit_args(inner.is_discarded() ? text : dump(inner));
      held_.clear();
      buf_.erase(0, i + 1);
      end_call();
      scan_.reset_in_object_after_value();
      mode_ = Mode::JsonTail;
      return true;
    }
  }
  buf_.clear();
  if (final_) {  // cut off inside the string: passed on as written
    emit_args(held_);
    held_.clear();
  }
  return false;
}

// The rest of the call object after its arguments (other members are ignored).
bool OutputParser::step_json_tail() {
  for (size_t i = 0; i < buf_.size(); ++i) {
    auto st = scan_.feed(buf_[i]);
    if (st == JsonScanner::Step::Done || st == JsonScanner::Step::Error) {
      buf_.erase(0, st == JsonScanner::Step::Done ? i + 1 : i);
      mode_ = Mode::JsonAfter;
      return true;
    }
  }
  buf_.clear();
  return false;
}

bool OutputParser::step_json_after() {
  if (!llama_) {  // anything left before </tool_call> is inside the call: dropped
    auto cut = find_cut(buf_, {kCallClose}, final_);
    buf_.erase(0, cut.pos);
    if (cut.marker < 0) return false;
    buf_.erase(0, kCallClose.size());
    mode_ = Mode::Content;
    return true;
  }
  size_t ws = buf_.find_first_not_of(kWs);
  if (ws == std::string::npos) {
    buf_.clear();
    return false;
  }
  buf_.erase(0, ws);
  if (buf_[0] == ';') buf_.erase(0, 1);
  mode_ = Mode::ContentStart;  // another call, or text (then content)
  return true;
}

// The arguments stopped being valid JSON: the rest of the call is passed on raw, so the
// client's JSON parse fails visibly instead of the call being silently altered.
bool OutputParser::step_json_broken() {
  auto cut = llama_ ? detail::Cut{buf_.size(), -1} : find_cut(buf_, {kCallClose}, final_);
  held_.append(buf_, 0, cut.pos);
  buf_.erase(0, cut.pos);
  if (cut.marker < 0 && !final_) return false;
  std::string_view rest = rtrim(held_);
  // The call object's own closing brace is not part of the arguments.
  if (rest.ends_with('}')) rest = rtrim(rest.substr(0, rest.size() - 1));
  emit_args(rest);
  held_.clear();
  end_call();
  if (cut.marker >= 0) buf_.erase(0, kCallClose.size());
  mode_ = Mode::Content;
  return cut.marker >= 0;
}

// ---- Qwen XML calls ----

bool OutputParser::step_xml_function() {
  // buf_ starts with "<function=".
  size_t gt = buf_.find('>');
  std::string_view name;
  if (gt != std::string::npos)
    name = trim(std::string_view(buf_).substr(kFunctionOpen.size(), gt - kFunctionOpen.size()));
  bool bad = gt == std::string::npos
                 ? buf_.find('\n') != std::string::npos || buf_.size() > 256 || final_
                 : name.empty() || name.find('\n') != std::string_view::npos;
  if (gt == std::string::npos && !bad) return false;
  if (bad) {
    if (wrapped_) {
      mode_ = Mode::RawCall;
    } else {  // a bare "<function=" that is no call: plain text
      consume(kFunctionOpen.size());
      fail_call_to_content();
      mode_ = Mode::Content;
    }
    return true;
  }
  std::string fn(name);
  consume(gt + 1);
  begin_call(std::move(fn));
  name_ = calls_.back().name;
  params_ = 0;
  mode_ = Mode::XmlBody;
  return true;
}

bool OutputParser::step_xml_body() {
  size_t ws = buf_.find_first_not_of(kWs);
  buf_.erase(0, ws == std::string::npos ? buf_.size() : ws);
  if (buf_.empty()) return false;
  bool param = false, close = false;
  bool p1 = detail::starts_or_prefix(buf_, kParamOpen, param);
  bool p2 = detail::starts_or_prefix(buf_, kFunctionClose, close);
  if (param) {
    buf_.erase(0, kParamOpen.size());
    mode_ = Mode::XmlParamName;
    return true;
  }
  if (close) {
    buf_.erase(0, kFunctionClose.size());
    emit_args(params_ ? "}" : "{}");
    end_call();
    mode_ = wrapped_ ? Mode::XmlAfter : Mode::Content;
    return true;
  }
  if ((p1 || p2) && !final_) return false;
  auto cut = find_cut(buf_, {kParamOpen, kFunctionClose}, final_);  // stray text: dropped
  buf_.erase(0, cut.pos);
  return cut.marker >= 0;
}

const std::string* OutputParser::xml_param_type() const {
  auto f = opt_.param_types.find(name_);
  if (f == opt_.param_types.end()) return nullptr;
  auto p = f->second.find(param_name_);
  return p == f->second.end() ? nullptr : &p->second;
}

bool OutputParser::step_xml_param_name() {
  size_t gt = buf_.find('>');
  if (gt == std::string::npos) return false;
  param_name_ = trim(std::string_view(buf_).substr(0, gt));
  buf_.erase(0, gt + 1);
  held_.clear();
  // A value the schema says is a string needs no look at its end: it streams (file contents
  // written by coding agents are the long values). Others are converted whole.
  const std::string* type = xml_param_type();
  param_streams_ = type && is_string_type(*type);
  param_value_begun_ = false;
  if (param_streams_) emit_args((params_++ ? "," : "{") + dump(json(param_name_)) + ":\"");
  mode_ = Mode::XmlParamValue;
  return true;
}

// A value ends at </parameter>, or (vLLM's convention, for a forgotten closing tag) at the next
// <parameter= or </function>. A value cut off by the end of the text is dropped.
bool OutputParser::step_xml_param_value() {
  auto cut = find_cut(buf_, {kParamClose, kParamOpen, kFunctionClose}, false);
  if (param_streams_) {
    std::string_view text = std::string_view(buf_).substr(0, cut.pos);
    size_t used = text.size();
    if (!param_value_begun_ && !text.empty()) {  // one leading newline is layout
      param_value_begun_ = true;
      if (text[0] == '\n') text.remove_prefix(1);
    }
    // One trailing newline is layout too: held until it is known not to be the last.
    if (text.ends_with('\n')) {
      text.remove_suffix(1);
      if (cut.marker < 0) --used;
    }
    std::string piece = dump(json(std::string(text)));  // JSON-escaped, with quotes
    piece = piece.substr(1, piece.size() - 2);
    if (cut.marker >= 0) piece += '"';
    emit_args(piece);
    buf_.erase(0, used);
  } else {
    held_.append(buf_, 0, cut.pos);
    buf_.erase(0, cut.pos);
  }
  if (cut.marker < 0) return false;
  if (cut.marker == 0) buf_.erase(0, kParamClose.size());
  if (!param_streams_) {
    std::string piece = params_++ ? "," : "{";
    piece += dump(json(param_name_));
    piece += ':';
    piece += dump(xml_param_value(held_, xml_param_type()));
    emit_args(piece);
    held_.clear();
  }
  mode_ = Mode::XmlBody;
  return true;
}

bool OutputParser::step_xml_after() {
  size_t ws = buf_.find_first_not_of(kWs);
  buf_.erase(0, ws == std::string::npos ? buf_.size() : ws);
  if (buf_.empty()) return false;
  bool close = false, another = false;
  bool p1 = detail::starts_or_prefix(buf_, kCallClose, close);
  bool p2 = detail::starts_or_prefix(buf_, kFunctionOpen, another);
  if (close) {
    buf_.erase(0, kCallClose.size());
    mode_ = Mode::Content;
    return true;
  }
  if (another) {  // several functions in one <tool_call> block
    collecting_raw_ = true;
    call_raw_.clear();
    mode_ = Mode::XmlFunction;
    return true;
  }
  if ((p1 || p2) && !final_) return false;
  auto cut = find_cut(buf_, {kCallClose, kFunctionOpen}, final_);  // stray text: dropped
  buf_.erase(0, cut.pos);
  return cut.marker >= 0;
}

}  // namespace basalt::server
