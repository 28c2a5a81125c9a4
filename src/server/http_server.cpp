#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <csignal>
#include <ctime>
#include <random>

#include <fmt/format.h>

#include "server/api_error.h"
#include "server/client_connection.h"
#include "server/openai_response.h"

namespace braid::server {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kPoll{20};  // how often a waiting handler checks its client

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& param = {}, const std::string& type = {}) {
  send_json(res, status, ApiError::error_body(status, message, param, type));
}

nlohmann::ordered_json parse_body(const httplib::Request& req) {
  if (req.body.empty()) throw ApiError(400, "the request body is empty; send a JSON object");
  try {
    return nlohmann::ordered_json::parse(req.body);
  } catch (const json::parse_error& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
  }
}

// Runs a handler, turning every failure into an OpenAI error response.
template <class F>
void guarded(httplib::Response& res, F&& handler) {
  try {
    handler();
  } catch (const ApiError& e) {
    send_error(res, e.status(), e.what(), e.param(), e.type());
  } catch (const engine::EngineBusy& e) {
    send_error(res, 503, e.what());
  } catch (const Error& e) {
    const bool client = e.kind() == ErrorKind::invalid_argument || e.kind() == ErrorKind::shape ||
                        e.kind() == ErrorKind::dtype;
    send_error(res, client ? 400 : 500, e.what());
  } catch (const json::exception& e) {
    send_error(res, 400, std::string("bad request: ") + e.what());
  } catch (const std::exception& e) {
    send_error(res, 500, std::string("internal error: ") + e.what());
  }
}

// One client request in flight: its engine requests, their streams and the response being built.
struct Job {
  Job(ApiJob api_job, std::string id, std::string model, const tokenizer::Tokenizer* tok)
      : api(std::move(api_job)),
        builder(api, std::move(id), std::move(model), tok, static_cast<int64_t>(std::time(nullptr))),
        done(api.requests.size(), false) {}
  ApiJob api;
  ResponseBuilder builder;
  std::vector<std::string> ids;
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  std::vector<bool> done;
  std::string error;
  bool all_done() const {
    for (bool d : done)
      if (!d) return false;
    return true;
  }
};

// httplib listens with a backlog of 5 (fixed in Debian's build): a burst of clients connecting at
// once overflows it and loses connections. Listening again on the bound socket widens it.
class Listener : public httplib::Server {
 public:
  void widen_backlog() { ::listen(svr_sock_, SOMAXCONN); }
};

}  // namespace

struct HttpServer::Impl {
  Impl(engine::EngineLoop& l, ServerConfig c) : loop(l), config(std::move(c)) {}

  engine::EngineLoop& loop;
  ServerConfig config;
  ApiContext api;
  Listener http;
  std::atomic<uint64_t> counter{0};
  uint64_t id_base = std::random_device{}();

  std::string new_id(const char* prefix) {
    return fmt::format("{}-{:08x}{:08x}", prefix, static_cast<uint32_t>(id_base), counter++);
  }

  void abort_all(const Job& job) {
    for (const std::string& id : job.ids) loop.abort(id);
  }

  // Submits every engine request of the job (all or none).
  void submit(Job& job) {
    try {
      for (size_t p = 0; p < job.api.requests.size(); ++p) {
        engine::Request r = job.api.requests[p];
        r.id = job.builder.id() + "-" + std::to_string(p);
        job.streams.push_back(loop.submit(r));
        job.ids.push_back(r.id);
      }
    } catch (...) {
      abort_all(job);
      throw;
    }
  }

  // Takes what the engine produced for the job within about one poll interval; returns the
  // chunks to stream.
  std::vector<json> pump(Job& job) {
    std::vector<json> chunks;
    const auto slice = kPoll / std::max<size_t>(1, job.streams.size());
    for (size_t p = 0; p < job.streams.size(); ++p) {
      if (job.done[p]) continue;
      bool done = false;
      std::string error;
      for (engine::SequenceOutput& o : job.streams[p]->wait(
               std::chrono::duration_cast<std::chrono::milliseconds>(slice), done, error))
        for (json& c : job.builder.add(p, o)) chunks.push_back(std::move(c));
      if (!error.empty() && job.error.empty()) job.error = error;
      job.done[p] = done;
    }
    return chunks;
  }

