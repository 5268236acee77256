#include "live/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "live/metrics_text.h"

namespace cumemtrace::collect {

namespace {

using Clock = std::chrono::steady_clock;

struct Endpoint {
  sockaddr_storage addr{};
  socklen_t len = 0;
  bool loopback = false;
};

// Parses the address part of the contract's forms; "" or why not.
std::string parse_endpoint(const std::string& spec, Endpoint& ep) {
  std::string host = "127.0.0.1", port = spec;
  if (!spec.empty() && spec.front() == '[') {
    const size_t close = spec.find("]:");
    if (close == std::string::npos) return "expected [ADDRESS]:PORT";
    host = spec.substr(1, close - 1);
    port = spec.substr(close + 2);
  } else if (const size_t colon = spec.rfind(':'); colon != std::string::npos) {
    if (colon > 0) host = spec.substr(0, colon);
    port = spec.substr(colon + 1);
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoul(port) > 65535) {
    return fmt::format("expected ADDRESS:PORT with a port 0-65535, got '{}'", spec);
  }
  const auto p = static_cast<uint16_t>(std::stoul(port));
  if (host == "localhost") host = "127.0.0.1";
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ep.addr);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ep.addr);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(p);
    ep.len = sizeof *v4;
    ep.loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(p);
    ep.len = sizeof *v6;
    ep.loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
  } else {
    return fmt::format("'{}' is not a numeric IP address (or localhost)", host);
  }
  return {};
}

std::string endpoint_text(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof buf);
    return fmt::format("[{}]:{}", buf, ntohs(v6->sin6_port));
  }
  const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
  inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof buf);
  return fmt::format("{}:{}", buf, ntohs(v4->sin_port));
}

std::string status_response(int code, std::string_view reason) {
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: "
      "close\r\n\r\n{}\n",
      code, reason, reason.size() + 1, reason);
}

bool icontains(std::string_view hay, std::string_view needle) {
  return std::search(hay.begin(), hay.end(), needle.begin(), needle.end(), [](char a, char b) {
           return std::tolower(static_cast<unsigned char>(a)) ==
                  std::tolower(static_cast<unsigned char>(b));
         }) != hay.end();
}

}  // namespace

struct MetricsServer::Connection {
  int fd = -1;
  Clock::time_point deadline;
  std::string in;
  // Waiting for a text that answers generation `wants` (0: not yet a complete request).
  uint64_t wants = 0;
  Clock::time_point fresh_until;
  MetricsFormat format = MetricsFormat::kPrometheus;
  // Writing: the head, then the body (shared with the published text).
  bool writing = false;
  std::string head;
  std::shared_ptr<const std::string> body;
  size_t sent = 0;
};

