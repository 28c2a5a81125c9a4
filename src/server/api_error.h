// An error a client gets back as OpenAI's error object:
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}} with an HTTP status.
#pragma once

#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace braid::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string type = {})
      : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)),
        type_(type.empty() ? default_type(status) : std::move(type)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& type() const { return type_; }
  nlohmann::json body() const { return error_body(status_, what(), param_, type_); }

  static std::string default_type(int status);
  static nlohmann::json error_body(int status, const std::string& message,
                                   const std::string& param = {}, const std::string& type = {});

 private:
  int status_;
  std::string param_, type_;
};

}  // namespace braid::server
