// Contract: a GPU-less libcuda.so.1 for end-to-end tests of the preload. Host memory stands in
// for device memory: every pointer handed out is real, writable host memory (VMM mappings are
// writable once cuMemSetAccess grants it), so programs may touch what they allocate. Blocks of
// 256 KiB and more are mapped MAP_NORESERVE: untouched fake memory costs no real memory, so the
// default 80 GiB per device can be handed out on a small machine.
//
// Guarantees, matching the real driver where the tests can observe it:
//  - Every call but cuInit, cuDriverGetVersion, cuGetErrorName/String and cuGetProcAddress*
//    returns CUDA_ERROR_NOT_INITIALIZED before cuInit(0).
//  - FAKE_CUDA_DEVICES devices (default 2), each with one primary context (distinct non-null
//    CUcontext values). The current context is per thread. A primary context is active from a
//    retain until its last release or a cuDevicePrimaryCtxReset (cuDevicePrimaryCtxGetState
//    reports it); its allocations outlive it all the same (the fake keeps no memory per
//    context). cuCtxCreate_v2/_v3/_v4 make a new context on a device, current on the calling
//    thread, until cuCtxDestroy_v2 (no longer current anywhere on this thread then).
//  - Every context in being (an active primary context, a created one) maps one page of a memfd
//    named "fake-cuda-context-D" (D its device): that is how the fake NVML (fake_nvml.cpp), which
//    reads /proc/PID/maps from the collector's process, knows which devices a process has
//    contexts on, as the real driver knows which contexts hold memory.
//  - cuMemAlloc*, cuMemAllocManaged, cuMemHostAlloc/cuMemAllocHost and cuMemGetInfo need a
//    current context (else CUDA_ERROR_INVALID_CONTEXT) and charge its device. Async allocations
//    charge the stream's device (a stream keeps the device current at its creation; stream 0,
//    CU_STREAM_LEGACY and CU_STREAM_PER_THREAD mean the current one), pool allocations the
//    pool's device, cuMemCreate prop->location.id. Host-pinned memory charges no device.
//  - Frees of unknown, already freed or wrong-kind pointers return CUDA_ERROR_INVALID_VALUE.
//  - VMM handles are reference counted (cuMemCreate or import 1, +1 per
//    cuMemRetainAllocationHandle, -1 per cuMemRelease); physical memory goes when the count is 0
//    and its last mapping is unmapped. cuMemExportToShareableHandle gives POSIX file descriptors
//    only; an import of one is a new handle sharing the pages, charged to no device again.
//  - cuPointerGetAttribute answers for any address inside a live allocation or VMM mapping.
//  - CUDA graphs hold memory nodes only (cuGraphCreate, cuGraphAddMemAllocNode/FreeNode,
//    cuGraphAddNode[_v2] of those two types; other node types: CUDA_ERROR_NOT_SUPPORTED). An
//    allocation node gets a fixed address at creation (mapped, charged to nobody; never
//    unmapped, so the address stays the node's); cuGraphLaunch applies the executable graph's
//    nodes in order: an allocation node's memory becomes live (CUDA_ERROR_INVALID_VALUE, and
//    nothing done, when it still is and the graph was not instantiated with AUTO_FREE_ON_LAUNCH,
//    or a free node's address is not live), a free node frees it. A graph with memory nodes has
//    at most one executable graph at a time (a second instantiation: CUDA_ERROR_INVALID_VALUE).
//    Live graph memory is freed by cuMemFree/cuMemFreeAsync as well. Each device's graph pool
//    (cuDeviceGetGraphMemAttribute) holds USED = live graph bytes, RESERVED = the highest USED
//    since the last cuDeviceGraphMemTrim (which sets it to USED); RESERVED is charged to the
//    device.
//  - CUDA IPC: cuIpcGetMemHandle names a live device allocation (its size and device, no
//    contents); cuIpcOpenMemHandle in another process maps that many fresh bytes on that device
//    (memory contents are not shared), charged to nobody, until cuIpcCloseMemHandle. Opening a
//    handle of the calling process itself is CUDA_ERROR_INVALID_CONTEXT, as on the real driver.
//    cuMemGetAddressRange_v2 answers for any live range.
//  - CUDA arrays (cuArrayCreate_v2, cuArray3DCreate_v2, cuMipmappedArrayCreate) hold exactly
//    width x height x depth x channels x format bytes (levels halving for mipmaps) of device
//    memory, charged to the current device until destroyed; CUDA_ARRAY3D_DEFERRED_MAPPING
//    arrays hold none. Formats: 8-, 16- and 32-bit integers, half and float.
//  - External memory: cuImportExternalMemory accepts an OPAQUE_FD descriptor with any open file
//    descriptor and the size it names (charged to nobody: the exporter owns it);
//    cuExternalMemoryGetMappedBuffer maps fresh bytes for [offset, offset + size) within it,
//    released by cuMemFree.
//    Stream capture works on created streams (others: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED):
//    cuMemAllocAsync/cuMemAllocFromPoolAsync/cuMemFreeAsync on a capturing stream add nodes to
//    the capture's graph; cuStreamIsCapturing and cuStreamGetCaptureInfo_v2/_v3 report it.
//  - Stream-ordered pools (each device's default pool, which cuDeviceGetMemPool returns, and
//    cuMemPoolCreate'd ones) keep the driver's two figures: used = the bytes of their live
//    allocations, reserved = at least used rounded up to 2 MiB, never shrinking (PyTorch's
//    release threshold) until cuMemPoolTrimTo(pool, keep) lowers it to max(used rounded up,
//    keep rounded up). cuMemPoolGetAttribute answers RESERVED/USED_MEM_CURRENT and _HIGH.
//  - Environment, read once by the first cuInit or cuGetProcAddress*: FAKE_CUDA_MEM_LIMIT (bytes
//    per device, default 80 GiB, K/M/G suffixes accepted) turns allocations beyond it into
//    CUDA_ERROR_OUT_OF_MEMORY and sets cuMemGetInfo's total; FAKE_CUDA_FAIL_NTH_ALLOC=N fails the
//    N-th allocation call (1-based; every device, managed, async, pool, cuMemCreate and host
//    allocation entry point counts, once its arguments and context have been validated) with
//    CUDA_ERROR_INVALID_VALUE; FAKE_CUDA_MISSING and FAKE_CUDA_GPA_ERROR are consulted by
//    proc_address.cpp.
//  - Thread-safe: one mutex guards all state. The state is never destroyed, so threads still in
//    the driver while the process exits are safe. Fork-safe: fork() waits for the mutex, so a
//    child forked while another thread was in the driver can use it.
#include "fake_driver.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace cumemtrace::fake {

namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr uint64_t kDefaultMemLimit = 80 * kGiB;
constexpr int kMaxDevices = 64;
constexpr int kDriverVersion = 13000;
// The real driver's VMM granularity on current GPUs, minimum and recommended alike.
constexpr size_t kVmmGranularity = size_t{2} << 20;
// cuMemAllocPitch's row alignment on current GPUs.
constexpr size_t kPitchAlignment = 512;
// cudaMalloc guarantees 256-byte alignment; programs rely on it.
constexpr size_t kDeviceAlignment = 256;

enum class Kind {
  kDevice,     // cuMemAlloc_v2
  kLegacy32,   // cuMemAlloc / cuMemAllocPitch (32-bit ABI): mapped below 4 GiB
  kPitch,      // cuMemAllocPitch_v2
  kManaged,    // cuMemAllocManaged
  kAsync,      // cuMemAllocAsync / cuMemAllocFromPoolAsync
  kHost,       // cuMemHostAlloc / cuMemAllocHost
  kMapped,     // a cuMemMap of a cuMemCreate handle
  kGraph,      // a graph allocation node's memory, live since its graph was launched
  kIpc,        // a cuIpcOpenMemHandle mapping of another process's allocation
  kExtBuffer,  // a cuExternalMemoryGetMappedBuffer view of external memory, freed by cuMemFree
};

bool freed_by_mem_free(Kind k) {
  return k == Kind::kDevice || k == Kind::kLegacy32 || k == Kind::kPitch || k == Kind::kManaged ||
         k == Kind::kAsync || k == Kind::kGraph || k == Kind::kExtBuffer;
}

struct ArrayObj {  // a CUDA array or mipmapped array: device memory with no device address
  uint64_t base;
  size_t size;
  int device;
  bool mipmapped;
};

struct ExternalMemory {  // imported: the exporter's memory, charged to nobody here
  size_t size;
  int device;
};

struct GraphNode {
  bool alloc;  // else a free node
  uint64_t addr;
  size_t size;
  int device;
};

