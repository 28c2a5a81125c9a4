#include "engine/engine_loop.h"

namespace braid::engine {

std::vector<SequenceOutput> RequestStream::wait(std::chrono::milliseconds timeout, bool& done,
                                                std::string& error) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout,
                  [&] { return !queue_.empty() || unfinished_ == 0 || !error_.empty(); });
  std::vector<SequenceOutput> out(std::make_move_iterator(queue_.begin()),
                                  std::make_move_iterator(queue_.end()));
  queue_.clear();
  done = unfinished_ == 0 || !error_.empty();
  error = error_;
  return out;
}

void RequestStream::push(SequenceOutput output) {
  {
    std::lock_guard lock(mutex_);
    if (output.finished()) --unfinished_;
    queue_.push_back(std::move(output));
  }
  ready_.notify_all();
}

void RequestStream::fail(const std::string& error) {
  {
    std::lock_guard lock(mutex_);
    error_ = error.empty() ? "request failed" : error;
  }
  ready_.notify_all();
}

int RequestStream::unfinished() const {
  std::lock_guard lock(mutex_);
  return unfinished_;
}

bool RequestStream::done() const {
  std::lock_guard lock(mutex_);
  return unfinished_ == 0 || !error_.empty();
}

EngineLoop::EngineLoop(std::unique_ptr<LLMEngine> engine, int max_num_seqs, int max_waiting)
    : engine_(std::move(engine)), capacity_(max_num_seqs + max_waiting) {
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  for (auto& [id, stream] : streams_) stream->fail("server shutting down");
  for (auto& [request, stream] : pending_) stream->fail("server shutting down");
}

std::shared_ptr<RequestStream> EngineLoop::submit(Request request) {
  engine_->check(request);
  auto stream = std::make_shared<RequestStream>(request.n);
  {
    std::lock_guard lock(mutex_);
    if (!fatal_.empty()) throw Error(ErrorKind::internal, "engine stopped: " + fatal_);
    if (in_flight_.load() >= capacity_)
      throw EngineBusy("the server holds " + std::to_string(capacity_) +
                       " requests already (--max-num-seqs + --max-waiting); retry later");
    ++in_flight_;
    pending_.emplace_back(std::move(request), stream);
  }
  wake_.notify_all();
  return stream;
}

void EngineLoop::abort(const std::string& request_id) {
  {
    std::lock_guard lock(mutex_);
    aborts_.push_back(request_id);
  }
  wake_.notify_all();
}

std::string EngineLoop::fatal_error() const {
  std::lock_guard lock(mutex_);
  return fatal_;
}

void EngineLoop::run() {
  for (;;) {
    std::vector<std::pair<Request, std::shared_ptr<RequestStream>>> pending;
    std::vector<std::string> aborts;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] {
        return stop_ || !pending_.empty() || !aborts_.empty() || engine_->has_unfinished();
      });
      if (stop_) return;
      pending.swap(pending_);
      aborts.swap(aborts_);
    }
    for (auto& [request, stream] : pending) {
      try {
        engine_->add_request(request);
        streams_.emplace(request.id, stream);
      } catch (const std::exception& e) {
        stream->fail(e.what());
        --in_flight_;
      }
    }
    for (const std::string& id : aborts) engine_->abort_request(id);
    if (!engine_->has_unfinished()) continue;
    try {
      for (SequenceOutput& out : engine_->step()) {
        const auto it = streams_.find(out.request_id);
        if (it == streams_.end()) continue;
        const std::shared_ptr<RequestStream> stream = it->second;
        // The slot frees before the reader sees the end, so a client that sends its next request
        // at once finds it free.
        if (out.finished() && stream->unfinished() == 1) {
          streams_.erase(it);
          --in_flight_;
        }
        stream->push(std::move(out));
      }
    } catch (const std::exception& e) {
      // A failed step (a CUDA error, say) leaves the engine in an unknown state: fail every
      // request and refuse new ones, but keep the process (and /health) answering.
      std::unique_lock lock(mutex_);
      fatal_ = e.what();
      for (auto& [id, stream] : streams_) stream->fail(fatal_);
      for (auto& [request, stream] : pending_) stream->fail(fatal_);
      in_flight_ = 0;
      streams_.clear();
      pending_.clear();
      wake_.wait(lock, [&] { return stop_; });
      return;
    }
  }
}

}  // namespace braid::engine
