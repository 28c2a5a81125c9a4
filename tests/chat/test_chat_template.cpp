// Chat templates against jinja2: the real model templates of tests/data/chat/templates/ over the
// conversations of tests/data/chat/conversations.json, and one small template per piece of the
// language, each as tools/make_chat_goldens.py rendered it with jinja2 in transformers'
// environment (tests/data/chat/goldens.json). Then loading from model folders, templates that do
// not parse, hostile messages, resource limits and renders from many threads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "braid/error.h"
#include "chat/chat_template.h"

namespace braid::test {
namespace {

namespace fs = std::filesystem;
using chat::ChatTemplate;
using chat::RenderOptions;
using nlohmann::ordered_json;

const std::string kData = std::string(BRAID_SOURCE_DIR) + "/tests/data/chat";

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ordered_json load_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return ordered_json::object();
  return ordered_json::parse(in);
}

const ordered_json& goldens() {
  static const ordered_json g = load_json(kData + "/goldens.json");
  return g;
}

const ordered_json& conversations() {
  static const ordered_json c = load_json(kData + "/conversations.json");
  return c;
}

size_t count_of(const char* section) {
  const ordered_json& g = goldens();
  return g.contains(section) ? g[section].size() : 0;
}

std::chrono::system_clock::time_point golden_clock() {
  return std::chrono::system_clock::from_time_t(
      static_cast<std::time_t>(goldens()["now_unix"].get<int64_t>()));
}

// Each golden template parsed once for the whole run.
const ChatTemplate& golden_template(const std::string& name) {
  static std::map<std::string, ChatTemplate> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    const ordered_json& t = goldens()["templates"][name];
    const std::string source = read_text(kData + "/templates/" + t["file"].get<std::string>());
    it = cache.emplace(name, ChatTemplate::from_string(source, t["special_tokens"])).first;
  }
  return it->second;
}

// What a jinja2 exception becomes here: raise_exception (TemplateError) is invalid_argument
// carrying the template's message; the sandbox's SecurityError is unsupported; errors caused by
// the data (UndefinedError, TypeError, ValueError, ...) are invalid_argument.
void expect_error_like(const std::function<void()>& run, const ordered_json& jinja_error) {
  const std::string type = jinja_error["type"];
  const std::string message = jinja_error["message"];
  try {
    run();
    ADD_FAILURE() << "rendered, but jinja2 raised " << type << ": " << message;
  } catch (const Error& e) {
    const ErrorKind want =
        type == "SecurityError" ? ErrorKind::unsupported : ErrorKind::invalid_argument;
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(want))
        << e.what() << "\njinja2: " << type << ": " << message;
    if (type == "TemplateError")
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
          << e.what() << "\njinja2: " << message;
    EXPECT_NE(std::string(e.what()).find("line "), std::string::npos)
        << "no line/column in: " << e.what();
  }
}

std::string case_name(const std::string& raw) {
  std::string out;
  for (char c : raw) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

// ------------------------------------------------------------------- real templates, goldens
class ChatGolden : public ::testing::TestWithParam<size_t> {};

TEST_P(ChatGolden, RendersAsJinja2) {
  const ordered_json& c = goldens()["cases"][GetParam()];
  const ChatTemplate& t = golden_template(c["template"]);
  const ordered_json& conv = conversations()[c["conversation"].get<std::string>()];
  RenderOptions o;
  o.add_generation_prompt = c["add_generation_prompt"];
  if (conv.contains("tools")) o.tools = conv["tools"];
  if (c.contains("extra")) o.extra = c["extra"];
  o.now = golden_clock();
  if (c.contains("output"))
    EXPECT_EQ(t.render(conv["messages"], o), c["output"].get<std::string>());
  else
    expect_error_like([&] { t.render(conv["messages"], o); }, c["error"]);
}

INSTANTIATE_TEST_SUITE_P(ChatTemplates, ChatGolden, ::testing::Range<size_t>(0, count_of("cases")),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           const ordered_json& c = goldens()["cases"][info.param];
                           std::string name =
                               c["template"].get<std::string>() + "_" +
                               c["conversation"].get<std::string>() +
                               (c["add_generation_prompt"].get<bool>() ? "" : "_noprompt");
                           if (c.contains("extra"))
                             for (auto it = c["extra"].begin(); it != c["extra"].end(); ++it)
                               name += "_" + it.key();
                           return case_name(name) + "_" + std::to_string(info.param);
                         });

