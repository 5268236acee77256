#include "driver/stream_devices.h"

#include <cuda.h>

#include <atomic>
#include <cstdio>

#include "core/log.h"
#include "driver/real_driver.h"

namespace cumemtrace::preload {

namespace {

std::atomic<uint64_t> g_generation{1};
std::atomic<uint64_t> g_asked{0};  // cuStreamGetDevice calls (misses of the per-thread memory)

struct Remembered {
  uint64_t stream;
  uint64_t generation;  // 0: nothing remembered
  int device;
};
// constinit: no TLS wrapper call (no dynamic initializer), as recorder.h's t_hook_depth.
thread_local constinit Remembered t_last __attribute__((tls_model("initial-exec"))) = {0, 0, -1};

bool is_default_stream(uint64_t s) noexcept {
  return s == 0 || s == reinterpret_cast<uint64_t>(CU_STREAM_LEGACY) ||
         s == reinterpret_cast<uint64_t>(CU_STREAM_PER_THREAD);
}

}  // namespace

int async_stream_device(uint64_t stream) noexcept {
  if (is_default_stream(stream)) return current_device();
  // Read before the driver is asked: a destruction in between leaves the answer stale, and the
  // next call asks again.
  const uint64_t generation = g_generation.load(std::memory_order_acquire);
  if (t_last.stream == stream && t_last.generation == generation) return t_last.device;
  g_asked.fetch_add(1, std::memory_order_relaxed);
  const int device = stream_device(stream);
  if (device < 0) return current_device();
  t_last = Remembered{stream, generation, device};
  return device;
}

void streams_changed() noexcept {
  g_generation.fetch_add(1, std::memory_order_acq_rel);
}

void print_stream_device_stats() noexcept {
  const uint64_t asked = g_asked.load(std::memory_order_relaxed);
  const uint64_t ends = g_generation.load(std::memory_order_relaxed) - 1;
  if (!asked && !ends) return;
  char line[160];
  snprintf(line, sizeof line,
           "stream devices: asked the driver %llu times; %llu stream or context ends forgot them",
           static_cast<unsigned long long>(asked), static_cast<unsigned long long>(ends));
  print_line(line);
}

}  // namespace cumemtrace::preload
