// CUDA graph memory on a real GPU, the same steps as the fake-driver scenario `graph`
// (tests/programs/scenarios.h), through the runtime API (static cudart by default):
//  (1) explicit memory nodes: graph G1 allocates a (1 MiB) and b (2 MiB) and frees b; launched,
//      a freed with cudaFree outside any graph, launched again.
//  (2) stream capture: cudaMallocAsync c (4 MiB), a kernel on c, cudaFreeAsync(a) (memory G1
//      made), cudaMallocAsync d (512 KiB, leaked: capture_leak()); instantiated with
//      AutoFreeOnLaunch, launched once; c freed with cudaFreeAsync outside the capture.
//  (3) cudaGraphAddNode with memory-allocation parameters: e (256 KiB, leaked: node_leak()),
//      instantiated with AutoFreeOnLaunch and launched three times.
//  (4) cudaDeviceGraphMemTrim, every graph and executable graph destroyed.
// Expected at exit: 786,432 bytes leaked in 2 graph allocations (d and e), no anomalies; 9
// allocations and 7 frees on device 0; peak 5 MiB (a and c during the second graph).
#include <cuda_runtime.h>

#include <cstdio>

__global__ void fill(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = 1.0f;
}

#define CHECK(x)                                                             \
  do {                                                                       \
    cudaError_t err_ = (x);                                                  \
    if (err_ != cudaSuccess) {                                               \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, \
                   cudaGetErrorString(err_));                                \
      std::exit(3);                                                          \
    }                                                                        \
  } while (0)

cudaMemPoolProps device0_pool() {
  cudaMemPoolProps p{};
  p.allocType = cudaMemAllocationTypePinned;
  p.location.type = cudaMemLocationTypeDevice;
  p.location.id = 0;
  return p;
}

__attribute__((noinline)) void* capture_leak(cudaStream_t s, size_t n) {
  void* p = nullptr;
  CHECK(cudaMallocAsync(&p, n, s));  // captured: an allocation node, leaked on purpose
  return p;
}

__attribute__((noinline)) cudaGraphNode_t node_leak(cudaGraph_t g, size_t n) {
  cudaGraphNodeParams p{};
  p.type = cudaGraphNodeTypeMemAlloc;
  p.alloc.poolProps = device0_pool();
  p.alloc.bytesize = n;
  cudaGraphNode_t node = nullptr;
  CHECK(cudaGraphAddNode(&node, g, nullptr, nullptr, 0, &p));  // leaked on purpose
  return node;
}

int main() {
  CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // (1)
  cudaGraph_t g1;
  CHECK(cudaGraphCreate(&g1, 0));
  cudaMemAllocNodeParams pa{}, pb{};
  pa.poolProps = pb.poolProps = device0_pool();
  pa.bytesize = 1 << 20;
  pb.bytesize = 2 << 20;
  cudaGraphNode_t na, nb, nfb;
  CHECK(cudaGraphAddMemAllocNode(&na, g1, nullptr, 0, &pa));
  CHECK(cudaGraphAddMemAllocNode(&nb, g1, &na, 1, &pb));
  CHECK(cudaGraphAddMemFreeNode(&nfb, g1, &nb, 1, pb.dptr));
  cudaGraphExec_t e1;
  CHECK(cudaGraphInstantiate(&e1, g1, 0));
  CHECK(cudaGraphLaunch(e1, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaFree(pa.dptr));  // graph memory freed outside any graph
  CHECK(cudaGraphLaunch(e1, s));
  CHECK(cudaStreamSynchronize(s));

  // (2)
  cudaGraph_t g2;
  void* c = nullptr;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK(cudaMallocAsync(&c, 4 << 20, s));
  fill<<<(1 << 20) / 256, 256, 0, s>>>(static_cast<float*>(c), 1 << 20);
  CHECK(cudaFreeAsync(pa.dptr, s));  // frees what G1 made
  void* d = capture_leak(s, 512 << 10);
  fill<<<(128 << 10) / 256, 256, 0, s>>>(static_cast<float*>(d), 128 << 10);
  CHECK(cudaStreamEndCapture(s, &g2));
  cudaGraphExec_t e2;
  CHECK(cudaGraphInstantiate(&e2, g2, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  CHECK(cudaGraphLaunch(e2, s));
  CHECK(cudaFreeAsync(c, s));  // graph memory freed stream-ordered, outside the capture
  CHECK(cudaStreamSynchronize(s));

  // (3)
  cudaGraph_t g3;
  CHECK(cudaGraphCreate(&g3, 0));
  node_leak(g3, 256 << 10);
  cudaGraphExec_t e3;
  CHECK(cudaGraphInstantiate(&e3, g3, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(e3, s));
  CHECK(cudaStreamSynchronize(s));

  // (4)
  CHECK(cudaDeviceGraphMemTrim(0));
  for (cudaGraphExec_t x : {e1, e2, e3}) CHECK(cudaGraphExecDestroy(x));
  for (cudaGraph_t x : {g1, g2, g3}) CHECK(cudaGraphDestroy(x));
  CHECK(cudaStreamDestroy(s));
  std::printf("graph_memory: done\n");
  return 0;
}