// ------------------------------------------------------------ the language, piece by piece
class ChatLanguage : public ::testing::TestWithParam<size_t> {};

TEST_P(ChatLanguage, RendersAsJinja2) {
  const ordered_json& c = goldens()["language"][GetParam()];
  SCOPED_TRACE("template: " + c["template"].get<std::string>());
  RenderOptions o;
  o.extra = c["variables"];
  o.now = golden_clock();
  auto run = [&] {
    return ChatTemplate::from_string(c["template"].get<std::string>())
        .render(ordered_json::array(), o);
  };
  if (c.contains("output"))
    EXPECT_EQ(run(), c["output"].get<std::string>());
  else
    expect_error_like([&] { run(); }, c["error"]);
}

INSTANTIATE_TEST_SUITE_P(ChatTemplates, ChatLanguage,
                         ::testing::Range<size_t>(0, count_of("language")),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return case_name(
                               goldens()["language"][info.param]["name"].get<std::string>());
                         });

TEST(ChatGoldens, ArePresent) {
  EXPECT_GE(count_of("cases"), 300u)
      << "tests/data/chat/goldens.json: run tools/make_chat_goldens.py";
  EXPECT_GE(count_of("language"), 100u);
  EXPECT_GE(goldens()["templates"].size(), 11u);
}

// ------------------------------------------------------------------------ helpers for below
std::string render(const std::string& source, const ordered_json& vars = ordered_json::object()) {
  RenderOptions o;
  o.extra = vars;
  return ChatTemplate::from_string(source).render(ordered_json::array(), o);
}

// The braid::Error a call throws (fails the test when it throws none).
Error error_of(const std::function<void()>& run) {
  try {
    run();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected a braid::Error";
  return Error(ErrorKind::internal, "none");
}

Error parse_error(const std::string& source) {
  return error_of([&] { ChatTemplate::from_string(source); });
}

// ------------------------------------------------------------------------- language details
TEST(ChatTemplate, WhitespaceControlAndBlockTrimming) {
  // trim_blocks eats the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render("{% for x in [1, 2] %}\n  {{ x }}\n{% endfor %}\n"), "  1\n  2\n");
  EXPECT_EQ(render("    {% if true %}\n    yes\n    {% endif %}\n"), "    yes\n");
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("a\n{%- if true %}\nb{% endif %}"), "ab");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");  // + keeps the indentation
  EXPECT_EQ(render("{# comment #}\nx"), "x");
  EXPECT_EQ(render("line\n"), "line");        // one trailing newline goes
  EXPECT_EQ(render("a\r\nb\rc"), "a\nb\nc");  // newlines normalised
}

TEST(ChatTemplate, LoopsNamespacesMacros) {
  EXPECT_EQ(
      render(
          "{% for m in ms %}{{ loop.index }}{{ m }}{% if not loop.last %},{% endif %}{% endfor %}",
          {{"ms", {"a", "b", "c"}}}),
      "1a,2b,3c");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i "
                   "%}{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% macro tag(name, body='') %}<{{ name }}>{{ body }}</{{ name }}>{% endmacro "
                   "%}{{ tag('b', 'x') }}{{ tag('i') }}"),
            "<b>x</b><i></i>");
  EXPECT_EQ(render("{{ xs[::-1] | join(',') }}|{{ 'héllo'[1:3] }}", {{"xs", {1, 2, 3}}}),
            "3,2,1|él");
}

