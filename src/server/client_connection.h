// Whether the client of the request being handled has gone away, so its sequences can be freed at
// once instead of when its output is next written.
//
// cpp-httplib does not hand a handler its connection's socket. The handler runs while that
// connection is open, so the socket is found once among the process's descriptors by its two
// addresses (the ones the request carries), then polled for the peer's hang-up.
#pragma once

namespace httplib {
struct Request;
}

namespace braid::server {

class ClientConnection {
 public:
  explicit ClientConnection(const httplib::Request& request);
  // True once the peer closed or reset the connection (false when the socket was not found).
  bool gone() const;
  bool found() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace braid::server
