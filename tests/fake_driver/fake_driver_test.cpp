// Contract: checks the fake driver the way the preload and the test programs use it: dlopen'd,
// resolved through cuGetProcAddress, compared by pointer identity with dlsym of the versioned
// names. Runs under the environment add_test gives it (2 devices, a 64 MiB limit, cuMemCreate and
// cuMemMap reported missing); the [fail_nth] case runs alone with FAKE_CUDA_FAIL_NTH_ALLOC=3.
#include <cuda.h>
#include <dlfcn.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <thread>

namespace {

constexpr size_t kMiB = size_t{1} << 20;

using GpaV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using Gpa = CUresult (*)(const char*, void**, int, cuuint64_t);

struct Fake {
  void* handle = nullptr;
  GpaV2 gpa = nullptr;
  Gpa gpa_legacy = nullptr;
  CUresult alloc_before_init = CUDA_SUCCESS;

  void* sym(const char* name) const { return dlsym(handle, name); }

  template <typename Fn>
  Fn fn(const char* name) const {
    void* p = sym(name);
    REQUIRE(p != nullptr);
    return reinterpret_cast<Fn>(p);
  }
};

// Loads the fake once per process; records what an allocation does before cuInit, then inits.
const Fake& fake() {
  static const Fake f = [] {
    Fake x;
    x.handle = dlopen(FAKE_CUDA_LIBRARY, RTLD_NOW);
    REQUIRE(x.handle != nullptr);
    x.gpa = x.fn<GpaV2>("cuGetProcAddress_v2");
    x.gpa_legacy = x.fn<Gpa>("cuGetProcAddress");
    CUdeviceptr p = 0;
    x.alloc_before_init = x.fn<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2")(&p, kMiB);
    REQUIRE(x.fn<CUresult (*)(unsigned)>("cuInit")(0) == CUDA_SUCCESS);
    return x;
  }();
  return f;
}

// Makes device `dev`'s primary context current on this thread.
void use_device(int dev) {
  const Fake& f = fake();
  CUcontext ctx = nullptr;
  REQUIRE(f.fn<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain")(&ctx, dev) ==
          CUDA_SUCCESS);
  REQUIRE(ctx != nullptr);
  REQUIRE(f.fn<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(ctx) == CUDA_SUCCESS);
}

int device_of(CUdeviceptr p) {
  int ordinal = -1;
  auto attr =
      fake().fn<CUresult (*)(void*, CUpointer_attribute, CUdeviceptr)>("cuPointerGetAttribute");
  if (attr(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p) != CUDA_SUCCESS) return -1;
  return ordinal;
}

struct Expect {
  const char* base;
  int version;
  cuuint64_t flags;
  const char* exported;  // the versioned name the lookup must be identical to
};

}  // namespace

// Stands in for the preload's export of the same name (this executable exports its symbols):
// the fake, linked -Bsymbolic, must keep handing out its own function.
extern "C" CUresult cuMemAlloc_v2(CUdeviceptr*, size_t) {
  return CUDA_ERROR_UNKNOWN;
}

TEST_CASE("calls before cuInit fail with NOT_INITIALIZED") {
  CHECK(fake().alloc_before_init == CUDA_ERROR_NOT_INITIALIZED);
}

