#include "bench/profile/ncu_run.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/core.h>

#include "braid/error.h"

namespace braid::bench {

namespace {

bool is_executable_file(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

constexpr const char* kDefaultNcu = "/usr/local/cuda/bin/ncu";

}  // namespace

std::string find_ncu_in(const std::string& env_ncu, const std::string& path_env,
                        const std::function<bool(const std::string&)>& exists) {
  if (!env_ncu.empty()) {
    if (exists(env_ncu)) return env_ncu;
    throw Error(ErrorKind::unsupported,
                fmt::format("profile --ncu: $NCU is '{}', which is not an executable file", env_ncu));
  }
  std::stringstream dirs(path_env);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/ncu";
    if (exists(candidate)) return candidate;
  }
  if (exists(kDefaultNcu)) return kDefaultNcu;
  throw Error(ErrorKind::unsupported,
              fmt::format("profile --ncu: Nsight Compute (ncu) not found: $NCU is unset, no ncu on "
                          "PATH, none at {}; install Nsight Compute or set NCU=/path/to/ncu",
                          kDefaultNcu));
}

std::string find_ncu() {
  const char* env = std::getenv("NCU");
  const char* path = std::getenv("PATH");
  return find_ncu_in(env ? env : "", path ? path : "", is_executable_file);
}

std::string ncu_kernel_filter(const std::string& regex_list) {
  std::string filter;
  std::stringstream items(regex_list);
  int n = 0;
  for (std::string item; std::getline(items, item, ',');) {
    if (item.empty())
      throw Error(ErrorKind::invalid_argument,
                  fmt::format("profile --ncu: an empty kernel regex in '{}'", regex_list));
    filter += (n++ ? "|(" : "(") + item + ")";
  }
  if (n == 0 || regex_list.back() == ',')
    throw Error(ErrorKind::invalid_argument,
                fmt::format("profile --ncu: an empty kernel regex in '{}'", regex_list));
  return "regex:" + filter;
}

std::vector<std::string> ncu_command(const NcuRequest& r) {
  std::vector<std::string> argv = {r.ncu,
                                   "--clock-control", "none",
                                   "--profile-from-start", "off",
                                   "--kernel-name", ncu_kernel_filter(r.kernel_regexes),
                                   "--launch-count", fmt::format("{}", r.launch_count),
                                   "--csv", "--page", "raw", "--print-units", "base",
                                   "--print-kernel-base", "mangled",
                                   "--metrics", ncu_metric_list(),
                                   "--log-file", r.log_file,
                                   r.program};
  argv.insert(argv.end(), r.program_args.begin(), r.program_args.end());
  return argv;
}

std::string shell_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& a : argv) {
    bool plain = !a.empty();
    for (char c : a)
      plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_./=:,+@%", c));
    std::string quoted = "'";
    for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    line += (line.empty() ? "" : " ") + (plain ? a : quoted);
  }
  return line;
}

int run_command(const std::vector<std::string>& argv) {
  if (argv.empty()) throw Error(ErrorKind::invalid_argument, "run_command: no command");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0)
    throw Error(ErrorKind::io, fmt::format("cannot start {}: fork: {}", argv[0], std::strerror(errno)));
  if (pid == 0) {
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw Error(ErrorKind::io, fmt::format("waiting for {}: {}", argv[0], std::strerror(errno)));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

std::string self_executable() {
  std::vector<char> buf(4096);
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0)
    throw Error(ErrorKind::io, fmt::format("cannot read /proc/self/exe: {}", std::strerror(errno)));
  return std::string(buf.data(), static_cast<size_t>(n));
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::io, fmt::format("cannot read {}", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

NcuOutcome run_ncu(const NcuRequest& request) {
  NcuOutcome out;
  const auto argv = ncu_command(request);
  out.command = shell_line(argv);
  const int status = run_command(argv);
  std::string log;
  try {
    log = read_text_file(request.log_file);
  } catch (const Error&) {
    log.clear();  // reported below with the exit status
  }
  if (status != 0) {
    const std::string tail = log.size() > 3000 ? "..." + log.substr(log.size() - 3000) : log;
    throw Error(ErrorKind::io, fmt::format("profile --ncu: ncu exited with status {}; command:\n  {}\n"
                                           "its log ({}):\n{}",
                                           status, out.command, request.log_file, tail));
  }
  const NcuTable table = parse_ncu_csv(log);
  out.kernels = fold_ncu_table(table);
  out.missing_metrics = missing_ncu_metrics(table);
  return out;
}

}  // namespace braid::bench