struct Graph {
  std::vector<GraphNode> nodes;
};

struct GraphExec {
  std::vector<GraphNode> nodes;
  bool auto_free;
  const Graph* from;  // its graph while that exists: one executable graph per graph with memory
};

struct Pool;

struct Range {
  size_t size;
  int device;
  Kind kind;
  CUmemGenericAllocationHandle handle;  // kMapped only
  Pool* pool = nullptr;                 // kAsync only
};

struct Context {
  int device;
  void* marker = nullptr;  // the "fake-cuda-context-D" page while the context is in being
};

struct Stream {
  int device;
};

constexpr uint64_t kPoolGranule = uint64_t{2} << 20;

struct Pool {
  int device;
  uint64_t used = 0, reserved = 0, used_high = 0, reserved_high = 0;

  void grow(uint64_t bytes) {
    used += bytes;
    used_high = std::max(used_high, used);
    reserved = std::max(reserved, (used + kPoolGranule - 1) / kPoolGranule * kPoolGranule);
    reserved_high = std::max(reserved_high, reserved);
  }
};

struct Physical {
  size_t size;
  int device;
  int fd;    // memfd: several mappings of one handle share its pages
  int refs;  // cuMemCreate/import 1, +1 per cuMemRetainAllocationHandle, -1 per cuMemRelease
  int mappings;
  bool imported;  // another handle's memory: charged to the exporter, not again
};

struct Config {
  int devices = 2;
  uint64_t mem_limit = kDefaultMemLimit;
  uint64_t fail_nth_alloc = 0;
  std::vector<std::string> missing;
};

struct State {
  std::mutex mu;
  std::atomic<bool> initialized{false};
  Context contexts[kMaxDevices];
  Pool default_pools[kMaxDevices];
  int primary_refs[kMaxDevices] = {};
  uint64_t used[kMaxDevices] = {};
  std::set<const Stream*> streams;
  std::set<const Pool*> pools;
  std::map<uint64_t, Range> ranges;         // by base address: everything addressable
  std::map<uint64_t, size_t> reservations;  // VMM VA reservations, base -> size
  std::map<CUmemGenericAllocationHandle, Physical> handles;
  std::map<ino_t, int> exported;  // memfd inode -> device, for imports of exported handles
  CUmemGenericAllocationHandle next_handle = 0x1000;
  uint64_t alloc_calls = 0;
  std::set<const Graph*> graphs;
  std::set<GraphExec*> execs;
  std::map<CUstream, Graph*> captures;  // capturing stream -> its graph
  uint64_t capture_ids = 0;
  std::set<ArrayObj*> arrays;
  std::set<ExternalMemory*> external;
  std::set<Context*> created_contexts;  // cuCtxCreate'd, not destroyed
  uint64_t graph_used[kMaxDevices] = {};
  uint64_t graph_reserved[kMaxDevices] = {};
};

thread_local int tls_device = -1;                   // the current context's device; -1: none
thread_local const Context* tls_context = nullptr;  // the current context itself

uint64_t parse_size(const char* text, uint64_t fallback) {
  if (!text || !*text) return fallback;
  char* end = nullptr;
  uint64_t v = std::strtoull(text, &end, 10);
  switch (*end) {
    case 'K':
    case 'k':
      v <<= 10;
      break;
    case 'M':
    case 'm':
      v <<= 20;
      break;
    case 'G':
    case 'g':
      v <<= 30;
      break;
    default:
      break;
  }
  return v;
}

Config read_config() {
  Config c;
  if (const char* d = std::getenv("FAKE_CUDA_DEVICES"); d && *d) {
    c.devices = std::clamp(std::atoi(d), 0, kMaxDevices);
  }
  c.mem_limit = parse_size(std::getenv("FAKE_CUDA_MEM_LIMIT"), kDefaultMemLimit);
  c.fail_nth_alloc = parse_size(std::getenv("FAKE_CUDA_FAIL_NTH_ALLOC"), 0);
  if (const char* m = std::getenv("FAKE_CUDA_MISSING")) {
    std::string all(m);
    size_t start = 0;
    while (start <= all.size()) {
      size_t comma = all.find(',', start);
      if (comma == std::string::npos) comma = all.size();
      if (comma > start) c.missing.push_back(all.substr(start, comma - start));
      start = comma + 1;
    }
  }
  return c;
}

const Config& config() {
  // Built on first use (cuGetProcAddress runs before cuInit) and never destroyed.
  static const Config* c = new Config(read_config());
  return *c;
}

State& state();

void lock_for_fork() {
  state().mu.lock();
}

void unlock_after_fork() {
  state().mu.unlock();
}

State& state() {
  static State* s = [] {
    auto* st = new State;
    for (int i = 0; i < kMaxDevices; ++i) {
      st->contexts[i].device = i;
      st->default_pools[i].device = i;
    }
    return st;
  }();
  static const bool fork_handlers = [] {
    // Without these a child forked while another thread held the mutex would deadlock in its
    // first driver call, whoever traces it.
    pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
    return true;
  }();
  (void)fork_handlers;
  return *s;
}

bool initialized() {
  return state().initialized.load(std::memory_order_acquire);
}

bool valid_device(int d) {
  return d >= 0 && d < config().devices;
}

uint64_t round_up(uint64_t v, uint64_t to) {
  return (v + to - 1) / to * to;
}

// Caller holds the lock.
CUresult count_alloc_call(State& s) {
  ++s.alloc_calls;
  const uint64_t nth = config().fail_nth_alloc;
  return nth != 0 && s.alloc_calls == nth ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

// Caller holds the lock.
CUresult charge(State& s, int device, uint64_t bytes) {
  const uint64_t limit = config().mem_limit;
  if (s.used[device] > limit || bytes > limit - s.used[device]) return CUDA_ERROR_OUT_OF_MEMORY;
  s.used[device] += bytes;
  return CUDA_SUCCESS;
}

// Large blocks are mapped without a commit charge, so a test can "allocate" tens of GiB of fake
// device memory on a small machine as long as it does not touch them; small ones come from the
// heap, which keeps many-small-allocation tests fast. The choice depends on kind and size only,
// so the free path can repeat it.
constexpr size_t kMapThreshold = size_t{256} << 10;

bool mapped_backing(Kind kind, size_t size) {
  return kind == Kind::kLegacy32 || size >= kMapThreshold;
}

void* backing_alloc(Kind kind, size_t size) {
  if (mapped_backing(kind, size)) {
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    if (kind == Kind::kLegacy32) {
#ifdef MAP_32BIT
      flags |= MAP_32BIT;
#else
      return nullptr;  // no way to ask for low addresses: the 32-bit ABI is out of memory
#endif
    }
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, flags, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }
  const size_t align =
      kind == Kind::kHost ? static_cast<size_t>(sysconf(_SC_PAGESIZE)) : kDeviceAlignment;
  return std::aligned_alloc(align, round_up(size, align));
}

void backing_free(Kind kind, uint64_t base, size_t size) {
  if (mapped_backing(kind, size)) {
    munmap(reinterpret_cast<void*>(base), size);
  } else {
    std::free(reinterpret_cast<void*>(base));
  }
}

// Allocates `size` bytes of `kind` for `device`; host memory is recorded with the allocating
// context's device but charges none. Caller has validated arguments and holds the lock.
CUresult allocate_locked(State& s, Kind kind, int device, size_t size, uint64_t* out) {
  CUresult r = count_alloc_call(s);
  if (r != CUDA_SUCCESS) return r;
  const bool on_device = kind != Kind::kHost;
  if (on_device) {
    r = charge(s, device, size);
    if (r != CUDA_SUCCESS) return r;
  }
  void* p = backing_alloc(kind, size);
  if (!p) {
    if (on_device) s.used[device] -= size;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const auto base = reinterpret_cast<uint64_t>(p);
  s.ranges[base] = Range{size, device, kind, 0};
  *out = base;
  return CUDA_SUCCESS;
}

CUresult allocate(Kind kind, int device, size_t size, uint64_t* out) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return allocate_locked(s, kind, device, size, out);
}

template <typename Pred>
CUresult release_range(uint64_t base, Pred accepts_kind) {
  State& s = state();
  std::lock_guard lock(s.mu);
  auto it = s.ranges.find(base);
  if (it == s.ranges.end() || !accepts_kind(it->second.kind)) return CUDA_ERROR_INVALID_VALUE;
  const Range r = it->second;
  s.ranges.erase(it);
  if (r.kind == Kind::kExtBuffer) {  // a view of external memory: nothing charged
    munmap(reinterpret_cast<void*>(base), r.size);
    return CUDA_SUCCESS;
  }
  if (r.kind == Kind::kGraph) {  // back to the graph pool; the address stays the node's
    s.graph_used[r.device] -= r.size;
    return CUDA_SUCCESS;
  }
  if (r.kind != Kind::kHost) s.used[r.device] -= r.size;
  if (r.pool) r.pool->used -= r.size;
  backing_free(r.kind, base, r.size);
  return CUDA_SUCCESS;
}

// Caller holds the lock. The async allocation at `base` came from `pool`.
void in_pool(State& s, uint64_t base, Pool* pool) {
  s.ranges[base].pool = pool;
  pool->grow(s.ranges[base].size);
}

// Caller holds the lock. Returns the range containing `addr`, or nullptr.
const Range* find_containing(State& s, uint64_t addr, uint64_t* base) {
  auto it = s.ranges.upper_bound(addr);
  if (it == s.ranges.begin()) return nullptr;
  --it;
  if (addr - it->first >= it->second.size) return nullptr;
  *base = it->first;
  return &it->second;
}

CUresult current_device(int* device) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (tls_device < 0) return CUDA_ERROR_INVALID_CONTEXT;
  *device = tls_device;
  return CUDA_SUCCESS;
}

