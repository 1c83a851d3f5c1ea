// ApiError: a request the server refuses, with its HTTP status; rendered in the error shape of
// the API that was called (OpenAI or Anthropic). Thrown by request parsing and the adapters,
// caught once in http_server.cpp, so a bad request never reaches the engine.
#pragma once
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace basalt::server {

enum class ApiFlavor { OpenAI, Anthropic };

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string code = "")
      : std::runtime_error(message),
        status(status),
        param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string param, code;
};

// OpenAI: {"error": {"message", "type", "param", "code"}};
// Anthropic: {"type": "error", "error": {"type", "message"}}. Types follow the status.
nlohmann::ordered_json error_body(ApiFlavor flavor, int status, const std::string& message,
                                  const std::string& param = "", const std::string& code = "");

}  // namespace basalt::server
