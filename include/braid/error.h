// Errors: every failure names the operation, the argument, what was expected and what was given.
#pragma once

#include <stdexcept>
#include <string>

namespace braid {

// Mirrors braid_status in braid.h (same numbering).
enum class ErrorKind : int {
  invalid_argument = 1,  // a value out of range, inconsistent sizes between arguments
  shape = 2,
  dtype = 3,
  device = 4,
  cuda = 5,
  cublas = 6,
  out_of_memory = 7,
  unsupported = 8,  // a valid request this build or GPU cannot serve
  io = 9,
  internal = 10,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// "<op>: argument '<arg>': expected <expected>, got <given>"
[[noreturn]] void throw_arg_error(ErrorKind kind, const char* op, const char* arg,
                                  const std::string& expected, const std::string& given);

}  // namespace braid
