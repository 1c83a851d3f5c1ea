#include "server/request_parse.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <random>

namespace basalt::server {
namespace {

[[noreturn]] void bad(const std::string& param, const std::string& msg) {
  throw ApiError(400, msg, param, "invalid_request_error");
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_float:
      return "a float";
    default:
      return v.is_number() ? "an integer" : "null";
  }
}

[[noreturn]] void wrong_type(const char* key, const char* want, const json& v) {
  bad(key, fmt::format("'{}' must be {}, got {}", key, want, type_name(v)));
}

const json* field(const json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number_in(const json& o, const char* key, double lo, double hi) {
  auto v = get_number(o, key);
  if (v && !(*v >= lo && *v <= hi))
    bad(key, fmt::format("'{}' must be between {} and {}, got {}", key, lo, hi, *v));
  return v;
}

}  // namespace

std::optional<size_t> utf8_invalid_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::nullopt;
}

json parse_body(std::string_view body) {
  if (auto at = utf8_invalid_at(body))
    throw ApiError(400, fmt::format("the request body is not valid UTF-8 (byte {})", *at), "",
                   "invalid_utf8");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    throw ApiError(400,
                   fmt::format("the request body is not valid JSON (byte {}): {}",
                               e.byte > 0 ? e.byte - 1 : 0, e.what()),
                   "", "invalid_json");
  } catch (const json::exception& e) {  // out_of_range 406: a number beyond double (1e999)
    throw ApiError(400, fmt::format("the request body is not valid JSON: {}", e.what()), "",
                   "invalid_json");
  }
  if (!j.is_object())
    throw ApiError(400, fmt::format("the request body must be a JSON object, got {}", type_name(j)),
                   "", "invalid_json");
  return j;
}

std::optional<double> get_number(const json& o, const char* key) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(key, "a number", *v);
  return v->get<double>();
}

std::optional<int64_t> get_int(const json& o, const char* key) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(INT64_MAX))
      bad(key, fmt::format("'{}' is too large", key));
    return v->get<int64_t>();
  }
  // 16.0 is accepted as 16 (JavaScript clients cannot tell them apart); 16.5 is not.
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return int64_t(d);
  }
  wrong_type(key, "an integer", *v);
}

std::optional<bool> get_bool(const json& o, const char* key) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(key, "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::string> get_string(const json& o, const char* key) {
  const json* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(key, "a string", *v);
  return v->get<std::string>();
}

const json* get_array(const json& o, const char* key) {
  const json* v = field(o, key);
  if (v && !v->is_array()) wrong_type(key, "an array", *v);
  return v;
}

const json* get_object(const json& o, const char* key) {
  const json* v = field(o, key);
  if (v && !v->is_object()) wrong_type(key, "an object", *v);
  return v;
}

