// Contract: exits 0 when dlsym(RTLD_NEXT, "malloc") called from the main program finds libc's
// malloc (the same as dlvsym(RTLD_NEXT, "malloc", <base glibc version>)), both through the
// default dlsym and through an explicit reference to the oldest dlsym version; 1 otherwise
// (details on stderr). A preload that exports dlsym must keep RTLD_NEXT relative to its caller.
#include <dlfcn.h>

#include <cstdio>

#if defined(__x86_64__)
#define CT_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define CT_GLIBC_BASE "GLIBC_2.17"
#else
#error "ct_dlsym_next knows the base glibc symbol version of x86_64 and aarch64 only"
#endif

// The pre-2.34 dlsym, as binaries built against older glibc reference it.
extern "C" void* ct_dlsym_base_version(void* handle, const char* name);
__asm__(".symver ct_dlsym_base_version,dlsym@" CT_GLIBC_BASE);

int main() {
  void* expected = dlvsym(RTLD_NEXT, "malloc", CT_GLIBC_BASE);
  void* plain = dlsym(RTLD_NEXT, "malloc");
  void* versioned = ct_dlsym_base_version(RTLD_NEXT, "malloc");
  if (expected && plain == expected && versioned == expected) return 0;
  std::fprintf(stderr, "ct_dlsym_next: dlvsym %p, dlsym %p, dlsym@" CT_GLIBC_BASE " %p\n", expected,
               plain, versioned);
  return 1;
}
