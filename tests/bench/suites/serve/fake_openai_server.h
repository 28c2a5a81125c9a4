// A scripted OpenAI-compatible server on 127.0.0.1 (an ephemeral port) for the serving
// benchmark's end-to-end tests: streams completions or chat chunks with known delays, or fails
// in a chosen way, and records how many requests were in flight at once.
#pragma once

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace braid::test {

struct FakeScript {
  enum class Kind {
    stream,       // the whole stream: content chunks, usage, [DONE]
    status_500,   // an error status with an OpenAI error body
    drop,         // two content chunks, then the connection closes mid-body
    error_event,  // one content chunk, then a data: {"error": ...} event
    stall,        // nothing until the server stops (the client's timeout must end it)
  };
  Kind kind = Kind::stream;
  int first_ms = 50;  // delay before the first content chunk
  int gap_ms = 10;    // delay between content chunks
  int tokens = 5;     // content chunks, one token each; 0: max_tokens of the request
  bool usage = true;  // the usage chunk before [DONE]
  bool crlf = false;  // "\r\n" line ends
};

class FakeOpenAiServer {
 public:
  // `script` picks each request's behaviour from its arrival order at the server (0, 1, ...).
  explicit FakeOpenAiServer(std::function<FakeScript(int)> script) : script_(std::move(script)) {
    // More handler threads than any test has requests in flight, so the server never queues.
    server_.new_task_queue = [] { return new httplib::ThreadPool(64); };
    server_.set_tcp_nodelay(true);  // each chunk leaves when written, as real servers send them
    server_.set_keep_alive_max_count(1000);  // one connection per client worker for the whole test
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object":"list","data":[{"id":"fake-model","object":"model"}]})",
                      "application/json");
    });
    auto handler = [this](const httplib::Request& req, httplib::Response& res) {
      handle(req, res);
    };
    server_.Post("/v1/completions", handler);
    server_.Post("/v1/chat/completions", handler);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() only stops a server that is already listening (httplib 0.11), so a test that ends
    // at once would otherwise leave the accept loop running forever.
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  ~FakeOpenAiServer() { stop(); }

  void stop() {
    stopping_ = true;
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  std::string base_url() const { return fmt::format("http://127.0.0.1:{}", port_); }
  int port() const { return port_; }
  int requests() const { return requests_; }
  int peak_in_flight() const { return peak_; }
  std::vector<nlohmann::json> bodies() const {
    std::lock_guard lock(mutex_);
    return bodies_;
  }

 private:
  void handle(const httplib::Request& req, httplib::Response& res) {
    const int index = requests_++;
    const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    {
      std::lock_guard lock(mutex_);
      bodies_.push_back(body);
    }
    FakeScript s = script_(index);
    if (s.kind == FakeScript::Kind::status_500) {
      res.status = 500;
      res.set_content(R"({"error":{"message":"fake overload","type":"server_error"}})",
                      "application/json");
      return;
    }
    const bool chat = req.path == "/v1/chat/completions";
    if (s.tokens == 0) s.tokens = body.value("max_tokens", 1);
    int prompt_tokens = 0;
    if (body.contains("prompt") && body["prompt"].is_array())
      prompt_tokens = static_cast<int>(body["prompt"].size());
    const int now_in = ++in_flight_;
    {
      std::lock_guard lock(mutex_);
      peak_ = std::max(peak_, now_in);
    }
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, s, chat, prompt_tokens](size_t, httplib::DataSink& sink) {
          const char* nl = s.crlf ? "\r\n" : "\n";
          auto send = [&](const std::string& data) {
            const std::string e = fmt::format("data: {}{}{}", data, nl, nl);
            return sink.write(e.data(), e.size());
          };
          auto chunk = [&](int k) {
            nlohmann::json c = {{"id", "cmpl-fake"}, {"model", "fake-model"}};
            if (chat)
              c["choices"] = {{{"index", 0}, {"delta", {{"content", fmt::format(" t{}", k)}}}}};
            else
              c["choices"] = {{{"index", 0}, {"text", fmt::format(" t{}", k)}}};
            return send(c.dump());
          };
          auto sleep_ms = [&](int ms) {
            std::this_thread::sleep_for(std::chrono::milliseconds(ms));
          };
          // A chat stream opens with the role, at once: it carries no generated text.
          if (chat) send(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})");
          // The request leaves the in-flight count before its last bytes go out, so the client
          // cannot have seen its end (and sent another request) while it still counts.
          auto leave = [&] { --in_flight_; };
          if (s.kind == FakeScript::Kind::stall) {
            while (!stopping_) sleep_ms(5);
            leave();
            return false;
          }
          sleep_ms(s.first_ms);
          for (int k = 0; k < s.tokens; ++k) {
            if (k > 0) sleep_ms(s.gap_ms);
            if (!chunk(k)) {
              leave();
              return false;
            }
            if (s.kind == FakeScript::Kind::drop && k == 1) {
              leave();
              return false;  // closes the connection mid-body
            }
            if (s.kind == FakeScript::Kind::error_event) {
              send(R"({"error":{"message":"fake engine failure","code":500}})");
              leave();
              sink.done();
              return true;
            }
          }
          if (s.usage)
            send(fmt::format(R"({{"choices":[],"usage":{{"prompt_tokens":{},)"
                             R"("completion_tokens":{},"total_tokens":{}}}}})",
                             prompt_tokens, s.tokens, prompt_tokens + s.tokens));
          leave();
          send("[DONE]");
          sink.done();
          return true;
        });
  }

  std::function<FakeScript(int)> script_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<int> requests_{0};
  std::atomic<int> in_flight_{0};
  mutable std::mutex mutex_;
  int peak_ = 0;
  std::vector<nlohmann::json> bodies_;
};

}  // namespace braid::test
