// A real server on a loopback port for tests: the serving engine on the CPU, the HTTP server in a
// thread, and small helpers to talk to it with cpp-httplib's client and read SSE streams.
#pragma once

#include <httplib.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine_loop.h"
#include "server/chat_renderer.h"
#include "server/http_server.h"

namespace braid::test {

inline const std::string kFortunesModel = std::string(BRAID_SOURCE_DIR) + "/models/tiny-fortunes";

class TestServer {
 public:
  explicit TestServer(engine::EngineConfig cfg = {}, int max_waiting = 1024,
                      server::ServerConfig sc = {}, const std::string& model = kFortunesModel) {
    const int max_seqs = cfg.max_num_seqs;
    loop_ = std::make_unique<engine::EngineLoop>(std::make_unique<engine::LLMEngine>(model, cfg),
                                                 max_seqs, max_waiting);
    sc.host = "127.0.0.1";
    sc.port = 0;
    if (sc.model_names.empty()) sc.model_names = {"tiny"};
    if (!sc.render_chat) sc.render_chat = server::chat_renderer(model);
    http_ = std::make_unique<server::HttpServer>(*loop_, sc);
    port_ = http_->bind();
    thread_ = std::thread([this] { http_->serve(); });
    for (int i = 0; i < 200; ++i) {  // up within 2 s
      if (auto r = client().Get("/health"); r && r->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~TestServer() {
    http_->stop();
    thread_.join();
  }
  int port() const { return port_; }
  httplib::Client client(int read_timeout_s = 60) const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(read_timeout_s, 0);
    c.set_connection_timeout(5, 0);
    return c;
  }
  engine::EngineLoop& loop() { return *loop_; }

  // POSTs JSON; returns status and parsed body (null when not JSON).
  std::pair<int, nlohmann::json> post(const std::string& path, const std::string& body) const {
    auto c = client();
    auto r = c.Post(path, body, "application/json");
    if (!r) return {-1, nullptr};
    return {r->status, nlohmann::json::parse(r->body, nullptr, /*allow_exceptions=*/false)};
  }
  std::pair<int, nlohmann::json> post(const std::string& path, const nlohmann::json& body) const {
    return post(path, body.dump());
  }

  // A metric's value from /metrics (the first sample whose name starts with `name`).
  double metric(const std::string& name) const {
    auto c = client();
    auto r = c.Get("/metrics");
    if (!r) return -1;
    const std::string key = "braidinfer:" + name + "{";
    const size_t at = r->body.find("\n" + key);
    if (at == std::string::npos) return -1;
    const size_t space = r->body.find("} ", at);
    return std::stod(r->body.substr(space + 2, r->body.find('\n', space) - space - 2));
  }

  // Waits until no sequence runs or waits and no page is held (aborts are asynchronous).
  bool drained(std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) const {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (metric("kv_cache_pages_used") == 0 && metric("num_requests_running") == 0 &&
          metric("num_requests_waiting") == 0 && loop_->in_flight() == 0)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

 private:
  std::unique_ptr<engine::EngineLoop> loop_;
  std::unique_ptr<server::HttpServer> http_;
  std::thread thread_;
  int port_ = 0;
};

// The `data:` payloads of an SSE body, in order ("[DONE]" included as a string).
inline std::vector<std::string> sse_data(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < body.size()) {
    size_t end = body.find('\n', at);
    if (end == std::string::npos) end = body.size();
    const std::string line = body.substr(at, end - at);
    if (line.rfind("data: ", 0) == 0) out.push_back(line.substr(6));
    at = end + 1;
  }
  return out;
}

}  // namespace braid::test