TEST(ChatTemplate, TojsonIsPythonJsonDumps) {
  const ordered_json vars = {
      {"v", {{"name", "Zürich 😀"}, {"n", 1.0}, {"list", {1, 2}}, {"none", nullptr}}}};
  EXPECT_EQ(render("{{ v | tojson }}", vars),
            R"({"name": "Zürich 😀", "n": 1.0, "list": [1, 2], "none": null})");
  EXPECT_EQ(render("{{ v | tojson(indent=2) }}", vars),
            "{\n  \"name\": \"Zürich 😀\",\n  \"n\": 1.0,\n  \"list\": [\n    1,\n    2\n  ],\n  "
            "\"none\": null\n}");
  EXPECT_EQ(render("{{ v.name | tojson(ensure_ascii=true) }}", vars),
            R"("Z\u00fcrich \ud83d\ude00")");
}

TEST(ChatTemplate, KeyOrderOfMessagesIsKept) {
  // Python dicts keep insertion order, and so must the parsed messages (ordered_json).
  const ordered_json tool = ordered_json::parse(R"({"z": 1, "a": {"y": 2, "b": 3}})");
  RenderOptions o;
  o.tools = ordered_json::array({tool});
  EXPECT_EQ(ChatTemplate::from_string("{{ tools[0] | tojson }}").render(ordered_json::array(), o),
            R"({"z": 1, "a": {"y": 2, "b": 3}})");
}

TEST(ChatTemplate, ContextVariables) {
  const ChatTemplate t = ChatTemplate::from_string(
      "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ tools }}|{{ documents }}|{{ "
      "custom }}|"
      "{{ unk_token is defined }}",
      {{"bos_token", "<s>"},
       {"eos_token", {{"content", "</s>"}, {"lstrip", false}}},
       {"unk_token", nullptr}});
  RenderOptions o;
  o.add_generation_prompt = false;
  o.extra = {{"custom", 7}};
  EXPECT_EQ(t.render(ordered_json::array(), o), "<s>|</s>|False|None|None|7|False");
  o.extra = {{"bos_token", "X"}};  // keyword arguments override special tokens, as in transformers
  EXPECT_EQ(t.render(ordered_json::array(), o).substr(0, 2), "X|");
  o.extra = {{"messages", 1}};
  EXPECT_EQ(error_of([&] { t.render(ordered_json::array(), o); }).kind(),
            ErrorKind::invalid_argument);
}

TEST(ChatTemplate, StrftimeNowUsesTheGivenClock) {
  const ChatTemplate t = ChatTemplate::from_string("{{ strftime_now('%d %b %Y') }}");
  RenderOptions o;
  o.now = std::chrono::system_clock::from_time_t(1721995200);  // 2024-07-26 12:00 UTC
  EXPECT_EQ(t.render(ordered_json::array(), o), "26 Jul 2024");
  EXPECT_EQ(t.render(ordered_json::array()).size(), 11u);  // today, whatever it is
}

TEST(ChatTemplate, RaiseExceptionIsInvalidArgumentWithTheMessage) {
  const ChatTemplate t = ChatTemplate::from_string(
      "ok\n{% if messages | length > 1 %}\n  {{ raise_exception('Only one message, please') }}\n{% "
      "endif %}");
  EXPECT_EQ(t.render(ordered_json::array({{{"role", "user"}}})), "ok\n");
  const Error e = error_of([&] {
    t.render(ordered_json::array({{{"role", "user"}}, {{"role", "user"}}}));
  });
  EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("Only one message, please"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("line 3, column 6"), std::string::npos) << e.what();
}