MetricsServer::~MetricsServer() {
  stop_ = true;
  if (thread_.joinable()) {
    const uint64_t one = 1;
    ssize_t w = ::write(wake_fd_, &one, sizeof one);
    (void)w;
    thread_.join();
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

std::string MetricsServer::open(const std::string& spec, bool allow_public) {
  Endpoint ep;
  if (auto why = parse_endpoint(spec, ep); !why.empty()) return why;
  if (!ep.loopback && !allow_public) {
    return fmt::format(
        "{} is not a loopback address: the metrics name programs, hosts and ranks; pass "
        "--metrics-public (CUMEMTRACE_METRICS_PUBLIC=1) to serve them there",
        spec);
  }
  listen_fd_ = ::socket(ep.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
  if (listen_fd_ < 0) return fmt::format("socket: {}", strerror(errno));
  const int on = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&ep.addr), ep.len) != 0 ||
      ::listen(listen_fd_, 64) != 0) {
    return fmt::format("cannot listen on {}: {}", spec, strerror(errno));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return fmt::format("eventfd: {}", strerror(errno));
  address_ = endpoint_text(bound);  // set last: start() serves only a server that opened
  // Before the loop's first text: the families without samples.
  texts_.prometheus = std::make_shared<std::string>(metrics_text({}, MetricsFormat::kPrometheus));
  texts_.openmetrics = std::make_shared<std::string>(metrics_text({}, MetricsFormat::kOpenMetrics));
  return {};
}

void MetricsServer::start() {
  if (listen_fd_ >= 0 && !thread_.joinable()) thread_ = std::thread([this] { serve(); });
}

uint64_t MetricsServer::pending() const {
  const uint64_t r = requested_.load(std::memory_order_acquire);
  return r > answered_.load(std::memory_order_acquire) ? r : 0;
}

void MetricsServer::publish(std::string prometheus, std::string openmetrics, uint64_t generation) {
  auto p = std::make_shared<const std::string>(std::move(prometheus));
  auto o = std::make_shared<const std::string>(std::move(openmetrics));
  {
    std::lock_guard<std::mutex> lock(mu_);
    texts_ = Texts{std::move(p), std::move(o), generation};
  }
  answered_.store(generation, std::memory_order_release);
  const uint64_t one = 1;
  ssize_t w = ::write(wake_fd_, &one, sizeof one);  // EAGAIN: a wake-up is pending already
  (void)w;
}

MetricsServer::Texts MetricsServer::texts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return texts_;
}

namespace {

// What a complete request asks for: 0 to serve the metrics, else the error status. `wait_ms`:
// how long it may wait for a fresh text, half of Prometheus' scrape timeout where it says one.
int judge_request(std::string_view req, MetricsFormat& format, int& wait_ms) {
  const size_t eol = req.find_first_of("\r\n");
  const std::string_view line = req.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.substr(sp2 + 1).rfind("HTTP/1.", 0) != 0) return 400;
  if (line.substr(0, sp1) != "GET") return 405;
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));
  if (target != "/metrics") return 404;
  // The Accept header's value (a header line starting "accept:", any case).
  for (size_t pos = eol; pos < req.size();) {
    const size_t start = req.find_first_not_of("\r\n", pos);
    if (start == std::string_view::npos) break;
    const size_t end = std::min(req.find_first_of("\r\n", start), req.size());
    const std::string_view h = req.substr(start, end - start);
    if (h.size() > 7 && icontains(h.substr(0, 7), "accept:") &&
        icontains(h, "application/openmetrics-text")) {
      format = MetricsFormat::kOpenMetrics;
    }
    constexpr std::string_view kTimeout = "x-prometheus-scrape-timeout-seconds:";
    if (h.size() > kTimeout.size() && icontains(h.substr(0, kTimeout.size()), kTimeout)) {
      const double s = std::strtod(std::string(h.substr(kTimeout.size())).c_str(), nullptr);
      if (s > 0) wait_ms = std::min(wait_ms, static_cast<int>(s * 500));
    }
    pos = end;
  }
  return 0;
}

const char* reason_of(int code) {
  switch (code) {
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Bad Request";
  }
}

}  // namespace

// Takes every waiting connection; over the cap, one is told 503 and closed at once.
void MetricsServer::accept_all(std::vector<Connection>& conns) {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    if (conns.size() >= kMaxConnections) {
      const std::string busy = status_response(503, reason_of(503));
      ssize_t w = ::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      (void)w;
      ::close(fd);
      continue;
    }
    Connection c;
    c.fd = fd;
    c.deadline = Clock::now() + std::chrono::milliseconds(kReadTimeoutMs);
    conns.push_back(std::move(c));
  }
}

