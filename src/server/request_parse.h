// Shared request parsing and validation for the four generation APIs: the JSON body (UTF-8
// checked), typed field readers that name the offending field, and the generation parameters
// (token limits, sampling, stop strings, logprobs, streaming) in each API's spelling.
// Everything here throws ApiError(400) on bad input; nothing reaches the engine unchecked.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"
#include "server/api_error.h"

namespace basalt::server {

using json = nlohmann::ordered_json;

enum class Api { Chat, Completions, Responses, Messages };

// Offset of the first byte that is not part of well-formed UTF-8 (no overlongs, no
// surrogates, nothing above U+10FFFF); nullopt when the whole text is valid.
std::optional<size_t> utf8_invalid_at(std::string_view s);

// The request body as a JSON object: 400 for invalid UTF-8, malformed JSON or a non-object.
json parse_body(std::string_view body);

// Typed readers: absent or null → nullopt; present with the wrong type → 400 naming `key`.
std::optional<double> get_number(const json& o, const char* key);
std::optional<int64_t> get_int(const json& o, const char* key);
std::optional<bool> get_bool(const json& o, const char* key);
std::optional<std::string> get_string(const json& o, const char* key);
const json* get_array(const json& o, const char* key);   // nullptr when absent or null
const json* get_object(const json& o, const char* key);  // nullptr when absent or null

struct GenParams {
  int64_t max_tokens = 0;  // 0: as many as the context holds
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings, never emitted
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;
  std::optional<std::string> forced_output;  // test hook "basalt_forced_output"
  // vLLM's extension (benchmarks): go on past EOS and the template's end-of-turn tokens, to the
  // token limit.
  bool ignore_eos = false;
};

struct ParseLimits {
  int64_t max_context = 0;
  json generation_config = json::object();  // sampling defaults of the checkpoint
};

// Reads and validates the generation parameters of `api` from `body`.
GenParams parse_gen_params(const json& body, Api api, const ParseLimits& lim);

// Text of an OpenAI/Anthropic content value: a string, or an array of text parts
// ({"type": "text" | "input_text" | "output_text", "text": ...}); other parts → 400.
std::string content_text(const json& content, const std::string& where);

}  // namespace basalt::server
