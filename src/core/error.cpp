#include "braid/error.h"

namespace braid {

void throw_arg_error(ErrorKind kind, const char* op, const char* arg, const std::string& expected,
                     const std::string& given) {
  throw Error(kind, std::string(op) + ": argument '" + arg + "': expected " + expected + ", got " +
                        given);
}

}  // namespace braid
