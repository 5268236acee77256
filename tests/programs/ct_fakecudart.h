// Contract: a miniature shared cudart (libct_fakecudart.so). On first use it loads the driver
// exactly as cudart does (gpa_loader.h), then cuInit(0). Calls return CUresult values (0 =
// success). Like cudart, a thread that never chose a device gets device 0's primary context on
// its first allocation, and ctFree(nullptr) succeeds without reaching the driver. The _ptsz
// functions are what code built with per-thread default streams calls: they use the driver's
// `_ptsz` entry points.
#pragma once

#include <cuda.h>

#include <cstddef>

#define CT_API __attribute__((visibility("default")))

extern "C" {

using ctError_t = int;

CT_API ctError_t ctInit(void);
CT_API ctError_t ctSetDevice(int device);
CT_API ctError_t ctMalloc(void** devPtr, size_t size);
CT_API ctError_t ctFree(void* devPtr);
CT_API ctError_t ctStreamCreate(CUstream* stream);
CT_API ctError_t ctMallocAsync(void** devPtr, size_t size, CUstream stream);
CT_API ctError_t ctFreeAsync(void* devPtr, CUstream stream);
CT_API ctError_t ctMallocAsync_ptsz(void** devPtr, size_t size, CUstream stream);
CT_API ctError_t ctFreeAsync_ptsz(void* devPtr, CUstream stream);

}  // extern "C"
