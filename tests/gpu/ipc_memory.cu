// CUDA IPC between two processes on a real GPU. The parent allocates `shared` (2 MiB, freed at
// the end) and `planted` (1 MiB, leaked on purpose: parent_leak()), exports `shared` with
// cudaIpcGetMemHandle and starts itself as a child (posix_spawn, so the child initializes CUDA on
// its own) with the handle in hex. The child opens the handle, writes through it with a kernel,
// closes it, opens it again and leaves that mapping open, then exits 0. Expected: the parent
// leaks 1,048,576 bytes in 1 allocation; the child allocates nothing, leaks nothing, and lists
// one imported mapping of 2 MiB; no anomalies in either.
#include <cuda_runtime.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

extern char** environ;

__global__ void fill(int* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = i;
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

__attribute__((noinline)) void* parent_leak(size_t n) {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, n));  // leaked on purpose
  return p;
}

int child(const char* hex) {
  cudaIpcMemHandle_t h{};
  if (std::strlen(hex) != 2 * sizeof h.reserved) return 4;
  for (size_t i = 0; i < sizeof h.reserved; ++i) {
    unsigned v = 0;
    std::sscanf(hex + 2 * i, "%2x", &v);
    h.reserved[i] = static_cast<char>(v);
  }
  CHECK(cudaSetDevice(0));
  void* p = nullptr;
  CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
  fill<<<(512 << 10) / 256, 256>>>(static_cast<int*>(p), 512 << 10);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaIpcCloseMemHandle(p));
  CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));  // left open
  std::printf("ipc child: done\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "child") == 0) return child(argv[2]);
  CHECK(cudaSetDevice(0));
  void* shared = nullptr;
  CHECK(cudaMalloc(&shared, 2 << 20));
  if (!parent_leak(1 << 20)) return 3;
  cudaIpcMemHandle_t h;
  CHECK(cudaIpcGetMemHandle(&h, shared));
  char hex[2 * sizeof h.reserved + 1];
  for (size_t i = 0; i < sizeof h.reserved; ++i) {
    std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(h.reserved[i]));
  }
  char child_arg[] = "child";
  char* args[] = {argv[0], child_arg, hex, nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, args, environ) != 0) return 3;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "ipc child failed: status 0x%x\n", status);
    return 3;
  }
  CHECK(cudaFree(shared));
  std::printf("ipc parent: done\n");
  return 0;
}