GenParams parse_gen_params(const json& body, Api api, const ParseLimits& lim) {
  GenParams g;

  // Token limit, in the API's spelling. Over the context → 400; a prompt that leaves less room
  // than asked for simply ends with finish_reason "length" (as OpenAI-compatible servers do).
  const char* max_key = api == Api::Responses ? "max_output_tokens" : "max_tokens";
  std::optional<int64_t> max_tokens = get_int(body, max_key);
  if (api == Api::Chat) {
    if (auto m = get_int(body, "max_completion_tokens")) {
      max_tokens = m;
      max_key = "max_completion_tokens";
    }
  }
  if (api == Api::Messages && !max_tokens) bad("max_tokens", "'max_tokens' is required");
  if (max_tokens) {
    if (*max_tokens < 1)
      bad(max_key, fmt::format("'{}' must be at least 1, got {}", max_key, *max_tokens));
    if (*max_tokens > lim.max_context)
      bad(max_key, fmt::format("'{}' is {}, more than the context of {} tokens", max_key,
                               *max_tokens, lim.max_context));
    g.max_tokens = *max_tokens;
  } else if (api == Api::Completions) {
    g.max_tokens = 16;  // OpenAI's default for the legacy completions endpoint
  }

  if (api == Api::Chat || api == Api::Completions) {
    if (auto n = get_int(body, "n")) {
      if (*n > 1) bad("n", "n > 1 is not supported");
      if (*n < 1) bad("n", fmt::format("'n' must be 1, got {}", *n));
    }
    if (auto bo = get_int(body, "best_of"); bo && *bo > 1)
      bad("best_of", "best_of > 1 is not supported");
  }

  // Sampling: the checkpoint's generation_config.json supplies defaults (as vLLM does), the
  // request overrides them; without either, OpenAI's defaults (temperature 1, top-p 1).
  SamplingParams& s = g.sampling;
  const json& gc = lim.generation_config;
  auto gnum = [&](const char* k, double d) {
    auto it = gc.find(k);
    return it != gc.end() && it->is_number() ? it->get<double>() : d;
  };
  s.temperature = float(gnum("temperature", 1.0));
  if (gc.is_object() && gc.value("do_sample", true) == false) s.temperature = 0.0f;
  s.top_k = int(gnum("top_k", 0));
  s.top_p = float(gnum("top_p", 1.0));
  s.min_p = float(gnum("min_p", 0.0));
  s.repetition_penalty = float(gnum("repetition_penalty", 1.0));
  if (auto v = number_in(body, "temperature", 0.0, 2.0)) s.temperature = float(*v);
  if (auto v = get_number(body, "top_p")) {
    if (!(*v > 0.0 && *v <= 1.0))
      bad("top_p", fmt::format("'top_p' must be in (0, 1], got {}", *v));
    s.top_p = float(*v);
  }
  if (auto v = get_int(body, "top_k")) {
    if (*v < -1 || *v > (1 << 30))
      bad("top_k", fmt::format("'top_k' must be ≥ 0 (or -1 = off), got {}", *v));
    s.top_k = *v < 0 ? 0 : int(*v);
  }
  if (auto v = number_in(body, "min_p", 0.0, 1.0)) s.min_p = float(*v);
  if (auto v = number_in(body, "presence_penalty", -2.0, 2.0)) s.presence_penalty = float(*v);
  if (auto v = number_in(body, "frequency_penalty", -2.0, 2.0)) s.frequency_penalty = float(*v);
  if (auto v = get_number(body, "repetition_penalty")) {
    if (!(*v > 0.0 && *v <= 10.0))
      bad("repetition_penalty", fmt::format("'repetition_penalty' must be in (0, 10], got {}", *v));
    s.repetition_penalty = float(*v);
  }
  if (auto v = get_int(body, "seed"))
    s.seed = uint64_t(*v);
  else
    s.seed = (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();

  // Stop strings: "stop" (string or list) for OpenAI, "stop_sequences" (list) for Anthropic.
  const char* stop_key = api == Api::Messages ? "stop_sequences" : "stop";
  if (api != Api::Responses) {
    if (auto it = body.find(stop_key); it != body.end() && !it->is_null()) {
      if (it->is_string()) {
        g.stop.push_back(it->get<std::string>());
      } else if (it->is_array()) {
        for (const json& e : *it) {
          if (!e.is_string()) bad(stop_key, fmt::format("'{}' must hold strings", stop_key));
          g.stop.push_back(e.get<std::string>());
        }
      } else {
        wrong_type(stop_key, "a string or an array of strings", *it);
      }
      if (g.stop.size() > 16) bad(stop_key, fmt::format("at most 16 '{}' strings", stop_key));
      std::erase_if(g.stop, [](const std::string& x) { return x.empty(); });
    }
  }

  if (api == Api::Chat) {
    g.logprobs = get_bool(body, "logprobs").value_or(false);
    if (auto t = get_int(body, "top_logprobs")) {
      if (*t < 0 || *t > 20)
        bad("top_logprobs", fmt::format("'top_logprobs' must be between 0 and 20, got {}", *t));
      if (*t > 0 && !g.logprobs) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
      g.top_logprobs = int(*t);
    }
  } else if (api == Api::Completions) {
    if (auto t = get_int(body, "logprobs")) {
      if (*t < 0 || *t > 20)
        bad("logprobs", fmt::format("'logprobs' must be between 0 and 20, got {}", *t));
      g.logprobs = true;
      g.top_logprobs = int(*t);
    }
  }

  g.stream = get_bool(body, "stream").value_or(false);
  if (const json* so = get_object(body, "stream_options"))
    g.include_usage = get_bool(*so, "include_usage").value_or(false);

  if (auto f = get_string(body, "basalt_forced_output")) g.forced_output = *f;
  g.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  return g;
}

std::string content_text(const json& content, const std::string& where) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    bad(where, fmt::format("'{}' must be a string or an array of content parts", where));
  std::string out;
  for (const json& part : content) {
    if (part.is_string()) {  // some clients send bare strings
      out += part.get<std::string>();
      continue;
    }
    if (!part.is_object()) bad(where, fmt::format("'{}' parts must be objects", where));
    const std::string type = part.value("type", "text");
    if (type != "text" && type != "input_text" && type != "output_text")
      bad(where, fmt::format("content part type '{}' is not supported (text only)", type));
    auto t = part.find("text");
    if (t == part.end() || !t->is_string())
      bad(where, fmt::format("a '{}' part of '{}' needs a string 'text'", type, where));
    out += t->get<std::string>();
  }
  return out;
}

}  // namespace basalt::server
