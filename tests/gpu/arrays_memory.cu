// CUDA arrays and external memory on a real GPU (runtime API, static cudart; -lcuda for the VMM
// export): a = cudaMallocArray 1024 x 256 float4 (4 MiB, freed), b = cudaMalloc3DArray
// 64 x 64 x 16 uchar (64 KiB, leaked: leak_array()), c = cudaMallocMipmappedArray 512 x 512
// float, 3 levels (1,376,256 B of texels, leaked: leak_mipmap()). Then external memory: a 2 MiB
// cuMemCreate allocation exported as a POSIX file descriptor is imported with
// cudaImportExternalMemory (OpaqueFd), a 1 MiB buffer mapped from it and freed with cudaFree,
// and the external memory destroyed; where the driver refuses that import the program prints
// "external: unsupported <error>" and goes on. Prints "driver delta NAME BYTES" (cudaMemGetInfo
// free before minus after each array allocation: the driver's real cost, page-granular).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                             \
  do {                                                                       \
    cudaError_t err_ = (x);                                                  \
    if (err_ != cudaSuccess) {                                               \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #x, \
                   cudaGetErrorString(err_));                                \
      std::exit(3);                                                          \
    }                                                                        \
  } while (0)

size_t free_bytes() {
  size_t f = 0, t = 0;
  CHECK(cudaMemGetInfo(&f, &t));
  return f;
}

__attribute__((noinline)) cudaArray_t leak_array() {
  cudaArray_t b = nullptr;
  cudaChannelFormatDesc ch = cudaCreateChannelDesc<unsigned char>();
  CHECK(cudaMalloc3DArray(&b, &ch, make_cudaExtent(64, 64, 16)));  // leaked on purpose
  return b;
}

__attribute__((noinline)) cudaMipmappedArray_t leak_mipmap() {
  cudaMipmappedArray_t c = nullptr;
  cudaChannelFormatDesc ch = cudaCreateChannelDesc<float>();
  CHECK(cudaMallocMipmappedArray(&c, &ch, make_cudaExtent(512, 512, 0), 3));  // leaked
  return c;
}

void external_memory() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h = 0;
  if (cuMemCreate(&h, 2 << 20, &prop, 0) != CUDA_SUCCESS) {
    std::printf("external: unsupported cuMemCreate\n");
    return;
  }
  int fd = -1;
  if (cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
      CUDA_SUCCESS) {
    std::printf("external: unsupported export\n");
    cuMemRelease(h);
    return;
  }
  cudaExternalMemoryHandleDesc desc{};
  desc.type = cudaExternalMemoryHandleTypeOpaqueFd;
  desc.handle.fd = fd;
  desc.size = 2 << 20;
  cudaExternalMemory_t ext = nullptr;
  cudaError_t e = cudaImportExternalMemory(&ext, &desc);
  if (e != cudaSuccess) {
    std::printf("external: unsupported %s\n", cudaGetErrorString(e));
    cudaGetLastError();
    cuMemRelease(h);
    return;
  }
  cudaExternalMemoryBufferDesc buf{};
  buf.size = 1 << 20;
  void* p = nullptr;
  CHECK(cudaExternalMemoryGetMappedBuffer(&p, ext, &buf));
  CHECK(cudaFree(p));
  CHECK(cudaDestroyExternalMemory(ext));
  cuMemRelease(h);
  std::printf("external: imported 2097152 mapped 1048576\n");
}

int main() {
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));
  cudaChannelFormatDesc f4 = cudaCreateChannelDesc<float4>();
  size_t before = free_bytes();
  cudaArray_t a = nullptr;
  CHECK(cudaMallocArray(&a, &f4, 1024, 256));
  std::printf("driver delta a %zu\n", before - free_bytes());
  before = free_bytes();
  leak_array();
  std::printf("driver delta b %zu\n", before - free_bytes());
  before = free_bytes();
  leak_mipmap();
  std::printf("driver delta c %zu\n", before - free_bytes());
  CHECK(cudaFreeArray(a));
  external_memory();
  std::printf("arrays: done\n");
  return 0;
}
