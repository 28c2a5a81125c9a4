// A client of an OpenAI-compatible server for the serving benchmark: sends one streamed request
// at a time over its own connection (kept alive between requests) and times it with
// std::chrono::steady_clock. Not thread-safe: the load generator gives each worker its own.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "bench/suites/serve/request_result.h"

namespace httplib {
class Client;
}

namespace braid::bench::serve {

// "http://host:port/prefix" split into what httplib connects to and the path prefix that goes
// before every endpoint ("" or "/prefix", no trailing slash).
struct ServerAddress {
  std::string origin;  // "http://host:port"
  std::string prefix;
};
// Throws braid::Error (invalid_argument) for a URL without http:// or https:// and a host.
ServerAddress parse_base_url(const std::string& url);

struct ClientOptions {
  std::string base_url;
  std::string api_key;      // sent as "Authorization: Bearer KEY" when not empty
  double timeout_s = 3600;  // per request: the connect, any silence, and the whole request
};

class ServeClient {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ServeClient(const ClientOptions& opts);
  ~ServeClient();
  ServeClient(const ServeClient&) = delete;
  ServeClient& operator=(const ServeClient&) = delete;

  // POSTs `body` (JSON) to prefix + `path` and reads the Server-Sent Events of the response.
  // Never throws for what the server or the network did: a non-2xx status, a broken connection,
  // an error event or a timeout is a failed result with its reason. start_s and end_s are
  // seconds since `epoch`. `prompt_len` is the input length to report when the server sends no
  // usage.
  RequestResult stream(const std::string& path, const std::string& body, int prompt_len,
                       Clock::time_point epoch);

  // GET prefix + /v1/models: the id of the first model listed. Throws braid::Error (io) naming
  // what went wrong (no connection, a status, a body without models).
  std::string first_model_id();

 private:
  ClientOptions opts_;
  ServerAddress address_;
  std::unique_ptr<httplib::Client> http_;
};

}  // namespace braid::bench::serve
