// Contract: the HTTP side of `run --metrics ADDR:PORT` (and CUMEMTRACE_METRICS under plain
// LD_PRELOAD): serves `GET /metrics` (a query string is ignored) with the text the collector's
// loop publishes (live/metrics_text.h), on a thread of its own, so that no scraper can hold up the
// loop that drains the traced processes' rings, and so the target never waits on a scraper.
//  - Address: "ADDR:PORT", "[ADDR6]:PORT", ":PORT" or "PORT" (the last two: 127.0.0.1); ADDR is
//    numeric or "localhost" (no name is resolved). A non-loopback address is refused unless
//    `allow_public` (run --metrics-public, CUMEMTRACE_METRICS_PUBLIC=1): the gauges name the
//    programs, hosts and ranks. Port 0 picks a free port; address() says which.
//  - Freshness: a scrape asks the loop for a new text (pending()); the loop builds one from its
//    live model at most every max(100 ms, 9 x the build's cost) and publishes it with the request
//    generation it answered; the scrape is answered with the first text that answers it, or after
//    kFreshWaitMs (half the scrape timeout Prometheus sends, when shorter) with the newest there
//    is (the loop may be busy draining, or building texts more often would cost it too much).
//  - Misbehaving clients get a status line and a closed connection, nothing else: not GET -> 405,
//    another path -> 404, a malformed request -> 400, a request over kMaxRequestBytes -> 431,
//    headers not complete within kReadTimeoutMs -> 408; a response not taken within
//    kWriteTimeoutMs is dropped. At most kMaxConnections at once; more are closed on accept. One
//    request per connection (Connection: close). Every socket is non-blocking.
//  - Prometheus' text format 0.0.4, or OpenMetrics 1.0 when the Accept header asks for it (as
//    Prometheus does).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace cumemtrace::collect {

class MetricsServer {
 public:
  static constexpr size_t kMaxConnections = 16;
  static constexpr size_t kMaxRequestBytes = 8192;
  static constexpr int kReadTimeoutMs = 5000;
  static constexpr int kWriteTimeoutMs = 10000;
  static constexpr int kFreshWaitMs = 1000;

  MetricsServer() = default;
  ~MetricsServer();  // stops the thread, closes every socket
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds and listens on `spec` (see the contract); "" on success, else why not (one line).
  std::string open(const std::string& spec, bool allow_public);
  // "127.0.0.1:9400", "[::1]:9400": where it listens, port 0 resolved.
  const std::string& address() const { return address_; }
  // Starts serving (after open; after any fork the caller makes).
  void start();

  // The loop's side. The newest request generation not yet answered, 0 when none waits.
  uint64_t pending() const;
  // A new text in both formats, answering requests up to `generation`.
  void publish(std::string prometheus, std::string openmetrics, uint64_t generation);

 private:
  struct Texts {
    std::shared_ptr<const std::string> prometheus, openmetrics;
    uint64_t generation = 0;
  };
  struct Connection;
  void serve();
  void accept_all(std::vector<Connection>& conns);
  Texts texts() const;

  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: a new text, or stop
  std::string address_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> requested_{0};  // requests that asked for a text
  std::atomic<uint64_t> answered_{0};   // the generation of the newest text
  mutable std::mutex mu_;               // guards texts_ (held only to copy or swap it)
  Texts texts_;
};

}  // namespace cumemtrace::collect