// ------------------------------------------------------------------------------ bad templates
TEST(ChatTemplate, SyntaxErrorsNameLineAndColumn) {
  struct Case {
    const char* source;
    ErrorKind kind;
    const char* where;
    const char* what;
  };
  const Case cases[] = {
      {"hello {{ name", ErrorKind::invalid_argument, "line 1, column 7", "unclosed"},
      {"a\n{% if x %}\nb", ErrorKind::invalid_argument, "line 2, column 4", "unclosed 'if'"},
      {"{% for x in y %}{% endif %}", ErrorKind::invalid_argument, "", "unknown tag 'endif'"},
      {"x\n  {{ y | no_such_filter }}", ErrorKind::invalid_argument, "line 2, column 10",
       "no filter named 'no_such_filter'"},
      {"{{ y | wordwrap }}", ErrorKind::unsupported, "line 1, column 8", "wordwrap"},
      {"{{ y is no_such_test }}", ErrorKind::invalid_argument, "line 1, column 9", "no test named"},
      {"{% frobnicate %}", ErrorKind::invalid_argument, "line 1, column 4",
       "unknown tag 'frobnicate'"},
      {"{% include 'other.jinja' %}", ErrorKind::unsupported, "line 1, column 4", "include"},
      {"{% extends 'base' %}", ErrorKind::unsupported, "", "extends"},
      {"{{ 1 + }}", ErrorKind::invalid_argument, "line 1, column 8", "unexpected"},
      {"{{ (1 }}", ErrorKind::invalid_argument, "", ""},
      {"{{ 'abc }}", ErrorKind::invalid_argument, "line 1, column 4", "unterminated string"},
      {"{# never closed", ErrorKind::invalid_argument, "line 1, column 1", "comment"},
      {"{% break %}", ErrorKind::invalid_argument, "", "outside a for loop"},
      {"{% for x in y recursive %}{% endfor %}", ErrorKind::unsupported, "", "recursive"},
      {"{% macro m(a=1, b) %}{% endmacro %}", ErrorKind::invalid_argument, "",
       "non-default argument"},
      {"{{ x is defined is defined }}", ErrorKind::invalid_argument, "", ""},
      {"{{ a.b.c[ }}", ErrorKind::invalid_argument, "", ""},
      {"{{ 1 $ 2 }}", ErrorKind::invalid_argument, "line 1, column 6", "unexpected character '$'"},
      {"{{ ) }}", ErrorKind::invalid_argument, "", "unexpected ')'"},
      {"{% set 1 = 2 %}", ErrorKind::invalid_argument, "", "assign"},
      {"{% endfor %}", ErrorKind::invalid_argument, "", "unknown tag 'endfor'"},
      {"\xff\xfe{{ x }}", ErrorKind::invalid_argument, "", "UTF-8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.source);
    const Error e = parse_error(c.source);
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(c.kind)) << e.what();
    EXPECT_NE(std::string(e.what()).find(c.where), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(c.what), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, DeepTemplatesAreRefusedNotCrashed) {
  const int n = 100000;
  EXPECT_EQ(parse_error("{{ " + std::string(n, '(') + "1" + std::string(n, ')') + " }}").kind(),
            ErrorKind::invalid_argument);
  EXPECT_EQ(parse_error("{{ " + std::string(n, '[') + std::string(n, ']') + " }}").kind(),
            ErrorKind::invalid_argument);
  std::string chain = "{{ 1";
  for (int i = 0; i < n; ++i) chain += " + 1";
  EXPECT_EQ(parse_error(chain + " }}").kind(), ErrorKind::invalid_argument);
  std::string nots = "{{ ";
  for (int i = 0; i < n; ++i) nots += "not ";
  EXPECT_EQ(parse_error(nots + "1 }}").kind(), ErrorKind::invalid_argument);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_EQ(parse_error(ifs).kind(), ErrorKind::invalid_argument);
  std::string filters = "{{ 'x'";
  for (int i = 0; i < n; ++i) filters += " | upper";
  EXPECT_EQ(parse_error(filters + " }}").kind(), ErrorKind::invalid_argument);
  // Moderate nesting is fine.
  EXPECT_EQ(render("{{ " + std::string(30, '(') + "1" + std::string(30, ')') + " }}"), "1");
}

// -------------------------------------------------------------------- hostile messages, limits
TEST(ChatTemplate, HostileMessagesGiveErrorsNotCrashes) {
  const ChatTemplate qwen = golden_template("qwen3");
  const ChatTemplate llama = golden_template("llama3");
  // Not a list.
  EXPECT_EQ(error_of([&] { qwen.render(ordered_json::object()); }).kind(),
            ErrorKind::invalid_argument);
  EXPECT_EQ(error_of([&] { qwen.render("hello"); }).kind(), ErrorKind::invalid_argument);
  // Content nested far deeper than anything real: refused (llama3 prints content with | trim).
  ordered_json deep = "x";
  for (int i = 0; i < 100000; ++i) deep = ordered_json::array({std::move(deep)});
  const ordered_json deep_messages =
      ordered_json::array({{{"role", "user"}, {"content", std::move(deep)}}});
  EXPECT_EQ(error_of([&] { llama.render(deep_messages); }).kind(), ErrorKind::invalid_argument);
  // Not UTF-8.
  const ordered_json bad_utf8 = ordered_json::array({{{"role", "user"}, {"content", "\xc3\x28"}}});
  EXPECT_EQ(error_of([&] { qwen.render(bad_utf8); }).kind(), ErrorKind::invalid_argument);
  // Tools that are not a list of objects.
  RenderOptions o;
  o.tools = "get_weather";
  EXPECT_EQ(error_of([&] {
              qwen.render(ordered_json::array({{{"role", "user"}, {"content", "hi"}}}), o);
            }).kind(),
            ErrorKind::invalid_argument);
  o.tools = ordered_json::array({1});
  EXPECT_EQ(error_of([&] {
              qwen.render(ordered_json::array({{{"role", "user"}, {"content", "hi"}}}), o);
            }).kind(),
            ErrorKind::invalid_argument);
  // Messages of every JSON shape: each renders or fails cleanly.
  for (const char* m :
       {"null", "1", "\"s\"", "[]", "{}", "{\"role\": 1}",
        "{\"role\": \"user\", \"content\": [1, {}]}",
        "{\"role\": \"assistant\", \"content\": \"x\", \"tool_calls\": 5}",
        "{\"role\": \"assistant\", \"content\": \"x\", \"tool_calls\": [{\"function\": null}]}",
        "{\"role\": \"tool\", \"content\": {\"a\": 1}}"}) {
    SCOPED_TRACE(m);
    const ordered_json messages = ordered_json::array({ordered_json::parse(m)});
    for (const char* name :
         {"qwen3", "qwen2.5", "llama3.1", "deepseek-v3", "mixtral", "qwen3-coder"}) {
      try {
        golden_template(name).render(messages);
      } catch (const Error& e) {
        EXPECT_TRUE(e.kind() == ErrorKind::invalid_argument || e.kind() == ErrorKind::unsupported)
            << e.what();
      }
    }
  }
  // A long conversation with big messages renders, and in proportion.
  ordered_json many = ordered_json::array();
  const std::string big(100000, 'z');
  for (int i = 0; i < 200; ++i)
    many.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", big}});
  EXPECT_GT(qwen.render(many).size(), 200u * big.size());
}

TEST(ChatTemplate, ResourceLimitsEndTheRender) {
  // Infinite macro recursion.
  Error e = error_of([] { render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"); });
  EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("deeper"), std::string::npos) << e.what();
  // Strings and lists built past the size limit.
  EXPECT_EQ(error_of([] { render("{{ 'x' * 1000000000 }}"); }).kind(), ErrorKind::invalid_argument);
  EXPECT_EQ(error_of([] { render("{{ [1] * 1000000000 }}"); }).kind(), ErrorKind::invalid_argument);
  EXPECT_EQ(error_of([] {
              render("{{ ('ab' * 3000000) | replace('', 'xxxxxxxxxxxxxxxxxxxx') }}");
            }).kind(),
            ErrorKind::invalid_argument);
  // Output past the limit.
  EXPECT_EQ(error_of([] {
              render("{% set s = 'y' * 10000 %}{% for i in range(100000) %}{{ s }}{% endfor %}");
            }).kind(),
            ErrorKind::invalid_argument);
  // A list nested deeper and deeper through a namespace.
  EXPECT_EQ(error_of([] {
              render(
                  "{% set ns = namespace(x=1) %}{% for i in range(100000) %}{% set ns.x = [ns.x] "
                  "%}{% endfor %}");
            }).kind(),
            ErrorKind::invalid_argument);
  // A namespace holding itself prints (or fails) without recursing forever.
  EXPECT_EQ(
      error_of([] { render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"); }).kind(),
      ErrorKind::invalid_argument);
  // Integer overflow is refused (Python has big integers; this interpreter has 64 bits).
  EXPECT_EQ(error_of([] { render("{{ 2 ** 64 }}"); }).kind(), ErrorKind::unsupported);
  EXPECT_EQ(error_of([] { render("{{ 9223372036854775807 + 1 }}"); }).kind(),
            ErrorKind::unsupported);
}

TEST(ChatTemplate, StepLimitStopsRunawayLoops) {
  const auto start = std::chrono::steady_clock::now();
  const Error e = error_of([] {
    render("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}");
  });
  EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("steps"), std::string::npos) << e.what();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
}

TEST(ChatTemplate, RendersFromManyThreadsAtOnce) {
  const ChatTemplate& t = golden_template("qwen3");
  const ordered_json& conv = conversations()["tool_call"];
  RenderOptions o;
  o.tools = conv["tools"];
  const std::string expected = t.render(conv["messages"], o);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      for (int k = 0; k < 100; ++k)
        if (t.render(conv["messages"], o) != expected) ++mismatches;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// ----------------------------------------------------------------------------- model folders
class ChatTemplateDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("braid_chat_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  std::string dir() const { return dir_.string(); }
  fs::path dir_;
};

const ordered_json kUser = ordered_json::array({{{"role", "user"}, {"content", "hi"}}});

TEST_F(ChatTemplateDir, ReadsTokenizerConfig) {
  write(
      "tokenizer_config.json",
      R"({"bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false}, "eos_token": "</s>",
            "pad_token": null, "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}{{ eos_token }}{{ pad_token is defined }}"})");
  EXPECT_TRUE(ChatTemplate::dir_has_template(dir()));
  const ChatTemplate t = ChatTemplate::from_dir(dir());
  EXPECT_EQ(t.render(kUser), "<s>[hi]</s>False");
  EXPECT_EQ(t.special_tokens()["bos_token"], "<s>");
}

TEST_F(ChatTemplateDir, ChatTemplateJinjaWinsOverTheConfig) {
  write("tokenizer_config.json", R"({"chat_template": "from config"})");
  write("chat_template.jinja", "from file {{ messages | length }}\n");
  EXPECT_EQ(ChatTemplate::from_dir(dir()).render(kUser), "from file 1");
}

TEST_F(ChatTemplateDir, JinjaFileAlone) {
  write("chat_template.jinja", "only {{ messages[0].content }}");
  EXPECT_TRUE(ChatTemplate::dir_has_template(dir()));
  EXPECT_EQ(ChatTemplate::from_dir(dir()).render(kUser), "only hi");
}

TEST_F(ChatTemplateDir, NamedTemplatesPickToolUseWhenToolsAreGiven) {
  write(
      "tokenizer_config.json",
      R"({"chat_template": [{"name": "default", "template": "plain"}, {"name": "tool_use", "template": "tools: {{ tools | length }}"}]})");
  const ChatTemplate t = ChatTemplate::from_dir(dir());
  EXPECT_EQ(t.render(kUser), "plain");
  RenderOptions o;
  o.tools = ordered_json::array({{{"type", "function"}}});
  EXPECT_EQ(t.render(kUser, o), "tools: 1");
  write("additional_chat_templates/tool_use.jinja", "extra file");
  EXPECT_EQ(ChatTemplate::from_dir(dir()).render(kUser, o), "extra file");
}

TEST_F(ChatTemplateDir, SpecialTokensMapOverridesTheConfig) {
  write("tokenizer_config.json", R"({"bos_token": "<a>", "chat_template": "{{ bos_token }}"})");
  write("special_tokens_map.json", R"({"bos_token": {"content": "<b>"}})");
  EXPECT_EQ(ChatTemplate::from_dir(dir()).render(kUser), "<b>");
}

TEST_F(ChatTemplateDir, Errors) {
  // No template at all.
  write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_FALSE(ChatTemplate::dir_has_template(dir()));
  Error e = error_of([&] { ChatTemplate::from_dir(dir()); });
  EXPECT_EQ(e.kind(), ErrorKind::unsupported);
  EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
  // Malformed JSON, a template of the wrong type, a missing folder.
  write("tokenizer_config.json", R"({"chat_template": )");
  EXPECT_EQ(error_of([&] { ChatTemplate::from_dir(dir()); }).kind(), ErrorKind::io);
  write("tokenizer_config.json", R"({"chat_template": 5})");
  EXPECT_EQ(error_of([&] { ChatTemplate::from_dir(dir()); }).kind(), ErrorKind::io);
  write("tokenizer_config.json", R"({"chat_template": [{"name": "x"}]})");
  EXPECT_EQ(error_of([&] { ChatTemplate::from_dir(dir()); }).kind(), ErrorKind::io);
  EXPECT_EQ(error_of([&] { ChatTemplate::from_dir(dir() + "/nope"); }).kind(), ErrorKind::io);
  // A template that does not parse names its file.
  write("tokenizer_config.json", R"({"chat_template": "{% if %}"})");
  e = error_of([&] { ChatTemplate::from_dir(dir()); });
  EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
  // Only named templates, none of them "default".
  write("tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "r"}]})");
  EXPECT_EQ(error_of([&] { ChatTemplate::from_dir(dir()).render(kUser); }).kind(),
            ErrorKind::unsupported);
}

TEST(ChatTemplateModels, TinyFortunesHasATrivialTemplate) {
  const std::string dir = std::string(BRAID_SOURCE_DIR) + "/models/tiny-fortunes";
  ASSERT_TRUE(ChatTemplate::dir_has_template(dir));
  const ChatTemplate t = ChatTemplate::from_dir(dir);
  const ordered_json messages = ordered_json::array(
      {{{"role", "system"}, {"content", "Be wise. "}}, {{"role", "user"}, {"content", "A fool"}}});
  EXPECT_EQ(t.render(messages), "Be wise. A fool");
  RenderOptions o;
  o.add_generation_prompt = false;
  EXPECT_EQ(t.render(messages, o), "Be wise. A fool");
}

// The real tokenizer_config.json files (scripts/fetch-tokenizers.sh), read by from_dir: the same
// renders as the templates extracted from them.
TEST(ChatTemplateModels, RealTokenizerConfigs) {
  int found = 0;
  for (const auto& [dir_name, golden_name] : std::vector<std::pair<std::string, std::string>>{
           {"qwen3", "qwen3"}, {"llama3", "llama3"}, {"deepseek_v3", "deepseek-v3"}}) {
    const std::string dir = std::string(BRAID_SOURCE_DIR) + "/.cache/tokenizers/" + dir_name;
    if (!fs::exists(dir + "/tokenizer_config.json")) continue;
    ++found;
    SCOPED_TRACE(dir);
    const ChatTemplate t = ChatTemplate::from_dir(dir);
    for (const auto& c : goldens()["cases"]) {
      if (c["template"] != golden_name || !c.contains("output") || c.contains("extra")) continue;
      const ordered_json& conv = conversations()[c["conversation"].get<std::string>()];
      RenderOptions o;
      o.add_generation_prompt = c["add_generation_prompt"];
      if (conv.contains("tools")) o.tools = conv["tools"];
      EXPECT_EQ(t.render(conv["messages"], o), c["output"].get<std::string>()) << c["conversation"];
    }
  }
  if (found == 0)
    GTEST_SKIP()
        << "no tokenizer_config.json under .cache/tokenizers (scripts/fetch-tokenizers.sh)";
}

}  // namespace
}  // namespace braid::test