bool is_default_stream(CUstream s) {
  return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

// The device a stream's work runs on.
CUresult stream_device(CUstream stream, int* device) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (is_default_stream(stream)) return current_device(device);
  State& s = state();
  std::lock_guard lock(s.mu);
  const auto* st = reinterpret_cast<const Stream*>(stream);
  if (!s.streams.count(st)) return CUDA_ERROR_INVALID_HANDLE;
  *device = st->device;
  return CUDA_SUCCESS;
}

// Caller holds the lock.
bool valid_pool(State& s, CUmemoryPool pool, int* device) {
  const auto* p = reinterpret_cast<const Pool*>(pool);
  const bool is_default = p >= s.default_pools && p < s.default_pools + config().devices;
  if (!is_default && !s.pools.count(p)) return false;
  *device = p->device;
  return true;
}

// ---- initialization, devices, contexts ------------------------------------------------------

CUresult init(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  config();
  if (config().devices == 0) return CUDA_ERROR_NO_DEVICE;
  state().initialized.store(true, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult device_get(CUdevice* device, int ordinal) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

// Caller holds the lock. Maps (or unmaps) the context's marker page; see the contract.
void set_marker(Context& c, bool in_being) {
  if (in_being && !c.marker) {
    char name[32];
    std::snprintf(name, sizeof name, "fake-cuda-context-%d", c.device);
    const int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) return;
    if (ftruncate(fd, 4096) == 0) {
      void* p = mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0);
      c.marker = p == MAP_FAILED ? nullptr : p;
    }
    close(fd);
  } else if (!in_being && c.marker) {
    munmap(c.marker, 4096);
    c.marker = nullptr;
  }
}

CUresult primary_ctx_retain(CUcontext* pctx, CUdevice dev) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.primary_refs[dev]++ == 0) set_marker(s.contexts[dev], true);
  *pctx = reinterpret_cast<CUcontext>(&s.contexts[dev]);
  return CUDA_SUCCESS;
}

CUresult primary_ctx_release(CUdevice dev) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.primary_refs[dev] == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--s.primary_refs[dev] == 0) set_marker(s.contexts[dev], false);
  return CUDA_SUCCESS;
}

CUresult primary_ctx_reset(CUdevice dev) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  std::lock_guard lock(s.mu);
  s.primary_refs[dev] = 0;
  set_marker(s.contexts[dev], false);
  return CUDA_SUCCESS;
}

CUresult primary_ctx_get_state(CUdevice dev, unsigned int* flags, int* active) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  std::lock_guard lock(s.mu);
  *flags = 0;
  *active = s.primary_refs[dev] > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult ctx_create(CUcontext* pctx, CUdevice dev) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* c = new Context{dev};
  set_marker(*c, true);
  s.created_contexts.insert(c);
  tls_device = dev;
  tls_context = c;
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}

CUresult ctx_destroy(CUcontext ctx) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* c = reinterpret_cast<Context*>(ctx);
  if (!s.created_contexts.erase(c)) return CUDA_ERROR_INVALID_CONTEXT;
  set_marker(*c, false);
  if (tls_context == c) {
    tls_device = -1;
    tls_context = nullptr;
  }
  delete c;
  return CUDA_SUCCESS;
}

CUresult ctx_set_current(CUcontext ctx) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ctx) {
    tls_device = -1;
    tls_context = nullptr;
    return CUDA_SUCCESS;
  }
  State& s = state();
  auto* c = reinterpret_cast<Context*>(ctx);
  const bool primary = c >= s.contexts && c < s.contexts + config().devices;
  if (!primary) {
    std::lock_guard lock(s.mu);
    if (!s.created_contexts.count(c)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  tls_device = c->device;
  tls_context = c;
  return CUDA_SUCCESS;
}

CUresult ctx_get_current(CUcontext* pctx) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = const_cast<CUcontext>(reinterpret_cast<const CUctx_st*>(tls_context));
  return CUDA_SUCCESS;
}

CUresult ctx_get_device(CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  int d = -1;
  CUresult r = current_device(&d);
  if (r == CUDA_SUCCESS) *device = d;
  return r;
}

CUresult mem_get_info(uint64_t* free_bytes, uint64_t* total_bytes) {
  int d = -1;
  CUresult r = current_device(&d);
  if (r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard lock(s.mu);
  const uint64_t limit = config().mem_limit;
  *free_bytes = s.used[d] >= limit ? 0 : limit - s.used[d];
  *total_bytes = limit;
  return CUDA_SUCCESS;
}

CUresult pointer_get_attribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  uint64_t base = 0;
  const Range* r = find_containing(s, ptr, &base);
  if (!r) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = r->device;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      *static_cast<CUcontext*>(data) =
          r->device < 0 ? nullptr : reinterpret_cast<CUcontext>(&s.contexts[r->device]);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(data) =
          r->kind == Kind::kHost ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = base;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = r->size;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// ---- streams and pools ------------------------------------------------------------------------

CUresult stream_create(CUstream* phStream, unsigned int flags) {
  if (!phStream || flags > CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
  int d = -1;
  CUresult r = current_device(&d);
  if (r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* st = new Stream{d};
  s.streams.insert(st);
  *phStream = reinterpret_cast<CUstream>(st);
  return CUDA_SUCCESS;
}

CUresult stream_destroy(CUstream stream) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  const auto* st = reinterpret_cast<const Stream*>(stream);
  if (!s.streams.erase(st)) return CUDA_ERROR_INVALID_HANDLE;
  delete st;
  return CUDA_SUCCESS;
}

// The graph `stream` is capturing into, nullptr if none. Caller holds the lock.
Graph* capture_of(State& s, CUstream stream) {
  auto it = s.captures.find(stream);
  return it == s.captures.end() ? nullptr : it->second;
}

CUresult stream_is_capturing(CUstream stream, CUstreamCaptureStatus* status) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  int d = -1;
  CUresult r = stream_device(stream, &d);
  if (r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard lock(s.mu);
  *status = capture_of(s, stream) ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

bool valid_device_location(const CUmemLocation& loc) {
  return loc.type == CU_MEM_LOCATION_TYPE_DEVICE && valid_device(loc.id);
}

CUresult pool_create(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      !valid_device_location(props->location)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* p = new Pool{props->location.id};
  s.pools.insert(p);
  *pool = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}

CUresult pool_destroy(CUmemoryPool pool) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  const auto* p = reinterpret_cast<const Pool*>(pool);
  // Default pools are not in `pools`: the real driver refuses to destroy them as well.
  if (!s.pools.erase(p)) return CUDA_ERROR_INVALID_VALUE;
  delete p;
  return CUDA_SUCCESS;
}

CUresult pool_get_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  int d = -1;
  if (!value || !valid_pool(s, pool, &d)) return CUDA_ERROR_INVALID_VALUE;
  const auto* p = reinterpret_cast<const Pool*>(pool);
  cuuint64_t v = 0;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      v = p->reserved;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      v = p->reserved_high;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      v = p->used;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      v = p->used_high;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  *static_cast<cuuint64_t*>(value) = v;
  return CUDA_SUCCESS;
}

CUresult pool_trim_to(CUmemoryPool pool, size_t keep) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  int d = -1;
  if (!valid_pool(s, pool, &d)) return CUDA_ERROR_INVALID_VALUE;
  auto* p = const_cast<Pool*>(reinterpret_cast<const Pool*>(pool));
  const auto up = [](uint64_t b) { return (b + kPoolGranule - 1) / kPoolGranule * kPoolGranule; };
  p->reserved = std::min(p->reserved, std::max(up(p->used), up(keep)));
  return CUDA_SUCCESS;
}