TEST_CASE("cuGetProcAddress hands out the driver's own versioned exports") {
  const Fake& f = fake();
  const Expect cases[] = {
      {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
      {"cuMemAlloc", 3010, 0, "cuMemAlloc"},
      {"cuMemAllocPitch", 3020, 0, "cuMemAllocPitch_v2"},
      {"cuMemAllocPitch", 2000, 0, "cuMemAllocPitch"},
      {"cuMemFree", 3020, 0, "cuMemFree_v2"},
      {"cuMemFree", 2000, 0, "cuMemFree"},
      {"cuMemGetInfo", 12000, 0, "cuMemGetInfo_v2"},
      {"cuMemGetInfo", 3000, 0, "cuMemGetInfo"},
      {"cuMemAllocHost", 3020, 0, "cuMemAllocHost_v2"},
      {"cuMemAllocHost", 2000, 0, "cuMemAllocHost"},
      {"cuStreamDestroy", 12000, 0, "cuStreamDestroy_v2"},
      {"cuStreamDestroy", 3020, 0, "cuStreamDestroy"},
      {"cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2"},
      {"cuDevicePrimaryCtxRelease", 10020, 0, "cuDevicePrimaryCtxRelease"},
      {"cuMemAllocManaged", 6000, 0, "cuMemAllocManaged"},
      {"cuMemHostAlloc", 2020, 0, "cuMemHostAlloc"},
      {"cuMemFreeHost", 2000, 0, "cuMemFreeHost"},
      {"cuMemAllocAsync", 11020, 0, "cuMemAllocAsync"},
      {"cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuMemAllocAsync_ptsz"},
      {"cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemAllocAsync"},
      {"cuMemAllocFromPoolAsync", 11020, 0, "cuMemAllocFromPoolAsync"},
      {"cuMemAllocFromPoolAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuMemAllocFromPoolAsync_ptsz"},
      {"cuMemFreeAsync", 11020, 0, "cuMemFreeAsync"},
      {"cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuMemFreeAsync_ptsz"},
      {"cuStreamIsCapturing", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
       "cuStreamIsCapturing_ptsz"},
      {"cuMemPoolCreate", 11020, 0, "cuMemPoolCreate"},
      {"cuMemRelease", 12000, 0, "cuMemRelease"},
      {"cuMemAddressReserve", 12000, 0, "cuMemAddressReserve"},
      {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
      {"cuGetProcAddress", 11030, 0, "cuGetProcAddress"},
      {"cuInit", 12000, 0, "cuInit"},
      {"cuMemAlloc", 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, "cuMemAlloc_v2"},
  };
  for (const Expect& e : cases) {
    INFO(e.base << " v" << e.version << " flags " << e.flags << " -> " << e.exported);
    void* expected = f.sym(e.exported);
    REQUIRE(expected != nullptr);
    void* p = nullptr;
    auto status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CHECK(f.gpa(e.base, &p, e.version, e.flags, &status) == CUDA_SUCCESS);
    CHECK(status == CU_GET_PROC_ADDRESS_SUCCESS);
    CHECK(p == expected);
    void* legacy = nullptr;
    CHECK(f.gpa_legacy(e.base, &legacy, e.version, e.flags) == CUDA_SUCCESS);
    CHECK(legacy == expected);
  }
  CHECK(f.sym("cuMemAlloc") != f.sym("cuMemAlloc_v2"));
  CHECK(f.sym("cuMemAlloc_v2") != reinterpret_cast<void*>(&::cuMemAlloc_v2));
  CHECK(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2") == reinterpret_cast<void*>(&::cuMemAlloc_v2));
  CHECK(f.sym("cuMemAllocAsync") != f.sym("cuMemAllocAsync_ptsz"));
}

TEST_CASE("cuGetProcAddress reports what it cannot give") {
  const Fake& f = fake();
  struct Miss {
    const char* base;
    int version;
    CUdriverProcAddressQueryResult status;
  };
  const Miss cases[] = {
      {"cuMemAllocAsync", 11010, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
      {"cuGetProcAddress", 11020, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
      {"cuMemAddressReserve", 10010, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT},
      {"cuNoSuchFunction", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
      {"cuMemAlloc_v2", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
      // FAKE_CUDA_MISSING=cuMemCreate,cuMemMap
      {"cuMemCreate", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
      {"cuMemMap", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND},
  };
  for (const Miss& m : cases) {
    INFO(m.base << " v" << m.version);
    void* p = &p;
    auto status = CU_GET_PROC_ADDRESS_SUCCESS;
    CHECK(f.gpa(m.base, &p, m.version, 0, &status) == CUDA_ERROR_NOT_FOUND);
    CHECK(status == m.status);
    CHECK(p == nullptr);
  }
  void* p = nullptr;
  CHECK(f.gpa("cuMemAlloc", &p, 13000, 4, nullptr) == CUDA_ERROR_INVALID_VALUE);
  // Reported missing through cuGetProcAddress only; the export itself stays.
  CHECK(f.sym("cuMemCreate") != nullptr);
}

TEST_CASE("allocations need a current context") {
  auto alloc = fake().fn<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
  CUresult r = CUDA_SUCCESS;
  std::thread([&] {
    CUdeviceptr p = 0;
    r = alloc(&p, kMiB);
  }).join();
  CHECK(r == CUDA_ERROR_INVALID_CONTEXT);
}

TEST_CASE("FAKE_CUDA_MEM_LIMIT bounds each device and cuMemGetInfo reports it") {
  const Fake& f = fake();
  auto alloc = f.fn<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
  auto free_ = f.fn<CUresult (*)(CUdeviceptr)>("cuMemFree_v2");
  auto info = f.fn<CUresult (*)(size_t*, size_t*)>("cuMemGetInfo_v2");
  use_device(0);
  size_t free_bytes = 0, total = 0;
  REQUIRE(info(&free_bytes, &total) == CUDA_SUCCESS);
  CHECK(total == 64 * kMiB);
  CHECK(free_bytes == 64 * kMiB);
  CUdeviceptr a = 0, b = 0, c = 0;
  REQUIRE(alloc(&a, 48 * kMiB) == CUDA_SUCCESS);
  REQUIRE(info(&free_bytes, &total) == CUDA_SUCCESS);
  CHECK(free_bytes == 16 * kMiB);
  CHECK(alloc(&b, 32 * kMiB) == CUDA_ERROR_OUT_OF_MEMORY);
  use_device(1);
  REQUIRE(alloc(&c, 32 * kMiB) == CUDA_SUCCESS);
  CHECK(free_(a) == CUDA_SUCCESS);
  CHECK(free_(c) == CUDA_SUCCESS);
  use_device(0);
  REQUIRE(info(&free_bytes, &total) == CUDA_SUCCESS);
  CHECK(free_bytes == 64 * kMiB);
}

TEST_CASE("freeing what the driver did not hand out is INVALID_VALUE") {
  const Fake& f = fake();
  auto alloc = f.fn<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
  auto free_ = f.fn<CUresult (*)(CUdeviceptr)>("cuMemFree_v2");
  auto host_alloc = f.fn<CUresult (*)(void**, size_t)>("cuMemAllocHost_v2");
  auto free_host = f.fn<CUresult (*)(void*)>("cuMemFreeHost");
  use_device(0);
  CHECK(free_(0xdead0000) == CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr p = 0;
  REQUIRE(alloc(&p, kMiB) == CUDA_SUCCESS);
  CHECK(free_(p + 256) == CUDA_ERROR_INVALID_VALUE);
  CHECK(free_(p) == CUDA_SUCCESS);
  CHECK(free_(p) == CUDA_ERROR_INVALID_VALUE);
  void* h = nullptr;
  REQUIRE(host_alloc(&h, 4096) == CUDA_SUCCESS);
  CHECK(free_(reinterpret_cast<CUdeviceptr>(h)) == CUDA_ERROR_INVALID_VALUE);
  CHECK(free_host(h) == CUDA_SUCCESS);
  CHECK(free_host(h) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("pointer device ordinal follows context, stream and pool") {
  const Fake& f = fake();
  auto alloc = f.fn<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
  auto managed = f.fn<CUresult (*)(CUdeviceptr*, size_t, unsigned)>("cuMemAllocManaged");
  auto free_ = f.fn<CUresult (*)(CUdeviceptr)>("cuMemFree_v2");
  auto stream_create = f.fn<CUresult (*)(CUstream*, unsigned)>("cuStreamCreate");
  auto stream_destroy = f.fn<CUresult (*)(CUstream)>("cuStreamDestroy_v2");
  auto alloc_async = f.fn<CUresult (*)(CUdeviceptr*, size_t, CUstream)>("cuMemAllocAsync");
  auto alloc_ptsz = f.fn<CUresult (*)(CUdeviceptr*, size_t, CUstream)>("cuMemAllocAsync_ptsz");
  auto free_async = f.fn<CUresult (*)(CUdeviceptr, CUstream)>("cuMemFreeAsync");
  auto default_pool = f.fn<CUresult (*)(CUmemoryPool*, CUdevice)>("cuDeviceGetDefaultMemPool");
  auto from_pool =
      f.fn<CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream)>("cuMemAllocFromPoolAsync");

  use_device(1);
  CUdeviceptr d1 = 0;
  REQUIRE(alloc(&d1, kMiB) == CUDA_SUCCESS);
  CHECK(device_of(d1) == 1);
  CHECK(device_of(d1 + kMiB - 1) == 1);
  CUstream s1 = nullptr;
  REQUIRE(stream_create(&s1, 0) == CUDA_SUCCESS);

  use_device(0);
  CUdeviceptr m0 = 0, a1 = 0, z0 = 0, p1 = 0;
  REQUIRE(managed(&m0, 256 * 1024, CU_MEM_ATTACH_GLOBAL) == CUDA_SUCCESS);
  CHECK(device_of(m0 + 100) == 0);
  REQUIRE(alloc_async(&a1, 3 * kMiB, s1) == CUDA_SUCCESS);
  CHECK(device_of(a1 + 5) == 1);
  REQUIRE(alloc_ptsz(&z0, 512 * 1024, nullptr) == CUDA_SUCCESS);
  CHECK(device_of(z0) == 0);
  CUmemoryPool pool1 = nullptr;
  REQUIRE(default_pool(&pool1, 1) == CUDA_SUCCESS);
  REQUIRE(from_pool(&p1, 4096, pool1, nullptr) == CUDA_SUCCESS);
  CHECK(device_of(p1) == 1);

  CHECK(free_async(a1, s1) == CUDA_SUCCESS);
  CHECK(device_of(a1 + 5) == -1);
  CHECK(free_async(a1, s1) == CUDA_ERROR_INVALID_VALUE);
  for (CUdeviceptr p : {d1, m0, z0, p1}) CHECK(free_(p) == CUDA_SUCCESS);
  CHECK(stream_destroy(s1) == CUDA_SUCCESS);
  CHECK(stream_destroy(s1) == CUDA_ERROR_INVALID_HANDLE);
}

TEST_CASE("pools report used and reserved bytes; a trim lowers reserved to what is used") {
  const Fake& f = fake();
  auto pool_create = f.fn<CUresult (*)(CUmemoryPool*, const CUmemPoolProps*)>("cuMemPoolCreate");
  auto pool_destroy = f.fn<CUresult (*)(CUmemoryPool)>("cuMemPoolDestroy");
  auto from_pool =
      f.fn<CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream)>("cuMemAllocFromPoolAsync");
  auto free_async = f.fn<CUresult (*)(CUdeviceptr, CUstream)>("cuMemFreeAsync");
  auto get_attr =
      f.fn<CUresult (*)(CUmemoryPool, CUmemPool_attribute, void*)>("cuMemPoolGetAttribute");
  auto trim = f.fn<CUresult (*)(CUmemoryPool, size_t)>("cuMemPoolTrimTo");
  auto current_pool = f.fn<CUresult (*)(CUmemoryPool*, CUdevice)>("cuDeviceGetMemPool");
  auto default_pool = f.fn<CUresult (*)(CUmemoryPool*, CUdevice)>("cuDeviceGetDefaultMemPool");

  use_device(0);
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  REQUIRE(pool_create(&pool, &props) == CUDA_SUCCESS);
  auto attr = [&](CUmemPool_attribute a) {
    cuuint64_t v = ~cuuint64_t{0};
    REQUIRE(get_attr(pool, a, &v) == CUDA_SUCCESS);
    return v;
  };
  CHECK(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 0);
  CUdeviceptr a = 0, b = 0;
  REQUIRE(from_pool(&a, 3 * kMiB, pool, nullptr) == CUDA_SUCCESS);
  REQUIRE(from_pool(&b, 1000, pool, nullptr) == CUDA_SUCCESS);
  CHECK(attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 3 * kMiB + 1000);
  CHECK(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 4 * kMiB);
  REQUIRE(free_async(a, nullptr) == CUDA_SUCCESS);
  CHECK(attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 1000);
  CHECK(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 4 * kMiB);  // kept until a trim
  REQUIRE(trim(pool, 0) == CUDA_SUCCESS);
  CHECK(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) == 2 * kMiB);
  CHECK(attr(CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) == 4 * kMiB);
  CHECK(attr(CU_MEMPOOL_ATTR_USED_MEM_HIGH) == 3 * kMiB + 1000);
  cuuint64_t v = 0;
  CHECK(get_attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &v) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(free_async(b, nullptr) == CUDA_SUCCESS);
  CHECK(attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT) == 0);
  CHECK(pool_destroy(pool) == CUDA_SUCCESS);
  CHECK(get_attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &v) == CUDA_ERROR_INVALID_VALUE);

  CUmemoryPool cur = nullptr, def = nullptr;
  REQUIRE(current_pool(&cur, 1) == CUDA_SUCCESS);
  REQUIRE(default_pool(&def, 1) == CUDA_SUCCESS);
  CHECK(cur == def);
}

TEST_CASE("VMM: reserve, create, map, access, unmap, release") {
  const Fake& f = fake();
  auto reserve = f.fn<CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long)>(
      "cuMemAddressReserve");
  auto address_free = f.fn<CUresult (*)(CUdeviceptr, size_t)>("cuMemAddressFree");
  auto create = f.fn<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                                  unsigned long long)>("cuMemCreate");
  auto release = f.fn<CUresult (*)(CUmemGenericAllocationHandle)>("cuMemRelease");
  auto map = f.fn<CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                               unsigned long long)>("cuMemMap");
  auto unmap = f.fn<CUresult (*)(CUdeviceptr, size_t)>("cuMemUnmap");
  auto set_access =
      f.fn<CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t)>("cuMemSetAccess");
  auto info = f.fn<CUresult (*)(size_t*, size_t*)>("cuMemGetInfo_v2");

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 1;
  CUdeviceptr va = 0;
  REQUIRE(reserve(&va, 8 * kMiB, 0, 0, 0) == CUDA_SUCCESS);
  CHECK(va % (2 * kMiB) == 0);
  CUmemGenericAllocationHandle h = 0;
  REQUIRE(create(&h, 2 * kMiB, &prop, 0) == CUDA_SUCCESS);
  use_device(1);
  size_t free_bytes = 0, total = 0;
  REQUIRE(info(&free_bytes, &total) == CUDA_SUCCESS);
  CHECK(free_bytes == 62 * kMiB);
  REQUIRE(map(va + 2 * kMiB, 2 * kMiB, 0, h, 0) == CUDA_SUCCESS);
  CHECK(map(va + 2 * kMiB, 2 * kMiB, 0, h, 0) == CUDA_ERROR_ALREADY_MAPPED);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  REQUIRE(set_access(va + 2 * kMiB, 2 * kMiB, &access, 1) == CUDA_SUCCESS);
  std::memset(reinterpret_cast<void*>(va + 2 * kMiB), 0x5a, 2 * kMiB);
  CHECK(device_of(va + 3 * kMiB) == 1);
  CHECK(device_of(va) == -1);
  // Released while mapped: the memory lives on until the unmap.
  CHECK(release(h) == CUDA_SUCCESS);
  CHECK(release(h) == CUDA_ERROR_INVALID_VALUE);
  CHECK(address_free(va, 8 * kMiB) == CUDA_ERROR_INVALID_VALUE);
  CHECK(unmap(va + 2 * kMiB, 2 * kMiB) == CUDA_SUCCESS);
  CHECK(unmap(va + 2 * kMiB, 2 * kMiB) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(info(&free_bytes, &total) == CUDA_SUCCESS);
  CHECK(free_bytes == 64 * kMiB);
  CHECK(address_free(va, 8 * kMiB) == CUDA_SUCCESS);
  CHECK(create(&h, 3 * kMiB, &prop, 0) == CUDA_ERROR_INVALID_VALUE);
}

TEST_CASE("VMM: retained references, export and import share the memory") {
  const Fake& f = fake();
  auto reserve = f.fn<CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long)>(
      "cuMemAddressReserve");
  auto create = f.fn<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                                  unsigned long long)>("cuMemCreate");
  auto release = f.fn<CUresult (*)(CUmemGenericAllocationHandle)>("cuMemRelease");
  auto map = f.fn<CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                               unsigned long long)>("cuMemMap");
  auto unmap = f.fn<CUresult (*)(CUdeviceptr, size_t)>("cuMemUnmap");
  auto set_access =
      f.fn<CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t)>("cuMemSetAccess");
  auto retain =
      f.fn<CUresult (*)(CUmemGenericAllocationHandle*, void*)>("cuMemRetainAllocationHandle");
  auto export_fd = f.fn<CUresult (*)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
                                     unsigned long long)>("cuMemExportToShareableHandle");
  auto import_fd =
      f.fn<CUresult (*)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType)>(
          "cuMemImportFromShareableHandle");
  auto props = f.fn<CUresult (*)(CUmemAllocationProp*, CUmemGenericAllocationHandle)>(
      "cuMemGetAllocationPropertiesFromHandle");
  auto info = f.fn<CUresult (*)(size_t*, size_t*)>("cuMemGetInfo_v2");

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 1;
  use_device(1);
  CUmemGenericAllocationHandle h = 0, r = 0, imported = 0;
  REQUIRE(create(&h, 2 * kMiB, &prop, 0) == CUDA_SUCCESS);
  CUdeviceptr va = 0, vb = 0;
  REQUIRE(reserve(&va, 2 * kMiB, 0, 0, 0) == CUDA_SUCCESS);
  REQUIRE(reserve(&vb, 2 * kMiB, 0, 0, 0) == CUDA_SUCCESS);
  REQUIRE(map(va, 2 * kMiB, 0, h, 0) == CUDA_SUCCESS);
  CHECK(retain(&r, reinterpret_cast<void*>(vb)) == CUDA_ERROR_INVALID_VALUE);  // nothing mapped
  REQUIRE(retain(&r, reinterpret_cast<void*>(va + 100)) == CUDA_SUCCESS);
  CHECK(r == h);
  int fd = -1;
  CHECK(export_fd(&fd, h, CU_MEM_HANDLE_TYPE_FABRIC, 0) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(export_fd(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS);
  REQUIRE(import_fd(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == CUDA_SUCCESS);
  CHECK(imported != h);
  CUmemAllocationProp got{};
  REQUIRE(props(&got, imported) == CUDA_SUCCESS);
  CHECK(got.location.id == 1);
  REQUIRE(map(vb, 2 * kMiB, 0, imported, 0) == CUDA_SUCCESS);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  REQUIRE(set_access(va, 2 * kMiB, &access, 1) == CUDA_SUCCESS);
  REQUIRE(set_access(vb, 2 * kMiB, &access, 1) == CUDA_SUCCESS);
  *reinterpret_cast<int*>(va) = 42;  // one memory, two handles
  CHECK(*reinterpret_cast<int*>(vb) == 42);
  size_t free_bytes = 0, total = 0;
  REQUIRE(info(&free_bytes, &total) == CUDA_SUCCESS);
  CHECK(free_bytes == 62 * kMiB);  // the import is charged to no device again
  // Two references (create + retain): the second release frees, and only after the unmap.
  CHECK(release(r) == CUDA_SUCCESS);
  CHECK(unmap(va, 2 * kMiB) == CUDA_SUCCESS);
  CHECK(release(h) == CUDA_SUCCESS);
  CHECK(release(h) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(info(&free_bytes, &total) == CUDA_SUCCESS);
  CHECK(free_bytes == 64 * kMiB);
  CHECK(*reinterpret_cast<int*>(vb) == 42);  // the imported mapping keeps the pages
  CHECK(unmap(vb, 2 * kMiB) == CUDA_SUCCESS);
  CHECK(release(imported) == CUDA_SUCCESS);
  close(fd);
}

#if defined(__x86_64__)
TEST_CASE("graph memory: nodes, capture, launch, auto-free, pool attributes and trim") {
  const Fake& f = fake();
  auto graph_create = f.fn<CUresult (*)(CUgraph*, unsigned)>("cuGraphCreate");
  auto add_alloc = f.fn<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                                     CUDA_MEM_ALLOC_NODE_PARAMS*)>("cuGraphAddMemAllocNode");
  auto add_free =
      f.fn<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUdeviceptr)>(
          "cuGraphAddMemFreeNode");
  auto instantiate =
      f.fn<CUresult (*)(CUgraphExec*, CUgraph, unsigned long long)>("cuGraphInstantiateWithFlags");
  auto launch = f.fn<CUresult (*)(CUgraphExec, CUstream)>("cuGraphLaunch");
  auto mem_free = f.fn<CUresult (*)(CUdeviceptr)>("cuMemFree_v2");
  auto attr =
      f.fn<CUresult (*)(CUdevice, CUgraphMem_attribute, void*)>("cuDeviceGetGraphMemAttribute");
  auto trim = f.fn<CUresult (*)(CUdevice)>("cuDeviceGraphMemTrim");
  auto stream_create = f.fn<CUresult (*)(CUstream*, unsigned)>("cuStreamCreate");
  auto begin = f.fn<CUresult (*)(CUstream, CUstreamCaptureMode)>("cuStreamBeginCapture_v2");
  auto end = f.fn<CUresult (*)(CUstream, CUgraph*)>("cuStreamEndCapture");
  auto capturing = f.fn<CUresult (*)(CUstream, CUstreamCaptureStatus*)>("cuStreamIsCapturing");
  auto alloc_async = f.fn<CUresult (*)(CUdeviceptr*, size_t, CUstream)>("cuMemAllocAsync");
  auto free_async = f.fn<CUresult (*)(CUdeviceptr, CUstream)>("cuMemFreeAsync");
  use_device(0);
  auto pool = [&](uint64_t which) {
    cuuint64_t v = 0;
    REQUIRE(attr(0, static_cast<CUgraphMem_attribute>(which), &v) == CUDA_SUCCESS);
    return v;
  };
  const uint64_t used0 = pool(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT);

  CUgraph g = nullptr;
  REQUIRE(graph_create(&g, 0) == CUDA_SUCCESS);
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.poolProps.location.id = 0;
  p.bytesize = kMiB;
  CUgraphNode n = nullptr;
  REQUIRE(add_alloc(&n, g, nullptr, 0, &p) == CUDA_SUCCESS);
  REQUIRE(p.dptr != 0);
  CHECK(mem_free(p.dptr) == CUDA_ERROR_INVALID_VALUE);  // not launched: no memory yet
  auto exec_destroy = f.fn<CUresult (*)(CUgraphExec)>("cuGraphExecDestroy");
  CUgraphExec e = nullptr, e_auto = nullptr;
  REQUIRE(instantiate(&e, g, 0) == CUDA_SUCCESS);
  // One executable graph at a time for a graph with memory nodes.
  CHECK(instantiate(&e_auto, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) ==
        CUDA_ERROR_INVALID_VALUE);
  REQUIRE(launch(e, nullptr) == CUDA_SUCCESS);
  CHECK(pool(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == used0 + kMiB);
  CHECK(launch(e, nullptr) == CUDA_ERROR_INVALID_VALUE);  // still live
  REQUIRE(exec_destroy(e) == CUDA_SUCCESS);               // its allocation stays live
  REQUIRE(instantiate(&e_auto, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) == CUDA_SUCCESS);
  CHECK(launch(e_auto, nullptr) == CUDA_SUCCESS);  // frees it first
  CHECK(mem_free(p.dptr) == CUDA_SUCCESS);         // graph memory, freed outside
  CHECK(pool(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == used0);
  CHECK(pool(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) >= kMiB);
  REQUIRE(trim(0) == CUDA_SUCCESS);
  CHECK(pool(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == used0);

  // Capture: stream-ordered calls become nodes; launching the graph makes and frees the memory.
  CUstream s = nullptr;
  REQUIRE(stream_create(&s, 0) == CUDA_SUCCESS);
  CHECK(begin(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  REQUIRE(begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  REQUIRE(capturing(s, &st) == CUDA_SUCCESS);
  CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
  CUdeviceptr c = 0;
  REQUIRE(alloc_async(&c, 2 * kMiB, s) == CUDA_SUCCESS);
  REQUIRE(free_async(c, s) == CUDA_SUCCESS);
  CUgraph captured = nullptr;
  REQUIRE(end(s, &captured) == CUDA_SUCCESS);
  REQUIRE(capturing(s, &st) == CUDA_SUCCESS);
  CHECK(st == CU_STREAM_CAPTURE_STATUS_NONE);
  CHECK(mem_free(c) == CUDA_ERROR_INVALID_VALUE);
  CUgraphExec ec = nullptr;
  REQUIRE(instantiate(&ec, captured, 0) == CUDA_SUCCESS);
  REQUIRE(launch(ec, s) == CUDA_SUCCESS);
  REQUIRE(launch(ec, s) == CUDA_SUCCESS);  // made and freed within each launch
  CHECK(pool(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT) == used0);
  CHECK(pool(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT) == used0 + 2 * kMiB);
  // A free node of memory that is not live makes the launch fail, changing nothing.
  CUgraph g2 = nullptr;
  REQUIRE(graph_create(&g2, 0) == CUDA_SUCCESS);
  REQUIRE(add_free(&n, g2, nullptr, 0, p.dptr) == CUDA_SUCCESS);
  CUgraphExec e2 = nullptr;
  REQUIRE(instantiate(&e2, g2, 0) == CUDA_SUCCESS);
  CHECK(launch(e2, s) == CUDA_ERROR_INVALID_VALUE);
  REQUIRE(trim(0) == CUDA_SUCCESS);
}

TEST_CASE("the pre-3.2 cuMemAlloc ABI returns 32-bit addresses") {
  const Fake& f = fake();
  auto alloc32 = f.fn<CUresult (*)(unsigned int*, unsigned int)>("cuMemAlloc");
  auto free32 = f.fn<CUresult (*)(unsigned int)>("cuMemFree");
  use_device(1);
  unsigned int p = 0;
  REQUIRE(alloc32(&p, 1 << 20) == CUDA_SUCCESS);
  CHECK(p != 0);
  CHECK(device_of(p) == 1);
  CHECK(free32(p) == CUDA_SUCCESS);
  CHECK(free32(p) == CUDA_ERROR_INVALID_VALUE);
}
#endif

TEST_CASE("FAKE_CUDA_FAIL_NTH_ALLOC fails exactly the n-th allocation call", "[fail_nth]") {
  const Fake& f = fake();
  auto alloc = f.fn<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc_v2");
  auto host_alloc = f.fn<CUresult (*)(void**, size_t, unsigned)>("cuMemHostAlloc");
  use_device(0);
  CUdeviceptr a = 0, b = 0, c = 0;
  void* h = nullptr;
  CHECK(alloc(&a, kMiB) == CUDA_SUCCESS);
  CHECK(host_alloc(&h, kMiB, 0) == CUDA_SUCCESS);
  CHECK(alloc(&b, kMiB) == CUDA_ERROR_INVALID_VALUE);
  CHECK(alloc(&c, kMiB) == CUDA_SUCCESS);
}
