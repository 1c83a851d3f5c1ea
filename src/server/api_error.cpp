#include "server/api_error.h"

namespace basalt::server {
namespace {

const char* openai_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "invalid_request_error";
    case 429:
      return "rate_limit_error";
    default:
      return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

const char* anthropic_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

}  // namespace

nlohmann::ordered_json error_body(ApiFlavor flavor, int status, const std::string& message,
                                  const std::string& param, const std::string& code) {
  if (flavor == ApiFlavor::Anthropic)
    return {{"type", "error"}, {"error", {{"type", anthropic_type(status)}, {"message", message}}}};
  nlohmann::ordered_json e = {
      {"message", message},
      {"type", openai_type(status)},
      {"param", param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(param)},
      {"code", code.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(code)}};
  return {{"error", e}};
}

}  // namespace basalt::server
