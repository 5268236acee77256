// What each piece of a stack-less cumemtrace event costs on this host, measured bare (no
// preload): the driver query the allocation hooks make (cuCtxGetDevice, or cuPointerGetAttribute
// for cuMemAllocFromPoolAsync), the alternatives a per-context cache would need
// (cuCtxGetCurrent), the clocks the recorder reads (rdtsc, or CLOCK_MONOTONIC where the
// clocksource is not the TSC), the thread id syscall the
// recorder makes once per thread, one uncontended atomic compare-and-swap (the ring ticket), and
// the pool-hit pair itself through the runtime and through the driver entry points the runtime
// calls. Subtracting these from (traced - bare) in recording_overhead.sh tells what is left for
// the recorder and the ring (cache-line traffic with the collector included).
// Usage: hook_costs [N=1000000]; prints "name ns_per_call" lines.
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <x86intrin.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

template <typename F>
double per_call_ns(long n, F&& f) {
  for (long i = 0; i < n / 10; ++i) f();  // warm
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) f();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(n);
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 1000000;
  cudaStream_t s;
  if (cudaSetDevice(0) != cudaSuccess || cudaStreamCreate(&s) != cudaSuccess) return 3;
  void* p = nullptr;
  if (cudaMallocAsync(&p, 4096, s) != cudaSuccess) return 3;
  cudaFreeAsync(p, s);
  cudaStreamSynchronize(s);

  volatile int sink = 0;
  std::printf("cuCtxGetDevice %.1f\n", per_call_ns(n, [&] {
                CUdevice d;
                cuCtxGetDevice(&d);
                sink = d;
              }));
  std::printf("cuCtxGetCurrent %.1f\n", per_call_ns(n, [&] {
                CUcontext c;
                cuCtxGetCurrent(&c);
                sink = c != nullptr;
              }));
  CUdeviceptr dp = 0;
  cuMemAllocAsync(&dp, 4096, reinterpret_cast<CUstream>(s));
  std::printf("cuPointerGetAttribute(DEVICE_ORDINAL) %.1f\n", per_call_ns(n, [&] {
                int ord = -1;
                cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dp);
                sink = ord;
              }));
  cuMemFreeAsync(dp, reinterpret_cast<CUstream>(s));
  std::printf("clock_gettime(CLOCK_MONOTONIC) %.1f\n", per_call_ns(n, [&] {
                timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                sink = static_cast<int>(ts.tv_nsec);
              }));
  // The pool sampler's interval check on every pool allocation (preload/record/pool_sampler.cpp).
  std::printf("clock_gettime(CLOCK_MONOTONIC_COARSE) %.1f\n", per_call_ns(n, [&] {
                timespec ts;
                clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
                sink = static_cast<int>(ts.tv_nsec);
              }));
  // What an event reads instead where the clocksource is the TSC (preload/core/event_clock.h).
  std::printf("rdtsc %.1f\n", per_call_ns(n, [&] { sink = static_cast<int>(__rdtsc()); }));
  std::printf("gettid-syscall %.1f\n",
              per_call_ns(n / 10, [&] { sink = static_cast<int>(syscall(SYS_gettid)); }));
  std::atomic<unsigned long> ticket{0};
  std::printf("atomic-cas %.1f\n", per_call_ns(n, [&] {
                unsigned long t = ticket.load(std::memory_order_relaxed);
                ticket.compare_exchange_strong(t, t + 1, std::memory_order_acq_rel);
              }));
  std::printf("cudaMallocAsync+cudaFreeAsync %.1f\n", per_call_ns(n / 5, [&] {
                cudaMallocAsync(&p, 4096, s);
                cudaFreeAsync(p, s);
              }));
  std::printf("cuMemAllocAsync+cuMemFreeAsync %.1f\n", per_call_ns(n / 5, [&] {
                cuMemAllocAsync(&dp, 4096, reinterpret_cast<CUstream>(s));
                cuMemFreeAsync(dp, reinterpret_cast<CUstream>(s));
              }));
  cudaStreamSynchronize(s);
  return sink == 12345678;
}