CUresult default_mem_pool(CUmemoryPool* pool, CUdevice dev) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pool = reinterpret_cast<CUmemoryPool>(&state().default_pools[dev]);
  return CUDA_SUCCESS;
}

// ---- allocation -------------------------------------------------------------------------------

CUresult mem_alloc(Kind kind, uint64_t* out, size_t size) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  int d = -1;
  CUresult r = current_device(&d);
  if (r != CUDA_SUCCESS) return r;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  return allocate(kind, d, size, out);
}

CUresult mem_alloc_pitch(Kind kind, uint64_t* out, size_t* pitch, size_t width, size_t height,
                         unsigned int element_size) {
  if (!out || !pitch || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element_size != 4 && element_size != 8 && element_size != 16) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int d = -1;
  CUresult r = current_device(&d);
  if (r != CUDA_SUCCESS) return r;
  const size_t row = round_up(width, kPitchAlignment);
  r = allocate(kind, d, row * height, out);
  if (r == CUDA_SUCCESS) *pitch = row;
  return r;
}

CUresult mem_alloc_managed(CUdeviceptr* dptr, size_t size, unsigned int flags) {
  if (!dptr || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  uint64_t p = 0;
  CUresult r = mem_alloc(Kind::kManaged, &p, size);
  if (r == CUDA_SUCCESS) *dptr = p;
  return r;
}

CUresult mem_free(CUdeviceptr dptr) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  return release_range(dptr, freed_by_mem_free);
}

// Caller holds the lock: a new allocation node of `graph` with its fixed address.
CUresult add_graph_alloc_node(Graph* graph, int device, size_t size, uint64_t* out) {
  if (size == 0 || !valid_device(device)) return CUDA_ERROR_INVALID_VALUE;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  *out = reinterpret_cast<uint64_t>(p);
  graph->nodes.push_back(GraphNode{true, *out, size, device});
  return CUDA_SUCCESS;
}

CUresult mem_alloc_async(CUdeviceptr* dptr, size_t size, CUstream stream) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  int d = -1;
  CUresult r = stream_device(stream, &d);
  if (r != CUDA_SUCCESS) return r;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  if (Graph* g = capture_of(s, stream)) {
    uint64_t p = 0;
    r = add_graph_alloc_node(g, d, size, &p);
    if (r == CUDA_SUCCESS) *dptr = p;
    return r;
  }
  uint64_t p = 0;
  r = allocate_locked(s, Kind::kAsync, d, size, &p);
  if (r == CUDA_SUCCESS) {
    *dptr = p;
    in_pool(s, p, &s.default_pools[d]);
  }
  return r;
}

CUresult mem_alloc_from_pool_async(CUdeviceptr* dptr, size_t size, CUmemoryPool pool,
                                   CUstream stream) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  int stream_dev = -1;
  CUresult r = stream_device(stream, &stream_dev);
  if (r != CUDA_SUCCESS) return r;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  int d = -1;
  if (!valid_pool(s, pool, &d)) return CUDA_ERROR_INVALID_VALUE;
  uint64_t p = 0;
  if (Graph* g = capture_of(s, stream)) {
    r = add_graph_alloc_node(g, d, size, &p);
    if (r == CUDA_SUCCESS) *dptr = p;
    return r;
  }
  r = allocate_locked(s, Kind::kAsync, d, size, &p);
  if (r == CUDA_SUCCESS) {
    *dptr = p;
    in_pool(s, p, const_cast<Pool*>(reinterpret_cast<const Pool*>(pool)));
  }
  return r;
}

// Stream order is trivially kept: nothing ever runs on a fake stream, so the free is immediate.
CUresult mem_free_async(CUdeviceptr dptr, CUstream stream) {
  int d = -1;
  CUresult r = stream_device(stream, &d);
  if (r != CUDA_SUCCESS) return r;
  {
    State& s = state();
    std::lock_guard lock(s.mu);
    if (Graph* g = capture_of(s, stream)) {
      g->nodes.push_back(GraphNode{false, dptr, 0, d});
      return CUDA_SUCCESS;
    }
  }
  return release_range(dptr, freed_by_mem_free);
}

CUresult mem_alloc_host(void** pp, size_t size) {
  if (!pp) return CUDA_ERROR_INVALID_VALUE;
  uint64_t p = 0;
  CUresult r = mem_alloc(Kind::kHost, &p, size);
  if (r == CUDA_SUCCESS) *pp = reinterpret_cast<void*>(p);
  return r;
}

CUresult mem_host_alloc(void** pp, size_t size, unsigned int flags) {
  constexpr unsigned int kKnown =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (flags & ~kKnown) return CUDA_ERROR_INVALID_VALUE;
  return mem_alloc_host(pp, size);
}

CUresult mem_free_host(void* p) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  return release_range(reinterpret_cast<uint64_t>(p), [](Kind k) { return k == Kind::kHost; });
}

// ---- CUDA arrays and external memory ------------------------------------------------------------

uint64_t array_format_bytes(CUarray_format f) {
  switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 0;
  }
}

CUresult array_create(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR* d, unsigned levels,
                      bool mipmapped) {
  if (!out || !d || d->Width == 0 || levels == 0 || !array_format_bytes(d->Format) ||
      (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int dev = -1;
  CUresult r = current_device(&dev);
  if (r != CUDA_SUCCESS) return r;
  uint64_t size = 0;
  if (!(d->Flags & CUDA_ARRAY3D_DEFERRED_MAPPING)) {
    uint64_t w = d->Width, h = d->Height, z = d->Depth;
    for (unsigned l = 0; l < levels; ++l) {
      size += w * (h ? h : 1) * (z ? z : 1) * d->NumChannels * array_format_bytes(d->Format);
      w = w > 1 ? w / 2 : 1;
      if (h) h = h > 1 ? h / 2 : 1;
      if (z && !(d->Flags & CUDA_ARRAY3D_LAYERED)) z = z > 1 ? z / 2 : 1;
    }
  }
  State& s = state();
  std::lock_guard lock(s.mu);
  r = count_alloc_call(s);
  if (r != CUDA_SUCCESS) return r;
  r = charge(s, dev, size);
  if (r != CUDA_SUCCESS) return r;
  void* p = size ? backing_alloc(Kind::kDevice, size) : nullptr;
  if (size && !p) {
    s.used[dev] -= size;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto* a = new ArrayObj{reinterpret_cast<uint64_t>(p), size, dev, mipmapped};
  s.arrays.insert(a);
  *out = reinterpret_cast<CUarray>(a);
  return CUDA_SUCCESS;
}

CUresult array_destroy(void* handle, bool mipmapped) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* a = static_cast<ArrayObj*>(handle);
  if (!s.arrays.count(a) || a->mipmapped != mipmapped) return CUDA_ERROR_INVALID_HANDLE;
  s.arrays.erase(a);
  s.used[a->device] -= a->size;
  if (a->size) backing_free(Kind::kDevice, a->base, a->size);
  delete a;
  return CUDA_SUCCESS;
}

CUresult import_external_memory(CUexternalMemory* out, const CUDA_EXTERNAL_MEMORY_HANDLE_DESC* d) {
  if (!out || !d || d->type != CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD || d->size == 0 ||
      fcntl(d->handle.fd, F_GETFD) < 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int dev = -1;
  CUresult r = current_device(&dev);
  if (r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* e = new ExternalMemory{static_cast<size_t>(d->size), dev};
  s.external.insert(e);
  *out = reinterpret_cast<CUexternalMemory>(e);
  return CUDA_SUCCESS;
}

CUresult external_memory_mapped_buffer(CUdeviceptr* out, CUexternalMemory ext,
                                       const CUDA_EXTERNAL_MEMORY_BUFFER_DESC* d) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!out || !d || d->size == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* e = reinterpret_cast<ExternalMemory*>(ext);
  if (!s.external.count(e)) return CUDA_ERROR_INVALID_HANDLE;
  if (d->offset > e->size || d->size > e->size - d->offset) return CUDA_ERROR_INVALID_VALUE;
  void* p = mmap(nullptr, d->size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  *out = reinterpret_cast<uint64_t>(p);
  s.ranges[*out] = Range{static_cast<size_t>(d->size), e->device, Kind::kExtBuffer, 0};
  return CUDA_SUCCESS;
}

CUresult destroy_external_memory(CUexternalMemory ext) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* e = reinterpret_cast<ExternalMemory*>(ext);
  if (!s.external.erase(e)) return CUDA_ERROR_INVALID_HANDLE;
  delete e;
  return CUDA_SUCCESS;
}

// ---- CUDA IPC -----------------------------------------------------------------------------------

struct IpcHandle {  // what the fake's CUipcMemHandle bytes hold
  uint64_t magic;
  int64_t pid;
  uint64_t size;
  int64_t device;
};
static_assert(sizeof(IpcHandle) <= CU_IPC_HANDLE_SIZE);
constexpr uint64_t kIpcMagic = 0x4350496b616b6146;  // "FakeIPC"

CUresult ipc_get_mem_handle(CUipcMemHandle* handle, CUdeviceptr dptr) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto it = s.ranges.find(dptr);
  if (it == s.ranges.end() || it->second.kind == Kind::kHost || it->second.kind == Kind::kIpc) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  IpcHandle h{kIpcMagic, getpid(), it->second.size, it->second.device};
  *handle = CUipcMemHandle{};
  std::memcpy(handle->reserved, &h, sizeof h);
  return CUDA_SUCCESS;
}

CUresult ipc_open_mem_handle(CUdeviceptr* dptr, CUipcMemHandle handle) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  int d = -1;
  CUresult r = current_device(&d);
  if (r != CUDA_SUCCESS) return r;
  IpcHandle h{};
  std::memcpy(&h, handle.reserved, sizeof h);
  if (h.magic != kIpcMagic || h.size == 0 || !valid_device(static_cast<int>(h.device))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  void* p = mmap(nullptr, h.size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  State& s = state();
  std::lock_guard lock(s.mu);
  *dptr = reinterpret_cast<uint64_t>(p);
  s.ranges[*dptr] = Range{h.size, static_cast<int>(h.device), Kind::kIpc, 0};
  return CUDA_SUCCESS;
}

CUresult ipc_close_mem_handle(CUdeviceptr dptr) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto it = s.ranges.find(dptr);
  if (it == s.ranges.end() || it->second.kind != Kind::kIpc) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(dptr), it->second.size);
  s.ranges.erase(it);
  return CUDA_SUCCESS;
}

CUresult mem_get_address_range(CUdeviceptr* base, size_t* size, CUdeviceptr dptr) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  uint64_t b = 0;
  const Range* r = find_containing(s, dptr, &b);
  if (!r || r->kind == Kind::kHost) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = b;
  if (size) *size = r->size;
  return CUDA_SUCCESS;
}

