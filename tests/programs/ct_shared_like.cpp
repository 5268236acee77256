// Contract: behaves like a program linked with shared cudart: it links libct_fakecudart.so (never
// libcuda) and allocates only through its runtime-style calls, so every driver call happens in
// that library, through pointers it got from cuGetProcAddress_v2. Offers the scenarios that need
// only init, devices, plain and async allocations (basic, oom, badfree, threads and the
// process-lifecycle ones); the others exit 2.
#include "ct_fakecudart.h"
#include "scenarios.h"

namespace cumemtrace::testprog {
namespace {

CUresult status(ctError_t e) {
  return static_cast<CUresult>(e);
}

CUresult init() {
  return status(ctInit());
}

CUresult set_device(int ordinal) {
  return status(ctSetDevice(ordinal));
}

// Takes the result first: the pointer is only written by the call that produced `e`.
CUresult store(ctError_t e, void* p, CUdeviceptr* out) {
  if (e == 0) *out = reinterpret_cast<CUdeviceptr>(p);
  return status(e);
}

CUresult mem_alloc(CUdeviceptr* out, size_t size) {
  void* p = nullptr;
  const ctError_t e = ctMalloc(&p, size);
  return store(e, p, out);
}

CUresult mem_free(CUdeviceptr p) {
  return status(ctFree(reinterpret_cast<void*>(p)));
}

CUresult stream_create(CUstream* stream, unsigned int /*flags*/) {
  return status(ctStreamCreate(stream));
}

CUresult mem_alloc_async(CUdeviceptr* out, size_t size, CUstream stream) {
  void* p = nullptr;
  const ctError_t e = ctMallocAsync(&p, size, stream);
  return store(e, p, out);
}

CUresult mem_free_async(CUdeviceptr p, CUstream stream) {
  return status(ctFreeAsync(reinterpret_cast<void*>(p), stream));
}

CUresult mem_alloc_async_ptsz(CUdeviceptr* out, size_t size, CUstream stream) {
  void* p = nullptr;
  const ctError_t e = ctMallocAsync_ptsz(&p, size, stream);
  return store(e, p, out);
}

CUresult mem_free_async_ptsz(CUdeviceptr p, CUstream stream) {
  return status(ctFreeAsync_ptsz(reinterpret_cast<void*>(p), stream));
}

Driver table() {
  Driver d{};
  d.init = init;
  d.setDevice = set_device;
  d.memAlloc = mem_alloc;
  d.memFree = mem_free;
  d.streamCreate = stream_create;
  d.memAllocAsync = mem_alloc_async;
  d.memFreeAsync = mem_free_async;
  d.memAllocAsyncPtsz = mem_alloc_async_ptsz;
  d.memFreeAsyncPtsz = mem_free_async_ptsz;
  return d;
}

}  // namespace
}  // namespace cumemtrace::testprog

int main(int argc, char** argv) {
  return cumemtrace::testprog::run_scenario(cumemtrace::testprog::table(), argc, argv);
}
