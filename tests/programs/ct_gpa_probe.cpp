// Contract: prints, one line per lookup, exactly what the driver's lookup doors answer, so that a
// test can compare a run under the preload with one without it. Usage:
//   ct_gpa_probe NAME[:VERSION[:FLAGS]]...   (VERSION default 12000, FLAGS default 0)
// For each NAME, in this order:
//   "NAME v2 R S P"   cuGetProcAddress_v2(NAME, &fn, VERSION, FLAGS, &status)
//   "NAME v1 R P"     cuGetProcAddress(NAME, &fn, VERSION, FLAGS)
//   "NAME nullpfn R"  cuGetProcAddress_v2 with a null pfn
//   "NAME dlsym P"    dlsym(libcuda handle, NAME)
// R is the CUresult, S the symbol status (-1: left unwritten), P "set", "null" or "untouched"
// (fn still holds the sentinel it was given). Exits 0, or 3 if libcuda or its lookups are absent.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#undef cuGetProcAddress

namespace {

using GetProcAddressV2 = CUresult (*)(const char*, void**, int, cuuint64_t,
                                      CUdriverProcAddressQueryResult*);
using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t);

void* const kSentinel = reinterpret_cast<void*>(uintptr_t{0x5e17});

const char* describe(void* p) {
  return p == kSentinel ? "untouched" : p ? "set" : "null";
}

}  // namespace

int main(int argc, char** argv) {
  void* libcuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!libcuda) {
    std::fprintf(stderr, "ct: dlopen libcuda.so.1: %s\n", dlerror());
    return 3;
  }
  auto v2 = reinterpret_cast<GetProcAddressV2>(dlsym(libcuda, "cuGetProcAddress_v2"));
  auto v1 = reinterpret_cast<GetProcAddress>(dlsym(libcuda, "cuGetProcAddress"));
  if (!v2 || !v1) {
    std::fprintf(stderr, "ct: libcuda.so.1 has no cuGetProcAddress[_v2]\n");
    return 3;
  }
  for (int i = 1; i < argc; ++i) {
    std::string spec = argv[i];
    int version = 12000;
    cuuint64_t flags = 0;
    const size_t c1 = spec.find(':');
    if (c1 != std::string::npos) {
      char* end = nullptr;
      version = static_cast<int>(std::strtol(spec.c_str() + c1 + 1, &end, 10));
      if (*end == ':') flags = std::strtoull(end + 1, nullptr, 10);
      spec.resize(c1);
    }
    const char* name = spec.c_str();
    void* fn = kSentinel;
    auto status = static_cast<CUdriverProcAddressQueryResult>(-1);
    CUresult r = v2(name, &fn, version, flags, &status);
    std::printf("%s v2 %d %d %s\n", name, static_cast<int>(r), static_cast<int>(status),
                describe(fn));
    fn = kSentinel;
    r = v1(name, &fn, version, flags);
    std::printf("%s v1 %d %s\n", name, static_cast<int>(r), describe(fn));
    r = v2(name, nullptr, version, flags, &status);
    std::printf("%s nullpfn %d\n", name, static_cast<int>(r));
    std::printf("%s dlsym %s\n", name, describe(dlsym(libcuda, name)));
  }
  return 0;
}