// ---- CUDA graphs and stream capture -----------------------------------------------------------

CUresult graph_create(CUgraph* graph, unsigned int flags) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!graph || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* g = new Graph;
  s.graphs.insert(g);
  *graph = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

// Caller holds the lock.
Graph* valid_graph(State& s, CUgraph graph) {
  auto* g = reinterpret_cast<Graph*>(graph);
  return s.graphs.count(g) ? g : nullptr;
}

CUresult graph_destroy(CUgraph graph) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  Graph* g = valid_graph(s, graph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  for (GraphExec* e : s.execs) {
    if (e->from == g) e->from = nullptr;
  }
  s.graphs.erase(g);
  delete g;
  return CUDA_SUCCESS;
}

CUresult graph_add_mem_alloc(CUgraphNode* node, CUgraph graph, const CUmemPoolProps& props,
                             size_t size, CUdeviceptr* dptr) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!node || !dptr || !valid_device_location(props.location)) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  Graph* g = valid_graph(s, graph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  uint64_t p = 0;
  CUresult r = add_graph_alloc_node(g, props.location.id, size, &p);
  if (r != CUDA_SUCCESS) return r;
  *dptr = p;
  *node = reinterpret_cast<CUgraphNode>(g->nodes.size());  // an opaque, non-null value
  return CUDA_SUCCESS;
}

CUresult graph_add_mem_free(CUgraphNode* node, CUgraph graph, CUdeviceptr dptr) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!node || !dptr) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  Graph* g = valid_graph(s, graph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  g->nodes.push_back(GraphNode{false, dptr, 0, 0});
  *node = reinterpret_cast<CUgraphNode>(g->nodes.size());
  return CUDA_SUCCESS;
}

CUresult graph_add_node(CUgraphNode* node, CUgraph graph, CUgraphNodeParams* p) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
    return graph_add_mem_alloc(node, graph, p->alloc.poolProps, p->alloc.bytesize, &p->alloc.dptr);
  }
  if (p->type == CU_GRAPH_NODE_TYPE_MEM_FREE) return graph_add_mem_free(node, graph, p->free.dptr);
  return CUDA_ERROR_NOT_SUPPORTED;
}

CUresult graph_instantiate(CUgraphExec* exec, CUgraph graph, uint64_t flags) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!exec || (flags & ~uint64_t{CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH})) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = state();
  std::lock_guard lock(s.mu);
  Graph* g = valid_graph(s, graph);
  if (!g) return CUDA_ERROR_INVALID_VALUE;
  if (!g->nodes.empty()) {
    for (const GraphExec* other : s.execs) {
      if (other->from == g) return CUDA_ERROR_INVALID_VALUE;
    }
  }
  auto* e =
      new GraphExec{g->nodes, (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) != 0, g};
  s.execs.insert(e);
  *exec = reinterpret_cast<CUgraphExec>(e);
  return CUDA_SUCCESS;
}

CUresult graph_exec_destroy(CUgraphExec exec) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* e = reinterpret_cast<GraphExec*>(exec);
  if (!s.execs.erase(e)) return CUDA_ERROR_INVALID_VALUE;
  delete e;
  return CUDA_SUCCESS;
}

