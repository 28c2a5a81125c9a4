#include "server/api_error.h"

namespace braid::server {

std::string ApiError::default_type(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 405: return "invalid_request_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    case 503: return "server_overloaded_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

nlohmann::json ApiError::error_body(int status, const std::string& message,
                                    const std::string& param, const std::string& type) {
  return {{"error",
           {{"message", message},
            {"type", type.empty() ? default_type(status) : type},
            {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
            {"code", status}}}};
}

}  // namespace braid::server
