// The environment's globals (jinja2's range, dict, namespace; transformers' raise_exception and
// strftime_now) and the argument binding every builtin uses.
#include <ctime>
#include <memory>

#include "chat/jinja_builtins.h"
#include "chat/jinja_ops.h"
#include "chat/jinja_render.h"

namespace braid::chat::jinja {

std::vector<Value> bind_args(std::string_view function, const CallArgs& args,
                             std::initializer_list<Param> params) {
  const std::vector<Param> p(params);
  std::vector<Value> out(p.size());
  std::vector<bool> bound(p.size(), false);
  const std::string fn(function);
  if (args.positional.size() > p.size())
    type_error(fn + "() takes at most " + std::to_string(p.size()) + " argument(s) (" +
               std::to_string(args.positional.size()) + " given)");
  for (size_t i = 0; i < args.positional.size(); ++i) {
    out[i] = args.positional[i];
    bound[i] = true;
  }
  for (const auto& [name, value] : args.keywords) {
    size_t i = 0;
    while (i < p.size() && name != p[i].name) ++i;
    if (i == p.size()) type_error(fn + "() got an unexpected keyword argument '" + name + "'");
    if (bound[i]) type_error(fn + "() got multiple values for argument '" + name + "'");
    out[i] = value;
    bound[i] = true;
  }
  for (size_t i = 0; i < p.size(); ++i) {
    if (bound[i]) continue;
    if (p[i].required) type_error(fn + "() missing required argument '" + p[i].name + "'");
    out[i] = p[i].default_value;
  }
  return out;
}

namespace {

using GlobalFn = Value (*)(Renderer& r, CallArgs& args);

class BuiltinFunction : public Callable {
 public:
  BuiltinFunction(std::string name, GlobalFn fn) : name_(std::move(name)), fn_(fn) {}
  std::string name() const override { return name_; }
  Value call(Renderer& r, CallArgs& args) const override { return fn_(r, args); }

 private:
  std::string name_;
  GlobalFn fn_;
};

int64_t int_arg(const Value& v, const char* what) {
  if (v.is_bool() || v.is_int()) return v.int_like();
  type_error(std::string("'") + v.type_name() + "' object cannot be interpreted as an integer (" +
             what + ")");
}

// range() as the sandbox has it: at most 100000 items.
Value g_range(Renderer&, CallArgs& args) {
  if (!args.keywords.empty()) type_error("range() takes no keyword arguments");
  const auto& a = args.positional;
  if (a.empty() || a.size() > 3)
    type_error("range expected 1 to 3 arguments, got " + std::to_string(a.size()));
  int64_t start = 0, stop, step = 1;
  if (a.size() == 1) {
    stop = int_arg(a[0], "range");
  } else {
    start = int_arg(a[0], "range");
    stop = int_arg(a[1], "range");
    if (a.size() == 3) step = int_arg(a[2], "range");
  }
  if (step == 0) type_error("range() arg 3 must not be zero");
  constexpr int64_t kMaxRange = 100000;
  // Count without overflow: the number of steps from start toward stop.
  const __int128 span =
      step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 n = span <= 0 ? 0
                               : (span + (step > 0 ? step : -static_cast<__int128>(step)) - 1) /
                                     (step > 0 ? step : -static_cast<__int128>(step));
  if (n > kMaxRange)
    type_error("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < static_cast<int64_t>(n); ++i)
    items.push_back(Value::integer(start + i * step));
  return Value::list(std::move(items));
}

// dict(mapping or pairs, **kwargs), also namespace()'s initialiser.
std::vector<std::pair<Value, Value>> dict_items(const std::string& fn, CallArgs& args) {
  std::vector<std::pair<Value, Value>> items;
  auto put = [&](Value k, Value v) {
    for (auto& [ek, ev] : items)
      if (py_equal(ek, k)) {
        ev = std::move(v);
        return;
      }
    items.emplace_back(std::move(k), std::move(v));
  };
  if (args.positional.size() > 1)
    type_error(fn + " expected at most 1 argument, got " + std::to_string(args.positional.size()));
  if (args.positional.size() == 1) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      for (const auto& [k, v] : src.dict().items) put(k, v);
    } else if (src.is_list()) {
      for (const Value& pair : src.list().items) {
        const std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2)
          type_error(fn + ": a sequence element has length " + std::to_string(kv.size()) +
                     "; 2 is required");
        put(kv[0], kv[1]);
      }
    } else {
      type_error("'" + src.type_name() + "' object is not iterable");
    }
  }
  for (auto& [k, v] : args.keywords) put(Value::string(k), std::move(v));
  return items;
}

Value g_dict(Renderer&, CallArgs& args) { return Value::dict(dict_items("dict", args)); }

Value g_namespace(Renderer& r, CallArgs& args) {
  Namespace* ns = r.make_namespace();
  for (auto& [k, v] : dict_items("namespace", args)) {
    if (!k.is_string()) type_error("namespace() keys must be strings");
    ns->attrs.emplace_back(k.str(), std::move(v));
  }
  return Value::ns(ns);
}

// transformers: raise_exception(message) raises jinja2's TemplateError with that message.
Value g_raise_exception(Renderer&, CallArgs& args) {
  const auto a = bind_args("raise_exception", args, {{"message", Value(), true}});
  fail(ErrorKind::invalid_argument, to_str(a[0]));
}

// transformers: strftime_now(format) = datetime.now().strftime(format), in local time.
Value g_strftime_now(Renderer& r, CallArgs& args) {
  const auto a = bind_args("strftime_now", args, {{"format", Value(), true}});
  if (!a[0].is_string()) type_error("strftime() argument 1 must be str, not " + a[0].type_name());
  const std::string& format = a[0].str();
  if (format.size() > 256) type_error("strftime_now: format longer than 256 characters");
  const auto now = r.now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000;
  // Python's own %f (microseconds); everything else is the C library's, as in CPython.
  std::string c_format;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size() && format[i + 1] == 'f') {
      char buf[8];
      std::snprintf(buf, sizeof buf, "%06lld",
                    static_cast<long long>(micros < 0 ? micros + 1000000 : micros));
      c_format += buf;
      ++i;
    } else if (format[i] == '%' && i + 1 < format.size()) {
      c_format += format.substr(i, 2);
      ++i;
    } else {
      c_format += format[i];
    }
  }
  if (c_format.empty()) return Value::string("");
  char out[2048];
  const size_t n = std::strftime(out, sizeof out, c_format.c_str(), &tm);
  if (n == 0) type_error("strftime_now: the formatted date is empty or too long");
  return Value::string(std::string(out, n));
}

Value g_unsupported(Renderer&, CallArgs&) {
  fail(ErrorKind::unsupported,
       "lipsum(), cycler() and joiner() are not supported in chat templates");
}

}  // namespace

Value find_global(std::string_view name) {
  static const std::vector<std::pair<std::string, Value>> globals = [] {
    std::vector<std::pair<std::string, Value>> g;
    auto add = [&](const char* n, GlobalFn fn) {
      g.emplace_back(n, Value::callable(std::make_shared<BuiltinFunction>(n, fn)));
    };
    add("range", g_range);
    add("dict", g_dict);
    add("namespace", g_namespace);
    add("raise_exception", g_raise_exception);
    add("strftime_now", g_strftime_now);
    add("lipsum", g_unsupported);
    add("cycler", g_unsupported);
    add("joiner", g_unsupported);
    return g;
  }();
  for (const auto& [n, v] : globals)
    if (n == name) return v;
  return Value();
}

}  // namespace braid::chat::jinja