void MetricsServer::serve() {
  std::vector<Connection> conns;
  std::vector<pollfd> pfds;
  char buf[4096];
  auto fail = [&](Connection& c, int code) {
    c.writing = true;
    c.head = status_response(code, reason_of(code));
    c.body.reset();
    c.sent = 0;
    c.deadline = Clock::now() + std::chrono::milliseconds(kWriteTimeoutMs);
  };
  auto respond = [&](Connection& c, const Texts& t) {
    c.body = c.format == MetricsFormat::kOpenMetrics ? t.openmetrics : t.prometheus;
    c.head = fmt::format(
        "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        metrics_content_type(c.format), c.body->size());
    c.writing = true;
    c.sent = 0;
    c.deadline = Clock::now() + std::chrono::milliseconds(kWriteTimeoutMs);
  };
  while (!stop_) {
    const auto now = Clock::now();
    auto next = now + std::chrono::seconds(1);
    for (const auto& c : conns) {
      next = std::min(next, c.deadline);
      if (c.wants && !c.writing) next = std::min(next, c.fresh_until);
    }
    pfds.clear();
    pfds.push_back({wake_fd_, POLLIN, 0});
    pfds.push_back({listen_fd_, POLLIN, 0});
    for (const auto& c : conns) {
      pfds.push_back({c.fd, static_cast<short>(c.writing ? POLLOUT : c.wants ? 0 : POLLIN), 0});
    }
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count();
    if (::poll(pfds.data(), pfds.size(), static_cast<int>(std::max<int64_t>(0, wait) + 1)) < 0 &&
        errno != EINTR) {
      spdlog::warn("metrics: poll failed: {}", strerror(errno));
      break;
    }
    if (pfds[0].revents) {
      uint64_t n;
      ssize_t r = ::read(wake_fd_, &n, sizeof n);
      (void)r;
    }
    // Reads and writes on the connections polled (conns[i] is pfds[i + 2]).
    for (size_t i = 0; i < conns.size(); ++i) {
      Connection& c = conns[i];
      if (!pfds[i + 2].revents) continue;
      if (c.writing) {
        std::string_view part = c.sent < c.head.size()
                                    ? std::string_view(c.head).substr(c.sent)
                                    : std::string_view(*c.body).substr(c.sent - c.head.size());
        const ssize_t w = ::send(c.fd, part.data(), part.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) c.sent += static_cast<size_t>(w);
        const size_t total = c.head.size() + (c.body ? c.body->size() : 0);
        if ((w < 0 && errno != EAGAIN && errno != EINTR) || c.sent >= total) {
          ::close(c.fd);
          c.fd = -1;
        }
        continue;
      }
      const ssize_t r = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        ::close(c.fd);
        c.fd = -1;
        continue;
      }
      if (r < 0) continue;
      c.in.append(buf, static_cast<size_t>(r));
      const size_t end = std::min(c.in.find("\r\n\r\n"), c.in.find("\n\n"));
      if (end == std::string::npos) {
        if (c.in.size() > kMaxRequestBytes) fail(c, 431);
        continue;
      }
      if (end > kMaxRequestBytes) {
        fail(c, 431);
      } else if (int wait_ms = kFreshWaitMs;
                 const int code = judge_request(c.in, c.format, wait_ms)) {
        fail(c, code);
      } else {
        c.wants = requested_.fetch_add(1, std::memory_order_acq_rel) + 1;
        c.fresh_until = Clock::now() + std::chrono::milliseconds(wait_ms);
        c.deadline = c.fresh_until;  // answered by then, with the newest text there is
      }
    }
    // Scrapes answered by the newest text, or that waited long enough for one.
    const Texts t = texts();
    const auto later = Clock::now();
    for (auto& c : conns) {
      if (c.fd < 0) continue;
      if (c.wants && !c.writing && (t.generation >= c.wants || later >= c.fresh_until)) {
        respond(c, t);
      } else if (later >= c.deadline) {
        if (c.writing || c.wants) {  // a reader that does not read: dropped
          ::close(c.fd);
          c.fd = -1;
        } else {
          fail(c, 408);
        }
      }
    }
    conns.erase(std::remove_if(conns.begin(), conns.end(), [](auto& c) { return c.fd < 0; }),
                conns.end());
    if (pfds[1].revents) accept_all(conns);
  }
  for (auto& c : conns) ::close(c.fd);
}

}  // namespace cumemtrace::collect