  void generate(const httplib::Request& req, httplib::Response& res, ApiKind kind) {
    const nlohmann::ordered_json body = parse_body(req);
    ApiJob parsed = kind == ApiKind::chat ? parse_chat_request(body, api)
                                          : parse_completion_request(body, api);
    auto job = std::make_shared<Job>(std::move(parsed), new_id(kind == ApiKind::chat ? "chatcmpl" : "cmpl"),
                                     config.model_names.at(0), api.tokenizer);
    submit(*job);
    auto connection = std::make_shared<ClientConnection>(req);

    if (!job->api.stream) {
      while (!job->all_done()) {
        pump(*job);
        if (!job->error.empty()) {
          abort_all(*job);
          throw ApiError(500, "generation failed: " + job->error);
        }
        if (connection->gone()) {
          abort_all(*job);  // nobody will read the answer
          return;
        }
      }
      send_json(res, 200, job->builder.final_response());
      return;
    }

    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job, connection](size_t, httplib::DataSink& sink) {
          auto event = [&](const json& j) {
            const std::string s = "data: " + j.dump() + "\n\n";
            return sink.write(s.data(), s.size());
          };
          bool ok = true;
          for (const json& c : pump(*job)) ok = ok && event(c);
          if (!ok || connection->gone()) {
            abort_all(*job);
            return false;
          }
          if (!job->error.empty()) {
            abort_all(*job);
            event(ApiError::error_body(500, "generation failed: " + job->error));
            sink.write("data: [DONE]\n\n", 14);
            sink.done();
          } else if (job->all_done()) {
            if (job->api.include_usage) event(job->builder.usage_chunk());
            sink.write("data: [DONE]\n\n", 14);
            sink.done();
          }
          return true;
        },
        [this, job](bool success) {
          if (!success) abort_all(*job);
        });
  }

  void tokenize(const httplib::Request& req, httplib::Response& res) {
    const nlohmann::ordered_json body = parse_body(req);
    if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
    check_model(body, api);
    std::vector<int32_t> ids;
    if (body.contains("messages")) {
      nlohmann::ordered_json chat = body;
      chat.erase("max_tokens");
      chat["max_tokens"] = 1;
      ids = parse_chat_request(chat, api).requests.at(0).prompt;
    } else {
      if (!body.contains("prompt") || !body["prompt"].is_string())
        throw ApiError(400, "'prompt' (a string) or 'messages' is required", "prompt");
      if (!api.tokenizer) throw ApiError(400, "the model folder has no tokenizer.json");
      const bool add_special = body.value("add_special_tokens", true);
      try {
        ids = api.tokenizer->encode(body["prompt"].get<std::string>(), add_special);
      } catch (const Error& e) {
        throw ApiError(400, e.what(), "prompt");
      }
    }
    send_json(res, 200, {{"count", ids.size()}, {"max_model_len", api.max_model_len}, {"tokens", ids}});
  }

  void detokenize(const httplib::Request& req, httplib::Response& res) {
    const nlohmann::ordered_json body = parse_body(req);
    if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
      throw ApiError(400, "'tokens' (a list of token ids) is required", "tokens");
    check_model(body, api);
    if (!api.tokenizer) throw ApiError(400, "the model folder has no tokenizer.json");
    std::vector<int32_t> ids;
    for (const auto& t : body["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= api.vocab_size)
        throw ApiError(400, "token " + t.dump() + " is not an id in [0, " +
                                std::to_string(api.vocab_size) + ")", "tokens");
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    send_json(res, 200, {{"prompt", api.tokenizer->decode(ids, false)}});
  }

  void routes() {
    auto post = [this](const char* path, auto fn) {
      http.Post(path, [this, fn](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] { (this->*fn)(req, res); });
      });
    };
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] { generate(req, res, ApiKind::completion); });
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      guarded(res, [&] { generate(req, res, ApiKind::chat); });
    });
    post("/tokenize", &Impl::tokenize);
    post("/detokenize", &Impl::detokenize);
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const std::string fatal = loop.fatal_error();
      if (fatal.empty()) res.status = 200;
      else send_error(res, 503, "the engine stopped: " + fatal);
    });
    http.Get("/version", [](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"version", "braidinfer 0.1.0"}});
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json data = json::array();
      data.push_back({{"id", config.model_names.at(0)},
                      {"object", "model"},
                      {"created", static_cast<int64_t>(std::time(nullptr))},
                      {"owned_by", "braidinfer"},
                      {"max_model_len", api.max_model_len}});
      send_json(res, 200, {{"object", "list"}, {"data", data}});
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(engine::prometheus_text(loop.engine().metrics().snapshot(),
                                              config.model_names.at(0)),
                      "text/plain; version=0.0.4");
    });
    // Unknown paths, bodies over the limit and other errors httplib raises itself.
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string message = fmt::format("{} {}: ", req.method, req.path);
      switch (res.status) {
        case 404: message += "no such endpoint"; break;
        case 413: message += "the request body is over the size limit"; break;
        case 405: message += "method not allowed"; break;
        default: message += "HTTP status " + std::to_string(res.status);
      }
      send_error(res, res.status, message);
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      send_error(res, 500, "internal error");
    });
  }
};

HttpServer::HttpServer(engine::EngineLoop& loop, ServerConfig config)
    : impl_(std::make_unique<Impl>(loop, std::move(config))) {
  // A client that disconnects makes the next write fail; it must not kill the process.
  std::signal(SIGPIPE, SIG_IGN);
  Impl& s = *impl_;
  if (s.config.model_names.empty()) throw Error(ErrorKind::invalid_argument, "server: no model name");
  const engine::LLMEngine& eng = loop.engine();
  s.api.tokenizer = eng.tokenizer();
  s.api.render_chat = s.config.render_chat;
  s.api.max_model_len = eng.max_model_len();
  s.api.vocab_size = eng.model_config().vocab_size;
  s.api.model_names = s.config.model_names;
  const int threads = s.config.threads > 0 ? s.config.threads : std::min(loop.capacity(), 1024) + 16;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.http.set_payload_max_length(s.config.max_request_bytes);
  s.http.set_read_timeout(60);
  s.http.set_write_timeout(60);
  s.http.set_tcp_nodelay(true);
  // Clients keep one connection for many requests (benchmarks, SDKs): httplib's default closes it
  // after 5.
  s.http.set_keep_alive_max_count(100000);
  s.http.set_keep_alive_timeout(30);
  s.routes();
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  Impl& s = *impl_;
  int port = s.config.port;
  if (port == 0) {
    port = s.http.bind_to_any_port(s.config.host);
    if (port < 0) port = 0;
  } else if (!s.http.bind_to_port(s.config.host, port)) {
    port = 0;
  }
  if (port <= 0)
    throw Error(ErrorKind::io, "server: cannot listen on " + s.config.host + ":" +
                                   std::to_string(s.config.port) + " (in use, or not an address here)");
  s.http.widen_backlog();
  return port;
}

void HttpServer::serve() { impl_->http.listen_after_bind(); }

void HttpServer::stop() {
  if (impl_->http.is_running()) impl_->http.stop();
}

}  // namespace braid::server