// Caller holds the lock. Makes a graph allocation's memory live, growing the device's pool.
CUresult graph_memory_live(State& s, const GraphNode& n) {
  s.graph_used[n.device] += n.size;
  if (s.graph_used[n.device] > s.graph_reserved[n.device]) {
    const uint64_t grow = s.graph_used[n.device] - s.graph_reserved[n.device];
    if (charge(s, n.device, grow) != CUDA_SUCCESS) {
      s.graph_used[n.device] -= n.size;
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    s.graph_reserved[n.device] += grow;
  }
  s.ranges[n.addr] = Range{n.size, n.device, Kind::kGraph, 0};
  return CUDA_SUCCESS;
}

// Caller holds the lock.
void graph_memory_gone(State& s, uint64_t addr) {
  auto it = s.ranges.find(addr);
  s.graph_used[it->second.device] -= it->second.size;
  s.ranges.erase(it);
}

CUresult graph_launch(CUgraphExec exec, CUstream stream) {
  int d = -1;
  CUresult r = stream_device(stream, &d);
  if (r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* e = reinterpret_cast<GraphExec*>(exec);
  if (!s.execs.count(e)) return CUDA_ERROR_INVALID_VALUE;
  auto live_graph_memory = [&](uint64_t addr) {
    auto it = s.ranges.find(addr);
    return it != s.ranges.end() && it->second.kind == Kind::kGraph;
  };
  // Checked before anything changes: each allocation free to be made (or to be auto-freed),
  // each free node's memory live already or made earlier in this graph.
  std::set<uint64_t> made;
  for (const GraphNode& n : e->nodes) {
    if (n.alloc) {
      if (live_graph_memory(n.addr) && !e->auto_free) return CUDA_ERROR_INVALID_VALUE;
      made.insert(n.addr);
    } else if (!made.count(n.addr) && !live_graph_memory(n.addr)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  if (e->auto_free) {
    for (const GraphNode& n : e->nodes) {
      if (n.alloc && live_graph_memory(n.addr)) graph_memory_gone(s, n.addr);
    }
  }
  for (const GraphNode& n : e->nodes) {
    if (!n.alloc) {
      graph_memory_gone(s, n.addr);
      continue;
    }
    r = graph_memory_live(s, n);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult device_graph_mem_trim(CUdevice device) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  State& s = state();
  std::lock_guard lock(s.mu);
  s.used[device] -= s.graph_reserved[device] - s.graph_used[device];
  s.graph_reserved[device] = s.graph_used[device];
  return CUDA_SUCCESS;
}

CUresult device_get_graph_mem_attribute(CUdevice device, CUgraphMem_attribute attr, void* value) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto* out = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
      *out = s.graph_used[device];
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      *out = s.graph_reserved[device];
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult stream_begin_capture(CUstream stream, Graph* into) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!s.streams.count(reinterpret_cast<const Stream*>(stream))) {
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (capture_of(s, stream)) return CUDA_ERROR_ILLEGAL_STATE;
  if (!into) {
    into = new Graph;
    s.graphs.insert(into);
  } else if (!s.graphs.count(into)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  s.captures[stream] = into;
  ++s.capture_ids;
  return CUDA_SUCCESS;
}

CUresult stream_end_capture(CUstream stream, CUgraph* graph) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!graph) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  Graph* g = capture_of(s, stream);
  if (!g) return CUDA_ERROR_ILLEGAL_STATE;
  s.captures.erase(stream);
  *graph = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult stream_get_capture_info(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id,
                                 CUgraph* graph) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  int d = -1;
  CUresult r = stream_device(stream, &d);
  if (r != CUDA_SUCCESS) return r;
  State& s = state();
  std::lock_guard lock(s.mu);
  Graph* g = capture_of(s, stream);
  *status = g ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  if (id) *id = g ? s.capture_ids : 0;
  if (graph) *graph = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

// ---- virtual memory management ----------------------------------------------------------------

bool valid_alloc_prop(const CUmemAllocationProp* prop) {
  return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
         valid_device_location(prop->location);
}

CUresult mem_get_allocation_granularity(size_t* granularity, const CUmemAllocationProp* prop,
                                        CUmemAllocationGranularity_flags option) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!granularity || !valid_alloc_prop(prop) ||
      (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
       option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = kVmmGranularity;
  return CUDA_SUCCESS;
}

CUresult mem_address_reserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                             unsigned long long flags) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!ptr || size == 0 || size % kVmmGranularity != 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (alignment == 0) alignment = kVmmGranularity;
  if ((alignment & (alignment - 1)) != 0) return CUDA_ERROR_INVALID_VALUE;
  // Over-reserve, then trim, so the base has the requested alignment like a real reservation.
  const size_t span = size + alignment;
  void* raw = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto start = reinterpret_cast<uint64_t>(raw);
  const uint64_t base = round_up(start, alignment);
  if (base > start) munmap(raw, base - start);
  if (start + span > base + size) {
    munmap(reinterpret_cast<void*>(base + size), start + span - (base + size));
  }
  State& s = state();
  std::lock_guard lock(s.mu);
  s.reservations[base] = size;
  *ptr = base;
  return CUDA_SUCCESS;
}

// Caller holds the lock. True when [ptr, ptr+size) is exactly covered by consecutive mappings.
bool covered_by_mappings(State& s, uint64_t ptr, size_t size) {
  uint64_t at = ptr;
  for (auto it = s.ranges.find(ptr); at < ptr + size; ++it) {
    if (it == s.ranges.end() || it->first != at || it->second.kind != Kind::kMapped) return false;
    at += it->second.size;
  }
  return at == ptr + size;
}

CUresult mem_address_free(CUdeviceptr ptr, size_t size) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto it = s.reservations.find(ptr);
  if (it == s.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  auto mapped = s.ranges.lower_bound(ptr);
  if (mapped != s.ranges.end() && mapped->first < ptr + size) return CUDA_ERROR_INVALID_VALUE;
  s.reservations.erase(it);
  munmap(reinterpret_cast<void*>(ptr), size);
  return CUDA_SUCCESS;
}

// Caller holds the lock.
void destroy_physical_if_unused(State& s, CUmemGenericAllocationHandle handle) {
  auto it = s.handles.find(handle);
  if (it == s.handles.end() || it->second.refs > 0 || it->second.mappings > 0) return;
  close(it->second.fd);
  if (!it->second.imported) s.used[it->second.device] -= it->second.size;
  s.handles.erase(it);
}

CUresult mem_create(CUmemGenericAllocationHandle* handle, size_t size,
                    const CUmemAllocationProp* prop, unsigned long long flags) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!handle || !valid_alloc_prop(prop) || flags != 0 || size == 0 ||
      size % kVmmGranularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int device = prop->location.id;
  State& s = state();
  std::lock_guard lock(s.mu);
  CUresult r = count_alloc_call(s);
  if (r != CUDA_SUCCESS) return r;
  r = charge(s, device, size);
  if (r != CUDA_SUCCESS) return r;
  const int fd = memfd_create("fake-cuda-physical", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    s.used[device] -= size;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUmemGenericAllocationHandle h = s.next_handle++;
  s.handles[h] = Physical{size, device, fd, 1, 0, false};
  *handle = h;
  return CUDA_SUCCESS;
}

// Like the real driver, the physical memory lives on until its last mapping is gone.
CUresult mem_release(CUmemGenericAllocationHandle handle) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto it = s.handles.find(handle);
  if (it == s.handles.end() || it->second.refs == 0) return CUDA_ERROR_INVALID_VALUE;
  --it->second.refs;
  destroy_physical_if_unused(s, handle);
  return CUDA_SUCCESS;
}

// The handle mapped at addr (anywhere inside the mapping), with one more reference.
CUresult mem_retain_allocation_handle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!handle) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  uint64_t base = 0;
  const Range* r = find_containing(s, reinterpret_cast<uint64_t>(addr), &base);
  if (!r || r->kind != Kind::kMapped) return CUDA_ERROR_INVALID_VALUE;
  ++s.handles[r->handle].refs;
  *handle = r->handle;
  return CUDA_SUCCESS;
}

// POSIX file descriptors only: a dup of the handle's memfd, which another process (or this one)
// imports as a new handle sharing the pages.
CUresult mem_export(void* shareable, CUmemGenericAllocationHandle handle,
                    CUmemAllocationHandleType type, unsigned long long flags) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!shareable || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = state();
  std::lock_guard lock(s.mu);
  auto it = s.handles.find(handle);
  if (it == s.handles.end() || it->second.refs == 0) return CUDA_ERROR_INVALID_HANDLE;
  struct stat st {};
  const int fd = dup(it->second.fd);
  if (fd < 0 || fstat(fd, &st) != 0) return CUDA_ERROR_OUT_OF_MEMORY;
  s.exported[st.st_ino] = it->second.device;
  *static_cast<int*>(shareable) = fd;
  return CUDA_SUCCESS;
}

CUresult mem_import(CUmemGenericAllocationHandle* handle, void* os_handle,
                    CUmemAllocationHandleType type) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!handle || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
  State& s = state();
  std::lock_guard lock(s.mu);
  struct stat st {};
  if (fstat(fd, &st) != 0) return CUDA_ERROR_INVALID_VALUE;
  auto exp = s.exported.find(st.st_ino);
  if (exp == s.exported.end()) return CUDA_ERROR_INVALID_VALUE;
  const int own = dup(fd);
  if (own < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUmemGenericAllocationHandle h = s.next_handle++;
  s.handles[h] = Physical{static_cast<size_t>(st.st_size), exp->second, own, 1, 0, true};
  *handle = h;
  return CUDA_SUCCESS;
}

CUresult mem_get_allocation_properties(CUmemAllocationProp* prop,
                                       CUmemGenericAllocationHandle handle) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!prop) return CUDA_ERROR_INVALID_VALUE;
  State& s = state();
  std::lock_guard lock(s.mu);
  auto it = s.handles.find(handle);
  if (it == s.handles.end() || it->second.refs == 0) return CUDA_ERROR_INVALID_HANDLE;
  *prop = CUmemAllocationProp{};
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = it->second.device;
  return CUDA_SUCCESS;
}

CUresult mem_map(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                 unsigned long long flags) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (flags != 0 || size == 0 || size % kVmmGranularity != 0 || offset % kVmmGranularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  State& s = state();
  std::lock_guard lock(s.mu);
  auto h = s.handles.find(handle);
  if (h == s.handles.end() || h->second.refs == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (offset > h->second.size || size > h->second.size - offset) return CUDA_ERROR_INVALID_VALUE;
  auto res = s.reservations.upper_bound(ptr);
  if (res == s.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --res;
  if (ptr + size > res->first + res->second) return CUDA_ERROR_INVALID_VALUE;
  auto next = s.ranges.lower_bound(ptr);
  if (next != s.ranges.end() && next->first < ptr + size) return CUDA_ERROR_ALREADY_MAPPED;
  uint64_t prev_base = 0;
  if (find_containing(s, ptr, &prev_base)) return CUDA_ERROR_ALREADY_MAPPED;
  // Inaccessible until cuMemSetAccess, as on the real driver.
  void* p = mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                 h->second.fd, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  ++h->second.mappings;
  s.ranges[ptr] = Range{size, h->second.device, Kind::kMapped, handle};
  return CUDA_SUCCESS;
}

CUresult mem_unmap(CUdeviceptr ptr, size_t size) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  State& s = state();
  std::lock_guard lock(s.mu);
  if (size == 0 || !covered_by_mappings(s, ptr, size)) return CUDA_ERROR_INVALID_VALUE;
  auto it = s.ranges.find(ptr);
  while (it != s.ranges.end() && it->first < ptr + size) {
    const CUmemGenericAllocationHandle handle = it->second.handle;
    // Put the reservation back in place of the mapping.
    mmap(reinterpret_cast<void*>(it->first), it->second.size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    it = s.ranges.erase(it);
    --s.handles[handle].mappings;
    destroy_physical_if_unused(s, handle);
  }
  return CUDA_SUCCESS;
}

CUresult mem_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!desc || count == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
  int prot = PROT_NONE;
  for (size_t i = 0; i < count; ++i) {
    if (!valid_device_location(desc[i].location)) return CUDA_ERROR_INVALID_DEVICE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      prot = PROT_READ | PROT_WRITE;
    } else if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ) {
      prot |= PROT_READ;
    } else if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!covered_by_mappings(s, ptr, size)) return CUDA_ERROR_INVALID_VALUE;
  return mprotect(reinterpret_cast<void*>(ptr), size, prot) == 0 ? CUDA_SUCCESS
                                                                 : CUDA_ERROR_INVALID_VALUE;
}

