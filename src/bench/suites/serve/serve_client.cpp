#include "bench/suites/serve/serve_client.h"

#include <httplib.h>

#include <cmath>

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include "bench/suites/serve/completion_stream.h"
#include "braid/error.h"

namespace braid::bench::serve {

namespace {

// The part of an error body worth quoting: a failed request's reason, not a whole HTML page.
constexpr size_t kErrorBodyBytes = 2048;

double seconds_between(ServeClient::Clock::time_point a, ServeClient::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string transport_error(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection: return "could not connect to the server";
    case httplib::Error::ConnectionTimeout: return "connecting to the server timed out";
    case httplib::Error::Read: return "the connection broke while reading the response";
    case httplib::Error::Write: return "the connection broke while sending the request";
    case httplib::Error::SSLConnection: return "the TLS handshake failed";
    case httplib::Error::SSLServerVerification: return "the server's TLS certificate was refused";
    default: return "HTTP client error: " + httplib::to_string(e);
  }
}

// "HTTP 500: <the error's message>" from a JSON error body, else from the body's first bytes.
std::string status_error(int status, const std::string& body) {
  std::string what = body;
  const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error")) {
    const auto& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string())
      what = e["message"].get<std::string>();
    else if (e.is_string())
      what = e.get<std::string>();
  }
  while (!what.empty() && (what.back() == '\n' || what.back() == '\r')) what.pop_back();
  return what.empty() ? fmt::format("HTTP {}", status) : fmt::format("HTTP {}: {}", status, what);
}

}  // namespace

ServerAddress parse_base_url(const std::string& url) {
  const size_t scheme_end = url.find("://");
  const std::string scheme = scheme_end == std::string::npos ? "" : url.substr(0, scheme_end);
  const size_t host_begin = scheme_end == std::string::npos ? 0 : scheme_end + 3;
  const size_t path_begin = url.find('/', host_begin);
  if ((scheme != "http" && scheme != "https") || path_begin == host_begin ||
      host_begin >= url.size())
    throw Error(ErrorKind::invalid_argument,
                "serve client: base URL: expected http://HOST[:PORT][/PREFIX] or https://..., "
                "got '" + url + "'");
  ServerAddress a;
  a.origin = url.substr(0, path_begin);
  if (path_begin != std::string::npos) {
    a.prefix = url.substr(path_begin);
    while (!a.prefix.empty() && a.prefix.back() == '/') a.prefix.pop_back();
  }
  return a;
}

ServeClient::ServeClient(const ClientOptions& opts)
    : opts_(opts), address_(parse_base_url(opts.base_url)) {
  if (!(opts.timeout_s > 0))
    throw Error(ErrorKind::invalid_argument,
                fmt::format("serve client: timeout: expected seconds > 0, got {}", opts.timeout_s));
  http_ = std::make_unique<httplib::Client>(address_.origin);
  if (!http_->is_valid())
    throw Error(ErrorKind::invalid_argument,
                "serve client: base URL '" + opts.base_url + "' cannot be used (https needs a "
                "cpp-httplib built with OpenSSL)");
  const auto timeout = std::chrono::duration<double>(opts.timeout_s);
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(timeout);
  http_->set_connection_timeout(us);
  http_->set_read_timeout(us);
  http_->set_keep_alive(true);
  // A request goes out in two writes (headers, body): with Nagle's algorithm the second waits for
  // the server's delayed ACK, 40 ms on Linux, on every request of a kept-alive connection.
  http_->set_tcp_nodelay(true);
  if (!opts.api_key.empty()) http_->set_bearer_token_auth(opts.api_key);
}

ServeClient::~ServeClient() = default;

RequestResult ServeClient::stream(const std::string& path, const std::string& body,
                                  int prompt_len, Clock::time_point epoch) {
  httplib::Request req;
  req.method = "POST";
  req.path = address_.prefix + path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");

  int status = 0;
  std::string error_body;
  std::string timeout_reason;
  const Clock::time_point sent = Clock::now();
  CompletionStream stream(sent);
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;  // read the body either way: a failed status's body says why
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const Clock::time_point now = Clock::now();
    if (seconds_between(sent, now) > opts_.timeout_s) {
      timeout_reason = fmt::format("timed out after {:g} s", opts_.timeout_s);
      return false;
    }
    if (status < 200 || status >= 300) {
      error_body.append(data, std::min(n, kErrorBodyBytes - std::min(kErrorBodyBytes,
                                                                      error_body.size())));
      return true;
    }
    return stream.feed(std::string_view(data, n), now);
  };

  const httplib::Result res = http_->send(req);
  const Clock::time_point end = Clock::now();

  RequestResult r;
  if (!timeout_reason.empty()) {
    r.error = timeout_reason;
  } else if (!stream.error().empty()) {
    r = stream.result(prompt_len);  // an error event or a malformed stream
  } else if (status != 0 && (status < 200 || status >= 300)) {
    r.error = status_error(status, error_body);
  } else if (res.error() != httplib::Error::Success) {
    // httplib's read timeout is a silence of timeout_s, so any broken read that lasted that long
    // was the timeout.
    r.error = seconds_between(sent, end) >= opts_.timeout_s
                  ? fmt::format("timed out after {:g} s (no data)", opts_.timeout_s)
                  : transport_error(res.error());
  } else {
    stream.finish(end);
    r = stream.result(prompt_len);
  }
  r.ok = r.error.empty();
  r.start_s = seconds_between(epoch, sent);
  r.end_s = seconds_between(epoch, end);
  return r;
}

std::string ServeClient::first_model_id() {
  const std::string path = address_.prefix + "/v1/models";
  const httplib::Result res = http_->Get(path);
  const std::string where = address_.origin + path;
  if (!res)
    throw Error(ErrorKind::io,
                fmt::format("serve client: GET {}: {}", where, transport_error(res.error())));
  if (res->status < 200 || res->status >= 300)
    throw Error(ErrorKind::io, fmt::format("serve client: GET {}: {}", where,
                                           status_error(res->status, res->body.substr(0, 2048))));
  const auto j = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].is_object() || !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    throw Error(ErrorKind::io, fmt::format("serve client: GET {}: expected {{\"data\": [{{\"id\": "
                                           "...}}, ...]}}, got '{}' (give --model)",
                                           where, res->body.substr(0, 300)));
  return j["data"][0]["id"].get<std::string>();
}

}  // namespace braid::bench::serve
