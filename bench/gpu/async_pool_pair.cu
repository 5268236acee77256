// cudaMallocAsync + cudaFreeAsync pool hits: the cheapest allocation path there is (about 1.4 us
// per pair bare on an H200), so it shows cumemtrace's per-event cost most clearly.
// Usage: async_pool_pair [PAIRS]; prints "ns_per_pair N".
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const int pairs = argc > 1 ? std::atoi(argv[1]) : 200000;
  cudaStream_t s;
  if (cudaStreamCreate(&s) != cudaSuccess) return 3;
  void* p = nullptr;
  for (int i = 0; i < 1000; ++i) {  // warm the pool
    cudaMallocAsync(&p, 4096, s);
    cudaFreeAsync(p, s);
  }
  cudaStreamSynchronize(s);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < pairs; ++i) {
    if (cudaMallocAsync(&p, 4096, s) != cudaSuccess) return 3;
    cudaFreeAsync(p, s);
  }
  cudaStreamSynchronize(s);
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  std::printf("ns_per_pair %.1f\n", ns / pairs);
  return 0;
}
