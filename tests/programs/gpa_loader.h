// Contract: how cudart (static and shared alike) reaches the driver, reproduced for the test
// programs: dlopen("libcuda.so.1", RTLD_NOW), dlsym(handle, "cuGetProcAddress_v2"), then every
// entry point through cuGetProcAddress_v2(base name, &fn, version, flags, &status), with the
// versions and flags cudart 13 uses (cuda-interposition.md §1.1). A name the driver reports as
// not found gets a stand-in that returns CUDA_ERROR_NOT_FOUND, as cudart fails only the calls
// that need it; after a successful load no entry is null.
#pragma once

#include <cuda.h>

#include <cstddef>

#include "driver_calls.h"

namespace cumemtrace::testprog {

// What cudart looks up besides the scenarios' calls.
struct DriverEntryPoints : DriverCalls {
  CUresult (*init)(unsigned int);
  CUresult (*deviceGet)(CUdevice*, int);
  CUresult (*primaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*ctxSetCurrent)(CUcontext);
  CUresult (*ctxGetCurrent)(CUcontext*);
  CUresult (*memGetInfo)(size_t*, size_t*);
  CUresult (*memAllocFromPoolAsync)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
  CUresult (*memAllocFromPoolAsyncPtsz)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
  CUresult (*memPoolCreate)(CUmemoryPool*, const CUmemPoolProps*);
  CUresult (*deviceGetMemPool)(CUmemoryPool*, CUdevice);
  CUresult (*memPoolTrimTo)(CUmemoryPool, size_t);
};

// Fills `out`; false (reason on stderr) if the driver, its cuGetProcAddress_v2, or a lookup
// fails for any reason other than the name being unknown to the driver.
bool load_driver_entry_points(DriverEntryPoints* out);

}  // namespace cumemtrace::testprog
