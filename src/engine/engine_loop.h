// The serving engine behind queues: one thread runs LLMEngine::step() while any request is live;
// other threads (HTTP handlers) submit requests, read each request's outputs from its own stream,
// and abort requests whose client went away.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "braid/error.h"
#include "engine/llm_engine.h"

namespace braid::engine {

// The engine holds as many requests as it may (max_num_seqs running + max_waiting queued).
class EngineBusy : public Error {
 public:
  explicit EngineBusy(std::string message) : Error(ErrorKind::unsupported, std::move(message)) {}
};

// One request's outputs, from the engine thread to its reader.
class RequestStream {
 public:
  explicit RequestStream(int choices) : unfinished_(choices) {}
  // Waits up to `timeout` for output and takes what there is. `done` turns true once every choice
  // has finished (its last output is in `out`) or the request failed (`error` set).
  std::vector<SequenceOutput> wait(std::chrono::milliseconds timeout, bool& done, std::string& error);

  void push(SequenceOutput output);  // engine thread
  void fail(const std::string& error);
  bool done() const;
  int unfinished() const;  // choices not yet finished

 private:
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<SequenceOutput> queue_;
  int unfinished_;
  std::string error_;
};

class EngineLoop {
 public:
  // max_waiting: requests accepted beyond max_num_seqs before submit() refuses with EngineBusy.
  EngineLoop(std::unique_ptr<LLMEngine> engine, int max_num_seqs, int max_waiting);
  ~EngineLoop();  // stops the thread; live requests fail with "server shutting down"
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Checks and queues a request (throws braid::Error for a bad one, EngineBusy when full).
  std::shared_ptr<RequestStream> submit(Request request);
  // Ends a request at once (its client went away); harmless for one that already finished.
  void abort(const std::string& request_id);

  const LLMEngine& engine() const { return *engine_; }  // immutable parts and metrics only
  // Empty while healthy; the error that stopped the engine otherwise.
  std::string fatal_error() const;
  int in_flight() const { return in_flight_.load(); }
  int capacity() const { return capacity_; }  // requests it holds at most

 private:
  void run();

  std::unique_ptr<LLMEngine> engine_;
  int capacity_;
  std::atomic<int> in_flight_{0};
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::pair<Request, std::shared_ptr<RequestStream>>> pending_;
  std::vector<std::string> aborts_;
  bool stop_ = false;
  std::string fatal_;
  std::map<std::string, std::shared_ptr<RequestStream>> streams_;  // engine thread only
  std::thread thread_;
};

}  // namespace braid::engine