// ---- errors -----------------------------------------------------------------------------------

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};

#define FAKE_ERROR(code, text) \
  { code, #code, text }
constexpr ErrorText kErrors[] = {
    FAKE_ERROR(CUDA_SUCCESS, "no error"),
    FAKE_ERROR(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    FAKE_ERROR(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    FAKE_ERROR(CUDA_ERROR_NOT_INITIALIZED, "initialization error"),
    FAKE_ERROR(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    FAKE_ERROR(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    FAKE_ERROR(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    FAKE_ERROR(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    FAKE_ERROR(CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"),
    FAKE_ERROR(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    FAKE_ERROR(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    FAKE_ERROR(CUDA_ERROR_NOT_SUPPORTED, "operation not supported"),
    FAKE_ERROR(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef FAKE_ERROR

CUresult error_text(CUresult error, const char** out, bool name) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  for (const ErrorText& e : kErrors) {
    if (e.code == error) {
      *out = name ? e.name : e.text;
      return CUDA_SUCCESS;
    }
  }
  *out = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

// Narrows a 64-bit result into the 32-bit ABI; false (and the allocation undone) if it cannot.
template <typename Free>
CUresult narrow_pointer(CUresult r, uint64_t p, CUdeviceptr_v1* out, Free undo) {
  if (r != CUDA_SUCCESS) return r;
  if (p > UINT_MAX) {
    undo(p);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *out = static_cast<CUdeviceptr_v1>(p);
  return CUDA_SUCCESS;
}

}  // namespace

bool symbol_missing(const char* base_name) noexcept {
  for (const std::string& m : config().missing) {
    if (m == base_name) return true;
  }
  return false;
}

}  // namespace cumemtrace::fake

// ---- exports ----------------------------------------------------------------------------------
// Thin shims over the functions above: nothing inside the fake calls an exported symbol, since
// the preload exports the same names.

namespace fk = cumemtrace::fake;

FAKE_EXPORT CUresult cuInit(unsigned int Flags) {
  return fk::init(Flags);
}

FAKE_EXPORT CUresult cuDriverGetVersion(int* driverVersion) {
  if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = fk::kDriverVersion;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetCount(int* count) {
  if (!fk::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = fk::config().devices;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  return fk::device_get(device, ordinal);
}

// Device N sits on PCI bus 0x10 * (N + 1) of domain 0 (tests/fake_driver/fake_nvml.cpp agrees).
FAKE_EXPORT CUresult cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  if (!fk::initialized()) return CUDA_ERROR_NOT_INITIALIZED;
  if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!fk::valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(pciBusId, static_cast<size_t>(len), "0000:%02X:00.0", 0x10 * (dev + 1));
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  return fk::primary_ctx_retain(pctx, dev);
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return fk::primary_ctx_release(dev);
}

// Before 11.0 the release also reset the context; the fake never tears contexts down anyway.
FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return fk::primary_ctx_release(dev);
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  return fk::primary_ctx_reset(dev);
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  return fk::primary_ctx_get_state(dev, flags, active);
}

// The three ABIs of cuCtxCreate; the fake ignores flags, affinity and create parameters.
FAKE_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int, CUdevice dev) {
  return fk::ctx_create(pctx, dev);
}

FAKE_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam*, int, unsigned int,
                                    CUdevice dev) {
  return fk::ctx_create(pctx, dev);
}

FAKE_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams*, unsigned int,
                                    CUdevice dev) {
  return fk::ctx_create(pctx, dev);
}

FAKE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  return fk::ctx_destroy(ctx);
}

FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  return fk::ctx_set_current(ctx);
}

FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext* pctx) {
  return fk::ctx_get_current(pctx);
}

FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  return fk::ctx_get_device(device);
}

FAKE_EXPORT CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  if (!free || !total) return CUDA_ERROR_INVALID_VALUE;
  uint64_t f = 0, t = 0;
  CUresult r = fk::mem_get_info(&f, &t);
  if (r == CUDA_SUCCESS) {
    *free = f;
    *total = t;
  }
  return r;
}

FAKE_EXPORT CUresult cuMemGetInfo(unsigned int* free, unsigned int* total) {
  if (!free || !total) return CUDA_ERROR_INVALID_VALUE;
  uint64_t f = 0, t = 0;
  CUresult r = fk::mem_get_info(&f, &t);
  if (r == CUDA_SUCCESS) {
    *free = static_cast<unsigned int>(std::min<uint64_t>(f, UINT_MAX));
    *total = static_cast<unsigned int>(std::min<uint64_t>(t, UINT_MAX));
  }
  return r;
}

FAKE_EXPORT CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                           CUdeviceptr ptr) {
  return fk::pointer_get_attribute(data, attribute, ptr);
}

FAKE_EXPORT CUresult cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  return fk::stream_create(phStream, Flags);
}

FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) {
  return fk::stream_destroy(hStream);
}

FAKE_EXPORT CUresult cuStreamDestroy(CUstream hStream) {
  return fk::stream_destroy(hStream);
}

// CUDA 12.8: the device of a stream (the current context's for the default streams).
FAKE_EXPORT CUresult cuStreamGetDevice(CUstream hStream, CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  int d = -1;
  CUresult r = fk::stream_device(hStream, &d);
  if (r == CUDA_SUCCESS) *device = d;
  return r;
}

FAKE_EXPORT CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return fk::stream_is_capturing(hStream, captureStatus);
}

FAKE_EXPORT CUresult cuStreamIsCapturing_ptsz(CUstream hStream,
                                              CUstreamCaptureStatus* captureStatus) {
  return fk::stream_is_capturing(hStream, captureStatus);
}

FAKE_EXPORT CUresult cuGetErrorName(CUresult error, const char** pStr) {
  return fk::error_text(error, pStr, true);
}

FAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char** pStr) {
  return fk::error_text(error, pStr, false);
}

FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t p = 0;
  CUresult r = fk::mem_alloc(fk::Kind::kDevice, &p, bytesize);
  if (r == CUDA_SUCCESS) *dptr = p;
  return r;
}

FAKE_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t p = 0;
  CUresult r = fk::mem_alloc(fk::Kind::kLegacy32, &p, bytesize);
  return fk::narrow_pointer(r, p, dptr, fk::mem_free);
}

FAKE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                        size_t Height, unsigned int ElementSizeBytes) {
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t p = 0;
  CUresult r =
      fk::mem_alloc_pitch(fk::Kind::kPitch, &p, pPitch, WidthInBytes, Height, ElementSizeBytes);
  if (r == CUDA_SUCCESS) *dptr = p;
  return r;
}

FAKE_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch,
                                     unsigned int WidthInBytes, unsigned int Height,
                                     unsigned int ElementSizeBytes) {
  if (!dptr || !pPitch) return CUDA_ERROR_INVALID_VALUE;
  uint64_t p = 0;
  size_t pitch = 0;
  CUresult r =
      fk::mem_alloc_pitch(fk::Kind::kLegacy32, &p, &pitch, WidthInBytes, Height, ElementSizeBytes);
  r = fk::narrow_pointer(r, p, dptr, fk::mem_free);
  if (r == CUDA_SUCCESS) *pPitch = static_cast<unsigned int>(pitch);
  return r;
}

FAKE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  return fk::mem_alloc_managed(dptr, bytesize, flags);
}

FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  return fk::mem_free(dptr);
}

FAKE_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr) {
  return fk::mem_free(dptr);
}

FAKE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return fk::mem_alloc_async(dptr, bytesize, hStream);
}

FAKE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return fk::mem_alloc_async(dptr, bytesize, hStream);
}

FAKE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream) {
  return fk::mem_alloc_from_pool_async(dptr, bytesize, pool, hStream);
}

