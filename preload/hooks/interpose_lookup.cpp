// The two doors through which CUDA code finds driver functions: dlsym (static and shared cudart
// fetch cuGetProcAddress_v2 this way) and cuGetProcAddress[_v2] (the whole driver table, plus
// cudaGetDriverEntryPoint). Both call the real lookup first, then swap in our hook when the
// returned pointer is one we interpose (hook_table.h).
#include <cuda.h>
#include <dlfcn.h>

#include <cstring>

#include "core/export.h"
#include "driver/real_driver.h"
#include "hooks/hook_table.h"

#undef cuGetProcAddress

namespace pl = cumemtrace::preload;
using pl::HookId;

namespace {

// Driver entry points are "cu" followed by an upper-case letter; cuBLAS, cuDNN, cuFFT... are not.
inline bool is_driver_name(const char* name) {
  return name && name[0] == 'c' && name[1] == 'u' && name[2] >= 'A' && name[2] <= 'Z';
}

}  // namespace

// glibc resolves RTLD_NEXT relative to the caller's return address: that path must stay a tail
// call (a jmp, so the caller is the application's), which tests/e2e checks in the disassembly.
CUMEMTRACE_EXPORT void* dlsym(void* handle, const char* name) {
  pl::DlsymFn real = pl::real_dlsym();
  if (!real) return nullptr;
  if (handle == RTLD_NEXT || !is_driver_name(name)) return real(handle, name);
  void* p = real(handle, name);
  if (!p) return p;
  if (std::strcmp(name, "cuGetProcAddress_v2") == 0) {
    pl::set_real(HookId::k_cuGetProcAddress_v2, p);
  } else if (std::strcmp(name, "cuGetProcAddress") == 0) {
    pl::set_real(HookId::k_cuGetProcAddress, p);
  }
  return pl::route(p);
}

CUMEMTRACE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                               cuuint64_t flags,
                                               CUdriverProcAddressQueryResult* symbolStatus) {
  using Fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto fn = reinterpret_cast<Fn>(pl::real(HookId::k_cuGetProcAddress_v2));
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = fn(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (r == CUDA_SUCCESS && pfn) *pfn = pl::route(*pfn);
  return r;
}

// The CUDA 11.3-11.8 form (no symbolStatus). Only handed out when the real driver returned the
// real 4-argument function, so callers always get the arity they asked for.
CUMEMTRACE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                            cuuint64_t flags) {
  using Fn = CUresult (*)(const char*, void**, int, cuuint64_t);
  auto fn = reinterpret_cast<Fn>(pl::real(HookId::k_cuGetProcAddress));
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r = fn(symbol, pfn, cudaVersion, flags);
  if (r == CUDA_SUCCESS && pfn) *pfn = pl::route(*pfn);
  return r;
}
