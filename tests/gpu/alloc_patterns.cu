// A CUDA program built with nvcc's defaults (static cudart) with known allocations and planted
// leaks, for the real-GPU tests. Expected on device 0 at exit: 2 MiB from load_weights() and
// 4 MiB from cudaMallocAsync in make_workspace() still live; everything else freed.
#include <cuda_runtime.h>

#include <cstdio>

__global__ void fill(float* p) { p[threadIdx.x] = 1.0f; }

#define CHECK(x)                                                           \
  do {                                                                     \
    cudaError_t e = (x);                                                   \
    if (e != cudaSuccess) {                                                \
      std::fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(e)); \
      return 3;                                                            \
    }                                                                      \
  } while (0)

__attribute__((noinline)) void* load_weights(size_t n) {
  void* p = nullptr;
  cudaMalloc(&p, n);  // leaked on purpose
  return p;
}

__attribute__((noinline)) void* make_workspace(cudaStream_t s, size_t n) {
  void* p = nullptr;
  cudaMallocAsync(&p, n, s);  // leaked on purpose
  return p;
}

int main() {
  void* a = nullptr;
  CHECK(cudaMalloc(&a, 1 << 20));
  void* b = load_weights(2 << 20);
  if (!b) return 3;
  CHECK(cudaFree(a));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  void* c = nullptr;
  CHECK(cudaMallocAsync(&c, 3 << 20, s));
  CHECK(cudaFreeAsync(c, s));
  if (!make_workspace(s, 4 << 20)) return 3;
  CHECK(cudaStreamSynchronize(s));
  void* h = nullptr;
  CHECK(cudaMallocHost(&h, 1 << 20));
  CHECK(cudaFreeHost(h));
  void* m = nullptr;
  CHECK(cudaMallocManaged(&m, 1 << 20));
  CHECK(cudaFree(m));
  fill<<<1, 32>>>(static_cast<float*>(b));
  CHECK(cudaDeviceSynchronize());
  return 0;
}