FAKE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                  CUmemoryPool pool, CUstream hStream) {
  return fk::mem_alloc_from_pool_async(dptr, bytesize, pool, hStream);
}

FAKE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return fk::mem_free_async(dptr, hStream);
}

FAKE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return fk::mem_free_async(dptr, hStream);
}

FAKE_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  return fk::pool_create(pool, poolProps);
}

FAKE_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  return fk::pool_destroy(pool);
}

FAKE_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  return fk::default_mem_pool(pool_out, dev);
}

// No cuDeviceSetMemPool here: a device's current pool is its default pool.
FAKE_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool* pool_out, CUdevice dev) {
  return fk::default_mem_pool(pool_out, dev);
}

FAKE_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr,
                                           void* value) {
  return fk::pool_get_attribute(pool, attr, value);
}

FAKE_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  return fk::pool_trim_to(pool, minBytesToKeep);
}

FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                 const CUmemAllocationProp* prop, unsigned long long flags) {
  return fk::mem_create(handle, size, prop, flags);
}

FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  return fk::mem_release(handle);
}

FAKE_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  return fk::mem_retain_allocation_handle(handle, addr);
}

FAKE_EXPORT CUresult cuMemExportToShareableHandle(void* shareable,
                                                  CUmemGenericAllocationHandle handle,
                                                  CUmemAllocationHandleType type,
                                                  unsigned long long flags) {
  return fk::mem_export(shareable, handle, type, flags);
}

FAKE_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                    void* os_handle,
                                                    CUmemAllocationHandleType type) {
  return fk::mem_import(handle, os_handle, type);
}

FAKE_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                            CUmemGenericAllocationHandle handle) {
  return fk::mem_get_allocation_properties(prop, handle);
}

FAKE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle, unsigned long long flags) {
  return fk::mem_map(ptr, size, offset, handle, flags);
}

FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  return fk::mem_unmap(ptr, size);
}

FAKE_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                    size_t count) {
  return fk::mem_set_access(ptr, size, desc, count);
}

// `addr` is only a hint for the real driver too; the fake never honours it.
FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                         CUdeviceptr /*addr*/, unsigned long long flags) {
  return fk::mem_address_reserve(ptr, size, alignment, flags);
}

FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  return fk::mem_address_free(ptr, size);
}

FAKE_EXPORT CUresult cuMemGetAllocationGranularity(size_t* granularity,
                                                   const CUmemAllocationProp* prop,
                                                   CUmemAllocationGranularity_flags option) {
  return fk::mem_get_allocation_granularity(granularity, prop, option);
}

FAKE_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  return fk::mem_host_alloc(pp, bytesize, Flags);
}

FAKE_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return fk::mem_alloc_host(pp, bytesize);
}

FAKE_EXPORT CUresult cuMemAllocHost(void** pp, unsigned int bytesize) {
  return fk::mem_alloc_host(pp, bytesize);
}

FAKE_EXPORT CUresult cuMemFreeHost(void* p) {
  return fk::mem_free_host(p);
}

// ---- CUDA graphs and stream capture -----------------------------------------------------------

FAKE_EXPORT CUresult cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  return fk::graph_create(phGraph, flags);
}

FAKE_EXPORT CUresult cuGraphDestroy(CUgraph hGraph) {
  return fk::graph_destroy(hGraph);
}

FAKE_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                            const CUgraphNode*, size_t,
                                            CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  if (!nodeParams) return CUDA_ERROR_INVALID_VALUE;
  return fk::graph_add_mem_alloc(phGraphNode, hGraph, nodeParams->poolProps, nodeParams->bytesize,
                                 &nodeParams->dptr);
}

FAKE_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode* phGraphNode, CUgraph hGraph,
                                           const CUgraphNode*, size_t, CUdeviceptr dptr) {
  return fk::graph_add_mem_free(phGraphNode, hGraph, dptr);
}

FAKE_EXPORT CUresult cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*,
                                    size_t, CUgraphNodeParams* nodeParams) {
  return fk::graph_add_node(phGraphNode, hGraph, nodeParams);
}

FAKE_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode*,
                                       const CUgraphEdgeData*, size_t,
                                       CUgraphNodeParams* nodeParams) {
  return fk::graph_add_node(phGraphNode, hGraph, nodeParams);
}

FAKE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                 unsigned long long flags) {
  return fk::graph_instantiate(phGraphExec, hGraph, flags);
}

FAKE_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                  CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (!params) return CUDA_ERROR_INVALID_VALUE;
  params->result_out = CUDA_GRAPH_INSTANTIATE_SUCCESS;
  return fk::graph_instantiate(phGraphExec, hGraph, params->flags);
}

FAKE_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                       CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return cuGraphInstantiateWithParams(phGraphExec, hGraph, params);
}

FAKE_EXPORT CUresult cuGraphExecDestroy(CUgraphExec hGraphExec) {
  return fk::graph_exec_destroy(hGraphExec);
}

FAKE_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  return fk::graph_launch(hGraphExec, hStream);
}

FAKE_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  return fk::graph_launch(hGraphExec, hStream);
}

FAKE_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
  return fk::device_graph_mem_trim(device);
}

FAKE_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                                  void* value) {
  return fk::device_get_graph_mem_attribute(device, attr, value);
}

FAKE_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode) {
  return fk::stream_begin_capture(hStream, nullptr);
}

FAKE_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode) {
  return fk::stream_begin_capture(hStream, nullptr);
}

FAKE_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                                 const CUgraphNode*, const CUgraphEdgeData*, size_t,
                                                 CUstreamCaptureMode) {
  return fk::stream_begin_capture(hStream, reinterpret_cast<fk::Graph*>(hGraph));
}

FAKE_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph* phGraph) {
  return fk::stream_end_capture(hStream, phGraph);
}

FAKE_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph) {
  return fk::stream_end_capture(hStream, phGraph);
}

FAKE_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus* status,
                                               cuuint64_t* id, CUgraph* graph,
                                               const CUgraphNode** deps, size_t* ndeps) {
  if (deps) *deps = nullptr;
  if (ndeps) *ndeps = 0;
  return fk::stream_get_capture_info(hStream, status, id, graph);
}

FAKE_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus* status,
                                               cuuint64_t* id, CUgraph* graph,
                                               const CUgraphNode** deps,
                                               const CUgraphEdgeData** edges, size_t* ndeps) {
  if (edges) *edges = nullptr;
  return cuStreamGetCaptureInfo_v2(hStream, status, id, graph, deps, ndeps);
}

// ---- CUDA IPC -----------------------------------------------------------------------------------

FAKE_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  return fk::ipc_get_mem_handle(pHandle, dptr);
}

FAKE_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                           unsigned int) {
  return fk::ipc_open_mem_handle(pdptr, handle);
}

FAKE_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  return fk::ipc_close_mem_handle(dptr);
}

FAKE_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  return fk::mem_get_address_range(pbase, psize, dptr);
}

// ---- CUDA arrays and external memory ------------------------------------------------------------

FAKE_EXPORT CUresult cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* d) {
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  const CUDA_ARRAY3D_DESCRIPTOR d3{d->Width, d->Height, 0, d->Format, d->NumChannels, 0};
  return fk::array_create(pHandle, &d3, 1, false);
}

FAKE_EXPORT CUresult cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  return fk::array_create(pHandle, d, 1, false);
}

FAKE_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* pHandle,
                                            const CUDA_ARRAY3D_DESCRIPTOR* d,
                                            unsigned int numMipmapLevels) {
  CUarray a = nullptr;
  const CUresult r = fk::array_create(&a, d, numMipmapLevels, true);
  if (r == CUDA_SUCCESS) *pHandle = reinterpret_cast<CUmipmappedArray>(a);
  return r;
}

FAKE_EXPORT CUresult cuArrayDestroy(CUarray hArray) {
  return fk::array_destroy(hArray, false);
}

FAKE_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray) {
  return fk::array_destroy(hMipmappedArray, true);
}

FAKE_EXPORT CUresult cuImportExternalMemory(CUexternalMemory* extMem_out,
                                            const CUDA_EXTERNAL_MEMORY_HANDLE_DESC* desc) {
  return fk::import_external_memory(extMem_out, desc);
}

FAKE_EXPORT CUresult cuExternalMemoryGetMappedBuffer(CUdeviceptr* devPtr, CUexternalMemory extMem,
                                                     const CUDA_EXTERNAL_MEMORY_BUFFER_DESC* d) {
  return fk::external_memory_mapped_buffer(devPtr, extMem, d);
}

FAKE_EXPORT CUresult cuDestroyExternalMemory(CUexternalMemory extMem) {
  return fk::destroy_external_memory(extMem);
}
