// The loopback load test of the server on the CPU with the embedded model: 200 concurrent
// requests, streaming and not, some cancelled mid-stream, some malformed. Every well-formed
// request completes, each greedy output equals the same prompt's output run alone, and after the
// run /metrics shows no page in use. Also: a client that goes away frees its sequence at once.
#include <atomic>
#include <map>
#include <mutex>

#include "server_fixture.h"
#include "test_util.h"

namespace braid::test {
namespace {

using json = nlohmann::json;

const std::vector<std::string> kPrompts = {
    "The meaning of life is", "A fool", "Love", "Never trust", "In the beginning",
    "Computers are", "The best way to", "Why did the", "Linux is", "A penny saved",
    "There is no", "Time flies", "Money", "My cat", "The law", "Science is"};

// Every prompt starts with the same long instruction, as chat traffic does: its full pages come
// from the prefix cache once the first request computed them.
const std::string kSystem =
    "You are a fortune cookie. Answer every question with one short, wise and funny line about "
    "life, love, computers or cats, and never explain the joke. Question: ";

json completion(const std::string& prompt, bool stream) {
  json j = {{"model", "tiny"}, {"prompt", kSystem + prompt}, {"max_tokens", 12}, {"temperature", 0}};
  if (stream) j["stream"] = true;
  return j;
}

// The text of a streamed completion; "" with ok = false when the stream is malformed.
std::string streamed_text(const std::string& body, bool& ok, std::string& finish) {
  const auto events = sse_data(body);
  ok = !events.empty() && events.back() == "[DONE]";
  std::string text;
  for (size_t i = 0; ok && i + 1 < events.size(); ++i) {
    const json e = json::parse(events[i], nullptr, false);
    if (e.is_discarded() || !e.contains("choices")) {
      ok = false;
      break;
    }
    for (const json& c : e["choices"]) {
      text += c["text"].get<std::string>();
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
    }
  }
  return text;
}

TEST(ServerLoad, TwoHundredConcurrentRequests) {
  engine::EngineConfig cfg;
  cfg.max_num_seqs = 48;           // most requests queue
  cfg.max_num_batched_tokens = 96; // and prompts share steps with decodes
  cfg.num_kv_pages = 64;           // small enough that sequences get preempted
  TestServer s(cfg);

  // Each prompt alone first.
  std::map<std::string, std::string> solo;
  for (const std::string& p : kPrompts) {
    auto [status, body] = s.post("/v1/completions", completion(p, false));
    ASSERT_EQ(status, 200) << body.dump();
    solo[p] = body["choices"][0]["text"];
  }
  const double preemptions_before = s.metric("num_preemptions_total");

  enum Kind { whole, streamed, cancelled, malformed };
  std::atomic<int> completed{0}, cancelled_ok{0}, rejected{0}, mismatched{0}, failed{0};
  std::mutex log_mutex;
  std::vector<std::string> log;
  auto note = [&](const std::string& what) {
    std::lock_guard lock(log_mutex);
    if (log.size() < 20) log.push_back(what);
  };
  std::vector<std::thread> clients;
  for (int i = 0; i < 200; ++i) {
    const Kind kind = i % 10 < 4 ? whole : i % 10 < 7 ? streamed : i % 10 < 9 ? cancelled : malformed;
    const std::string prompt = kPrompts[static_cast<size_t>(i) % kPrompts.size()];
    clients.emplace_back([&, kind, prompt, i] {
      auto c = s.client();
      if (kind == whole) {
        auto r = c.Post("/v1/completions", completion(prompt, false).dump(), "application/json");
        if (!r || r->status != 200) {
          ++failed, note("whole " + std::to_string(i) + ": " +
                         (r ? r->body : "no response: " + httplib::to_string(r.error())));
          return;
        }
        const json b = json::parse(r->body);
        if (b["choices"][0]["text"] != solo[prompt]) ++mismatched, note("whole " + prompt);
        ++completed;
      } else if (kind == streamed) {
        auto r = c.Post("/v1/completions", completion(prompt, true).dump(), "application/json");
        bool ok = false;
        std::string finish;
        const std::string text = r ? streamed_text(r->body, ok, finish) : "";
        if (!r || r->status != 200 || !ok || finish.empty()) {
          ++failed, note("stream " + std::to_string(i) + ": " +
                         (r ? r->body : "no response: " + httplib::to_string(r.error())));
          return;
        }
        if (text != solo[prompt]) ++mismatched, note("stream " + prompt + ": " + text);
        ++completed;
      } else if (kind == cancelled) {
        // Reads two events of a long stream, then hangs up.
        json body = completion(prompt, true);
        body["max_tokens"] = 400;
        body["ignore_eos"] = true;
        int events = 0;
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.body = body.dump();
        req.set_header("Content-Type", "application/json");
        req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
          for (size_t k = 0; k + 1 < n; ++k)
            if (data[k] == '\n' && data[k + 1] == '\n') ++events;
          return events < 2;
        };
        auto r = c.send(req);
        if (!r && r.error() == httplib::Error::Canceled) ++cancelled_ok;
        else ++failed, note("cancel " + std::to_string(i) + ": " + httplib::to_string(r.error()));
      } else {
        const std::string bad = i % 20 == 9 ? "{\"prompt\": \"x\", \"max_tokens\": -1}" : "{oops";
        auto r = c.Post("/v1/completions", bad, "application/json");
        if (r && r->status == 400 && json::parse(r->body).contains("error")) ++rejected;
        else ++failed, note("malformed " + std::to_string(i) + ": " +
                            (r ? r->body : httplib::to_string(r.error())));
      }
    });
  }
  for (auto& t : clients) t.join();
  for (const std::string& l : log) ADD_FAILURE() << l;
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(mismatched.load(), 0);
  EXPECT_EQ(completed.load(), 140);
  EXPECT_EQ(cancelled_ok.load(), 40);
  EXPECT_EQ(rejected.load(), 20);
  EXPECT_TRUE(s.drained()) << "pages still in use after the run: " << s.metric("kv_cache_pages_used");
  EXPECT_GT(s.metric("num_preemptions_total"), preemptions_before)
      << "the small pool should have made the engine preempt";
  EXPECT_GT(s.metric("prefix_cache_hits_total"), 0) << "repeated prompts should hit the cache";
}

TEST(ServerLoad, AClientThatHangsUpFreesItsSequenceAtOnce) {
  TestServer s;
  // Streaming: hang up after the first event.
  {
    auto c = s.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = json{{"prompt", "Love"}, {"max_tokens", 480}, {"ignore_eos", true}, {"stream", true}}.dump();
    req.content_receiver = [](const char*, size_t, uint64_t, uint64_t) { return false; };
    c.send(req);
  }
  EXPECT_TRUE(s.drained(std::chrono::milliseconds(2000)));
  // Not streaming: the client gives up waiting (read timeout) and closes the connection.
  {
    auto c = s.client(/*read_timeout_s=*/0);
    c.set_read_timeout(0, 100000);  // 100 ms
    auto r = c.Post("/v1/completions",
                    json{{"prompt", "Love"}, {"max_tokens", 480}, {"ignore_eos", true}}.dump(),
                    "application/json");
    EXPECT_FALSE(r);
    c.stop();
  }
  EXPECT_TRUE(s.drained(std::chrono::milliseconds(2000)));
  EXPECT_LT(s.metric("generation_tokens_total"), 2 * 480)
      << "the aborted requests should not have run to the end";
}

}  // namespace
}  // namespace braid::test
