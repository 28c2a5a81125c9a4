// The OpenAI-compatible HTTP server over an EngineLoop:
//   POST /v1/completions, /v1/chat/completions  (whole, or streamed as Server-Sent Events)
//   GET  /v1/models, /health, /metrics, /version
//   POST /tokenize, /detokenize
// Bad requests get a 4xx with an OpenAI error object and the server goes on; a full engine
// answers 503; a client that disconnects has its sequences aborted at once.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_loop.h"
#include "server/openai_request.h"

namespace httplib {
class Server;
}

namespace braid::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                                 // 0: any free port (bind() tells which)
  std::vector<std::string> model_names;            // the first is the one /v1/models reports
  size_t max_request_bytes = size_t{32} << 20;     // larger bodies: 413
  int threads = 0;                                 // 0: enough for every request the engine holds
  ApiContext::Renderer render_chat;                // empty: no chat template
};

class HttpServer {
 public:
  HttpServer(engine::EngineLoop& loop, ServerConfig config);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int bind();     // binds host:port and returns the port; throws braid::Error if it cannot
  void serve();   // answers requests until stop()
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace braid::server
