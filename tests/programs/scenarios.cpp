// Contract: implements the scenarios documented in scenarios.h, with exactly the sizes listed
// there. Built -O0 -fno-inline with frame pointers so every call keeps its own frame and line.
#include "scenarios.h"

#include <nvtx3/nvToolsExt.h>
#include <wchar.h>

#include "cumemtrace.h"
#include "wire_format.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace cumemtrace::testprog {

namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * kKiB;

[[noreturn]] void fail(const char* what, CUresult r) {
  std::fprintf(stderr, "ct: %s failed: CUresult %d\n", what, static_cast<int>(r));
  std::exit(3);
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) fail(what, r);
}

void expect(CUresult r, CUresult wanted, const char* what) {
  if (r != wanted) {
    std::fprintf(stderr, "ct: %s returned CUresult %d, expected %d\n", what, static_cast<int>(r),
                 static_cast<int>(wanted));
    std::exit(3);
  }
}

// Refuses before any driver call, so an unsupported scenario leaves no trace.
template <typename... Fn>
void require(const char* scenario, Fn... entries) {
  if (!(... && (entries != nullptr))) {
    std::fprintf(stderr, "ct: scenario '%s' is not available in this program\n", scenario);
    std::exit(2);
  }
}

long arg_long(int argc, char** argv, int index, long fallback) {
  return argc > index ? std::strtol(argv[index], nullptr, 10) : fallback;
}

void start_on_device0(const Driver& d) {
  check(d.init(), "init");
  check(d.setDevice(0), "set device 0");
}

CUdeviceptr alloc(const Driver& d, size_t size, const char* what) {
  CUdeviceptr p = 0;
  check(d.memAlloc(&p, size), what);
  return p;
}

// The common prologue of the process-lifecycle scenarios: 1 MiB on device 0.
CUdeviceptr alloc_1mib_on_device0(const Driver& d, const char* scenario) {
  require(scenario, d.init, d.setDevice, d.memAlloc);
  start_on_device0(d);
  return alloc(d, kMiB, "alloc 1 MiB");
}

int scenario_basic(const Driver& d, int, char**) {
  require("basic", d.init, d.setDevice, d.memAlloc, d.memFree, d.streamCreate, d.memAllocAsync,
          d.memFreeAsync, d.memAllocAsyncPtsz);
  start_on_device0(d);
  CUdeviceptr a = alloc(d, kMiB, "alloc a (1 MiB)");
  allocate_weights(&d);
  check(d.memFree(a), "free a");

  check(d.setDevice(1), "set device 1");
  alloc(d, 4 * kMiB, "alloc c (4 MiB)");
  CUstream s = nullptr;
  check(d.streamCreate(&s, 0), "stream create");
  CUdeviceptr p = 0;
  check(d.memAllocAsync(&p, 3 * kMiB, s), "allocAsync d (3 MiB)");
  check(d.memFreeAsync(p, s), "freeAsync d");
  check(d.memAllocAsyncPtsz(&p, 512 * kKiB, nullptr), "allocAsync_ptsz e (512 KiB)");
  return 0;
}

CUmemAllocationProp device0_pinned() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

// Reserves 8 MiB and maps a fresh 2 MiB handle, read-write, at its start.
void reserve_and_map(const Driver& d, CUdeviceptr* va, CUmemGenericAllocationHandle* handle) {
  const CUmemAllocationProp prop = device0_pinned();
  check(d.memAddressReserve(va, 8 * kMiB, 0, 0, 0), "cuMemAddressReserve 8 MiB");
  check(d.memCreate(handle, 2 * kMiB, &prop, 0), "cuMemCreate 2 MiB");
  check(d.memMap(*va, 2 * kMiB, 0, *handle, 0), "cuMemMap");
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(d.memSetAccess(*va, 2 * kMiB, &access, 1), "cuMemSetAccess");
}

int scenario_vmm(const Driver& d, int, char**) {
  require("vmm", d.init, d.setDevice, d.memGetAllocationGranularity, d.memAddressReserve,
          d.memAddressFree, d.memCreate, d.memRelease, d.memMap, d.memUnmap, d.memSetAccess);
  start_on_device0(d);
  const CUmemAllocationProp prop = device0_pinned();
  size_t granularity = 0;
  check(d.memGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity");
  if (granularity == 0 || (2 * kMiB) % granularity != 0) {
    std::fprintf(stderr, "ct: granularity %zu does not divide 2 MiB\n", granularity);
    return 3;
  }

  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle handle = 0;
  reserve_and_map(d, &va, &handle);
  check(d.memUnmap(va, 2 * kMiB), "cuMemUnmap");
  check(d.memRelease(handle), "cuMemRelease");
  check(d.memAddressFree(va, 8 * kMiB), "cuMemAddressFree");

  reserve_and_map(d, &va, &handle);
  return 0;
}

// Maps a fresh reservation of `size` to handle h, read-write from device 0.
CUdeviceptr map_new(const Driver& d, CUmemGenericAllocationHandle h, size_t size) {
  CUdeviceptr va = 0;
  check(d.memAddressReserve(&va, size, 0, 0, 0), "cuMemAddressReserve");
  check(d.memMap(va, size, 0, h, 0), "cuMemMap");
  CUmemAccessDesc access{};
  access.location = device0_pinned().location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(d.memSetAccess(va, size, &access, 1), "cuMemSetAccess");
  return va;
}

int scenario_vmm_refs(const Driver& d, int, char**) {
  require("vmm_refs", d.init, d.setDevice, d.memAddressReserve, d.memAddressFree, d.memCreate,
          d.memRelease, d.memMap, d.memUnmap, d.memSetAccess, d.memRetainAllocationHandle,
          d.memExportToShareableHandle, d.memImportFromShareableHandle);
  start_on_device0(d);
  CUmemAllocationProp prop = device0_pinned();

  // (1) NCCL's ncclCuMemAlloc / ncclCuMemFree.
  CUmemGenericAllocationHandle h1 = 0, r = 0;
  check(d.memCreate(&h1, 2 * kMiB, &prop, 0), "cuMemCreate h1");
  const CUdeviceptr va1 = map_new(d, h1, 2 * kMiB);
  check(d.memRetainAllocationHandle(&r, reinterpret_cast<void*>(va1 + 4096)), "retain");
  if (r != h1) {
    std::fprintf(stderr, "ct: retained handle %llu is not %llu\n", r, h1);
    return 3;
  }
  check(d.memRelease(r), "release retained");
  check(d.memUnmap(va1, 2 * kMiB), "cuMemUnmap va1");
  check(d.memRelease(h1), "release h1");
  check(d.memAddressFree(va1, 2 * kMiB), "cuMemAddressFree va1");

  // (2) Released right after mapping, as CUDA's samples do.
  CUmemGenericAllocationHandle h2 = 0;
  check(d.memCreate(&h2, 4 * kMiB, &prop, 0), "cuMemCreate h2");
  map_new(d, h2, 4 * kMiB);
  check(d.memRelease(h2), "release h2");

  // (3) Memory exported as a file descriptor and imported again (NCCL's peers do this across
  // processes).
  CUmemAllocationProp prop1 = prop;
  prop1.location.id = 1;
  prop1.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h3 = 0, h4 = 0;
  check(d.memCreate(&h3, 2 * kMiB, &prop1, 0), "cuMemCreate h3");
  int fd = -1;
  check(d.memExportToShareableHandle(&fd, h3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
        "export h3");
  check(d.memImportFromShareableHandle(&h4, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
        "import");
  if (h4 == h3) {
    std::fprintf(stderr, "ct: the imported handle is the exported one\n");
    return 3;
  }
  map_new(d, h4, 2 * kMiB);
  check(d.memRelease(h4), "release h4");
  check(d.memRelease(h3), "release h3");
  close(fd);
  return 0;
}

CUDA_MEM_ALLOC_NODE_PARAMS device0_graph_alloc(size_t size) {
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.poolProps.location.id = 0;
  p.bytesize = size;
  return p;
}

int scenario_graph(const Driver& d, int, char**) {
  require("graph", d.init, d.setDevice, d.memFree, d.streamCreate, d.memAllocAsync, d.memFreeAsync,
          d.graphCreate, d.graphDestroy, d.graphAddMemAllocNode, d.graphAddMemFreeNode,
          d.graphAddNode, d.graphInstantiate, d.graphExecDestroy, d.graphLaunch,
          d.streamBeginCapture, d.streamEndCapture, d.deviceGraphMemTrim);
  start_on_device0(d);
  CUstream s = nullptr;
  check(d.streamCreate(&s, 0), "stream create");

  // (1) Explicit memory nodes; a freed outside any graph, then made again.
  CUgraph g1 = nullptr;
  check(d.graphCreate(&g1, 0), "cuGraphCreate G1");
  CUDA_MEM_ALLOC_NODE_PARAMS pa = device0_graph_alloc(kMiB);
  CUDA_MEM_ALLOC_NODE_PARAMS pb = device0_graph_alloc(2 * kMiB);
  CUgraphNode na = nullptr, nb = nullptr, nfb = nullptr;
  check(d.graphAddMemAllocNode(&na, g1, nullptr, 0, &pa), "alloc node a (1 MiB)");
  check(d.graphAddMemAllocNode(&nb, g1, &na, 1, &pb), "alloc node b (2 MiB)");
  check(d.graphAddMemFreeNode(&nfb, g1, &nb, 1, pb.dptr), "free node b");
  CUgraphExec e1 = nullptr;
  check(d.graphInstantiate(&e1, g1, 0), "instantiate G1");
  check(d.graphLaunch(e1, s), "launch E1");
  check(d.memFree(pa.dptr), "cuMemFree a");
  check(d.graphLaunch(e1, s), "launch E1 again");

  // (2) Stream capture: allocations and frees become nodes of the captured graph.
  CUgraph g2 = nullptr;
  CUdeviceptr c = 0, dd = 0;
  check(d.streamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), "begin capture");
  check(d.memAllocAsync(&c, 4 * kMiB, s), "captured allocAsync c (4 MiB)");
  check(d.memFreeAsync(pa.dptr, s), "captured freeAsync a");
  check(d.memAllocAsync(&dd, 512 * kKiB, s), "captured allocAsync d (512 KiB)");
  check(d.streamEndCapture(s, &g2), "end capture");
  CUgraphExec e2 = nullptr;
  check(d.graphInstantiate(&e2, g2, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH),
        "instantiate G2");
  check(d.graphLaunch(e2, s), "launch E2");
  check(d.memFreeAsync(c, s), "freeAsync c outside the capture");

  // (3) cuGraphAddNode with memory-allocation parameters, relaunched with auto-free.
  CUgraph g3 = nullptr;
  check(d.graphCreate(&g3, 0), "cuGraphCreate G3");
  CUgraphNodeParams pe{};
  pe.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  pe.alloc.poolProps = device0_graph_alloc(0).poolProps;
  pe.alloc.bytesize = 256 * kKiB;
  CUgraphNode ne = nullptr;
  check(d.graphAddNode(&ne, g3, nullptr, nullptr, 0, &pe), "cuGraphAddNode e (256 KiB)");
  CUgraphExec e3 = nullptr;
  check(d.graphInstantiate(&e3, g3, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH),
        "instantiate G3");
  for (int i = 0; i < 3; ++i) check(d.graphLaunch(e3, s), "launch E3");

  // (4) The pool shrinks to what is in use; the graphs go, their live memory stays.
  check(d.deviceGraphMemTrim(0), "cuDeviceGraphMemTrim");
  for (CUgraphExec e : {e1, e2, e3}) check(d.graphExecDestroy(e), "cuGraphExecDestroy");
  for (CUgraph g : {g1, g2, g3}) check(d.graphDestroy(g), "cuGraphDestroy");
  return 0;
}

int scenario_host(const Driver& d, int, char**) {
  require("host", d.init, d.setDevice, d.memHostAlloc, d.memAllocHost, d.memFreeHost);
  start_on_device0(d);
  void* p = nullptr;
  void* q = nullptr;
  check(d.memHostAlloc(&p, kMiB, 0), "cuMemHostAlloc 1 MiB");
  check(d.memAllocHost(&q, 64 * kKiB), "cuMemAllocHost 64 KiB");
  check(d.memFreeHost(p), "cuMemFreeHost");
  return 0;
}

int scenario_managed(const Driver& d, int, char**) {
  require("managed", d.init, d.setDevice, d.memAllocManaged, d.memFree);
  start_on_device0(d);
  CUdeviceptr p = 0;
  check(d.memAllocManaged(&p, 256 * kKiB, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged 256 KiB");
  check(d.memFree(p), "free managed");
  return 0;
}

int scenario_pitch(const Driver& d, int, char**) {
  require("pitch", d.init, d.setDevice, d.memAllocPitch);
  start_on_device0(d);
  CUdeviceptr p = 0;
  size_t pitch = 0;
  check(d.memAllocPitch(&p, &pitch, 1000, 10, 4), "cuMemAllocPitch 1000x10");
  if (pitch != 1024) {
    std::fprintf(stderr, "ct: pitch %zu, expected 1024\n", pitch);
    return 3;
  }
  return 0;
}

int scenario_oom(const Driver& d, int, char**) {
  require("oom", d.init, d.setDevice, d.memAlloc, d.memFree);
  start_on_device0(d);
  constexpr size_t kGiveUp = 100000;
  std::vector<CUdeviceptr> blocks;
  for (;;) {
    CUdeviceptr p = 0;
    const CUresult r = d.memAlloc(&p, kMiB);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) break;
    check(r, "alloc 1 MiB block");
    blocks.push_back(p);
    if (blocks.size() == kGiveUp) fail("running out of memory", r);
  }
  std::printf("allocated %zu\n", blocks.size());
  std::fflush(stdout);
  for (CUdeviceptr p : blocks) check(d.memFree(p), "free block");
  return 0;
}

int scenario_badfree(const Driver& d, int, char**) {
  require("badfree", d.init, d.setDevice, d.memAlloc, d.memFree);
  start_on_device0(d);
  const CUdeviceptr p = alloc(d, kMiB, "alloc 1 MiB");
  check(d.memFree(p), "free");
  expect(d.memFree(p), CUDA_ERROR_INVALID_VALUE, "double free");
  expect(d.memFree(0xdead0000), CUDA_ERROR_INVALID_VALUE, "free of 0xdead0000");
  return 0;
}

void thread_rounds(const Driver& d, long thread, long rounds, std::atomic<bool>* failed) {
  if (d.setDevice(0) != CUDA_SUCCESS) {
    failed->store(true);
    return;
  }
  for (long round = 0; round < rounds; ++round) {
    CUdeviceptr p = 0;
    const size_t size = static_cast<size_t>((thread + 1) * 4096 + round);
    if (d.memAlloc(&p, size) != CUDA_SUCCESS || d.memFree(p) != CUDA_SUCCESS) {
      failed->store(true);
      return;
    }
  }
}

int scenario_threads(const Driver& d, int argc, char** argv) {
  require("threads", d.init, d.setDevice, d.memAlloc, d.memFree);
  const long n = arg_long(argc, argv, 2, 8);
  const long m = arg_long(argc, argv, 3, 1000);
  check(d.init(), "init");
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (long t = 0; t < n; ++t) threads.emplace_back(thread_rounds, std::cref(d), t, m, &failed);
  for (std::thread& t : threads) t.join();
  if (failed.load()) {
    std::fprintf(stderr, "ct: a driver call failed in a worker thread\n");
    return 3;
  }
  return 0;
}

int scenario_fork(const Driver& d, int, char**) {
  alloc_1mib_on_device0(d, "fork");
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) {
    std::perror("ct: fork");
    return 3;
  }
  if (child == 0) {
    CUdeviceptr p = 0;
    _exit(d.memAlloc(&p, 2 * kMiB) == CUDA_SUCCESS ? 0 : 3);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "ct: fork child did not exit 0 (status %d)\n", status);
    return 3;
  }
  alloc(d, 3 * kMiB, "alloc 3 MiB after fork");
  return 0;
}

// ct_static_like next to this program (the test programs are built into one directory).
std::string sibling_static_like() {
  char self[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) {
    std::perror("ct: readlink /proc/self/exe");
    std::exit(3);
  }
  const std::string path(self, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + "ct_static_like";
}

int scenario_exec(const Driver& d, int, char**) {
  alloc_1mib_on_device0(d, "exec");
  std::string path = sibling_static_like();
  std::fflush(nullptr);
  char basic[] = "basic";
  char* args[] = {path.data(), basic, nullptr};
  execv(path.c_str(), args);
  std::perror("ct: execv ct_static_like");
  return 3;
}

int scenario_kill(const Driver& d, int, char**) {
  alloc_1mib_on_device0(d, "kill");
  raise(SIGKILL);
  return 3;
}

int scenario_abort(const Driver& d, int, char**) {
  alloc_1mib_on_device0(d, "abort");
  std::abort();
}

int scenario_segv(const Driver& d, int, char**) {
  alloc_1mib_on_device0(d, "segv");
  int* volatile null_pointer = nullptr;
  *null_pointer = 1;
  return 3;
}

int scenario_exit(const Driver& d, int argc, char** argv) {
  const int status = static_cast<int>(arg_long(argc, argv, 2, 0));
  alloc_1mib_on_device0(d, "exit");
  std::exit(status);
}

// Sleeps to a deadline: a handled signal (say, a snapshot request) must not cut the wait short.
void sleep_seconds(double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (auto now = std::chrono::steady_clock::now(); now < deadline;
       now = std::chrono::steady_clock::now()) {
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
    timespec ts{static_cast<time_t>(left.count() / 1000000000),
                static_cast<long>(left.count() % 1000000000)};
    nanosleep(&ts, nullptr);
  }
}

// spin [SECONDS [STOP_FILE [GO_FILE]]]: holds 1 MiB for SECONDS, or until STOP_FILE exists (a
// test that needs the program running while it asks for snapshots ends it when done, however
// slow the machine is, instead of racing a fixed time). With GO_FILE the allocation, and so the
// start of tracing, waits until that file exists (at most SECONDS).
int scenario_spin(const Driver& d, int argc, char** argv) {
  require("spin", d.memFree);
  const double seconds = argc > 2 ? std::strtod(argv[2], nullptr) : 1.0;
  const char* stop_file = argc > 3 ? argv[3] : nullptr;
  if (argc > 4) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline && access(argv[4], F_OK) != 0) {
      sleep_seconds(0.01);
    }
  }
  const CUdeviceptr p = alloc_1mib_on_device0(d, "spin");
  // A test that asks for snapshots while this runs waits for this line: before it, the 1 MiB
  // allocation may not be recorded yet although tracing has started.
  std::printf("allocated\n");
  std::fflush(stdout);
  if (stop_file) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < deadline && access(stop_file, F_OK) != 0) {
      sleep_seconds(0.01);
    }
  } else {
    sleep_seconds(seconds);
  }
  check(d.memFree(p), "free");
  return 0;
}

// pause_recording: bench/gpu/async_pool_pair.cu's switch. Asked before tracing started it
// refuses (prints -1); then a 1 MiB allocation is recorded, a 2 MiB one and its free made while
// paused are not, a 3 MiB one after resuming is, and both recorded ones are freed.
int scenario_pause_recording(const Driver& d, int, char**) {
  require("pause_recording", d.init, d.setDevice, d.memAlloc, d.memFree);
  auto pause =
      reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "cumemtrace_bench_pause_recording"));
  if (!pause) {
    std::fprintf(stderr, "ct: no cumemtrace_bench_pause_recording (not preloaded)\n");
    return 3;
  }
  std::printf("before tracing: %d\n", pause(1));
  const CUdeviceptr a = alloc_1mib_on_device0(d, "pause_recording");
  std::printf("pause: %d\n", pause(1));
  const CUdeviceptr b = alloc(d, 2 * kMiB, "alloc 2 MiB (paused)");
  check(d.memFree(b), "free 2 MiB (paused)");
  std::printf("resume: %d\n", pause(0));
  const CUdeviceptr c = alloc(d, 3 * kMiB, "alloc 3 MiB");
  check(d.memFree(a), "free 1 MiB");
  check(d.memFree(c), "free 3 MiB");
  return 0;
}

// async_stream_device: a stream's allocations land on the stream's device, whatever is current,
// and a destroyed stream's handle may come back as another stream's on another device.
// s1 = stream on device 1; device 0 current; a = cuMemAllocAsync(1 MiB, s1) (device 1); free a;
// destroy s1; s2 = stream on device 0 (prints "same handle: 1" when it got s1's handle, as
// malloc usually gives it); b = cuMemAllocAsync(2 MiB, s2) (device 0); free b. Exit 0.
int scenario_async_stream_device(const Driver& d, int, char**) {
  require("async_stream_device", d.init, d.setDevice, d.streamCreate, d.streamDestroy,
          d.memAllocAsync, d.memFreeAsync);
  check(d.init(), "init");
  check(d.setDevice(1), "set device 1");
  CUstream s1 = nullptr, s2 = nullptr;
  check(d.streamCreate(&s1, 0), "stream on device 1");
  check(d.setDevice(0), "set device 0");
  CUdeviceptr a = 0, b = 0;
  check(d.memAllocAsync(&a, kMiB, s1), "alloc 1 MiB on s1");
  check(d.memFreeAsync(a, s1), "free a");
  check(d.streamDestroy(s1), "destroy s1");
  check(d.streamCreate(&s2, 0), "stream on device 0");
  std::printf("same handle: %d\n", s2 == s1 ? 1 : 0);
  check(d.memAllocAsync(&b, 2 * kMiB, s2), "alloc 2 MiB on s2");
  check(d.memFreeAsync(b, s2), "free b");
  return 0;
}

int scenario_owners(const Driver& d, int, char**) {
  require("owners", d.init, d.setDevice, d.memAlloc, d.memFree);
  using OwnersFn = int (*)(int, const uint64_t*, uint64_t);
  auto owners = reinterpret_cast<OwnersFn>(dlsym(RTLD_DEFAULT, "cumemtrace_torch_owners"));
  if (!owners) {
    std::fprintf(stderr, "ct: no cumemtrace_torch_owners (not preloaded)\n");
    return 3;
  }
  const CUdeviceptr a = alloc_1mib_on_device0(d, "owners");
  const CUdeviceptr b = alloc(d, 2 * kMiB, "alloc b (2 MiB)");
  const uint64_t params[] = {a, kMiB, b, 2 * kMiB};
  uint64_t grads[2 * 300];
  for (uint64_t i = 0; i < 300; ++i) {
    grads[2 * i] = 0x10000000 + 4096 * i;
    grads[2 * i + 1] = 4096 + i;
  }
  const int rc[] = {owners(1, params, 2), owners(2, grads, 300), owners(2, nullptr, 0),
                    owners(9, params, 1), owners(0, params, 1),  owners(1, nullptr, 1)};
  std::printf("owners %d %d %d %d %d %d\n", rc[0], rc[1], rc[2], rc[3], rc[4], rc[5]);
  check(d.memFree(a), "free a");
  return 0;
}

int scenario_marks(const Driver& d, int, char**) {
  require("marks", d.init, d.setDevice, d.memAlloc, d.memFree);
  check(d.init(), "init");
  cumemtrace_mark("begin");
  check(d.setDevice(0), "set device 0");
  cumemtrace_range_push("load");
  const CUdeviceptr a = alloc(d, kMiB, "alloc a (1 MiB)");
  cumemtrace_range_push("inner");
  alloc(d, 2 * kMiB, "alloc b (2 MiB)");
  cumemtrace_range_pop();
  cumemtrace_range_pop();
  cumemtrace_snapshot("after load");
  check(d.memFree(a), "free a");
  check(d.setDevice(1), "set device 1");
  alloc(d, 512 * kKiB, "alloc 512 KiB on device 1");
  cumemtrace_mark("on device 1");
  cumemtrace_mark("done");
  return 0;
}

// Text that is not UTF-8 everywhere the snapshot carries text: argv (the test passes some), a
// thread name, mark and range names. Frees everything, so `check` has nothing to fail on.
int scenario_bytes(const Driver& d, int, char**) {
  require("bytes", d.init, d.setDevice, d.memAlloc, d.memFree);
  start_on_device0(d);
  cumemtrace_mark("caf\xe9 \xff\xfe");
  cumemtrace_range_push("range \xc3");
  std::thread([&d] {
    pthread_setname_np(pthread_self(), "w\xe9rker\xff");
    check(d.setDevice(0), "set device 0 on the thread");
    const CUdeviceptr p = alloc(d, kMiB, "alloc 1 MiB on a thread with a non-UTF-8 name");
    check(d.memFree(p), "free");
  }).join();
  cumemtrace_range_pop();
  const CUdeviceptr q = alloc(d, 2 * kMiB, "alloc 2 MiB");
  check(d.memFree(q), "free");
  return 0;
}

int scenario_nvtx(const Driver& d, int, char**) {
  require("nvtx", d.init, d.setDevice, d.memAlloc);
  start_on_device0(d);
  nvtxMarkA("nvtx mark");
  const int l0 = nvtxRangePushA("outer");
  alloc(d, kMiB, "alloc 1 MiB");
  const int l1 = nvtxRangePushW(L"wide \u00e9");
  const int p1 = nvtxRangePop();
  const int p0 = nvtxRangePop();
  const nvtxRangeId_t id = nvtxRangeStartA("cross-thread");
  alloc(d, 2 * kMiB, "alloc 2 MiB");
  std::thread([id] { nvtxRangeEnd(id); }).join();

  nvtxDomainHandle_t domain = nvtxDomainCreateA("ct");
  nvtxEventAttributes_t attr{};
  attr.version = NVTX_VERSION;
  attr.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attr.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attr.message.ascii = "domain range";
  nvtxDomainRangePushEx(domain, &attr);
  nvtxDomainRangePop(domain);
  char name[] = "registered";
  nvtxStringHandle_t h = nvtxDomainRegisterStringA(domain, name);
  std::memset(name, 'x', sizeof name - 1);  // the tool must have kept its own copy
  attr.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attr.message.registered = h;
  nvtxDomainMarkEx(domain, &attr);
  nvtxDomainDestroy(domain);
  std::printf("nvtx levels %d %d %d %d\n", l0, l1, p1, p0);
  return 0;
}

int scenario_steps(const Driver& d, int argc, char** argv) {
  require("steps", d.init, d.setDevice, d.memAlloc, d.memFree);
  const long steps = arg_long(argc, argv, 2, 10);
  const long leak = arg_long(argc, argv, 3, 0);
  start_on_device0(d);
  for (long i = 0; i < steps; ++i) {
    cumemtrace_mark("step");
    const CUdeviceptr t = alloc(d, kMiB, "alloc 1 MiB step temporary");
    if (leak > 0) alloc(d, static_cast<size_t>(leak), "alloc leaked bytes");
    check(d.memFree(t), "free step temporary");
  }
  return 0;
}

// Waits for a child and tells whether it exited with `code`; says what happened otherwise.
bool child_exited_with(pid_t child, int code, const char* what) {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(child, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (r != child || !WIFEXITED(status) || WEXITSTATUS(status) != code) {
    std::fprintf(stderr, "ct: %s did not exit %d (status %d)\n", what, code, status);
    return false;
  }
  return true;
}

int scenario_ipc(const Driver& d, int, char**) {
  require("ipc", d.init, d.setDevice, d.memAlloc, d.memFree, d.ipcGetMemHandle, d.ipcOpenMemHandle,
          d.ipcCloseMemHandle);
  start_on_device0(d);
  CUdeviceptr a = alloc(d, 2 * kMiB, "alloc a (2 MiB)");
  CUipcMemHandle h{};
  check(d.ipcGetMemHandle(&h, a), "cuIpcGetMemHandle");
  const pid_t child = fork();
  if (child < 0) fail("fork", CUDA_ERROR_UNKNOWN);
  if (child == 0) {
    CUdeviceptr p = 0, q = 0;
    const bool ok = d.setDevice(0) == CUDA_SUCCESS &&
                    d.ipcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS &&
                    d.ipcCloseMemHandle(p) == CUDA_SUCCESS &&
                    d.ipcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS;
    _exit(ok ? 0 : 4);
  }
  if (!child_exited_with(child, 0, "ipc child")) return 3;
  check(d.memFree(a), "free a");
  return 0;
}

int scenario_arrays(const Driver& d, int, char**) {
  require("arrays", d.init, d.setDevice, d.memFree, d.arrayCreate, d.array3DCreate,
          d.mipmappedArrayCreate, d.arrayDestroy, d.mipmappedArrayDestroy, d.importExternalMemory,
          d.externalMemoryGetMappedBuffer, d.destroyExternalMemory);
  start_on_device0(d);
  CUarray a = nullptr, b = nullptr, dd = nullptr;
  CUDA_ARRAY_DESCRIPTOR da{1024, 256, CU_AD_FORMAT_FLOAT, 4};
  check(d.arrayCreate(&a, &da), "cuArrayCreate a (4 MiB)");
  CUDA_ARRAY3D_DESCRIPTOR db{64, 64, 16, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
  check(d.array3DCreate(&b, &db), "cuArray3DCreate b (64 KiB)");
  CUmipmappedArray c = nullptr;
  CUDA_ARRAY3D_DESCRIPTOR dc{512, 512, 0, CU_AD_FORMAT_FLOAT, 1, 0};
  check(d.mipmappedArrayCreate(&c, &dc, 3), "cuMipmappedArrayCreate c (3 levels)");
  CUDA_ARRAY3D_DESCRIPTOR ddesc{256, 256, 0, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_DEFERRED_MAPPING};
  check(d.array3DCreate(&dd, &ddesc), "cuArray3DCreate d (deferred mapping)");
  check(d.arrayDestroy(a), "cuArrayDestroy a");
  check(d.arrayDestroy(dd), "cuArrayDestroy d");

  const int fd = memfd_create("ct-external", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, 2 * kMiB) != 0) fail("memfd", CUDA_ERROR_UNKNOWN);
  CUDA_EXTERNAL_MEMORY_HANDLE_DESC he{};
  he.type = CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD;
  he.handle.fd = fd;
  he.size = 2 * kMiB;
  CUexternalMemory e = nullptr;
  check(d.importExternalMemory(&e, &he), "cuImportExternalMemory e (2 MiB)");
  CUDA_EXTERNAL_MEMORY_BUFFER_DESC bp{};
  bp.size = kMiB;
  CUdeviceptr p = 0, q = 0;
  check(d.externalMemoryGetMappedBuffer(&p, e, &bp), "mapped buffer p");
  check(d.memFree(p), "cuMemFree p");
  CUDA_EXTERNAL_MEMORY_BUFFER_DESC bq{};
  bq.offset = kMiB;
  bq.size = 512 * kKiB;
  check(d.externalMemoryGetMappedBuffer(&q, e, &bq), "mapped buffer q");
  return 0;
}

int scenario_contexts(const Driver& d, int argc, char** argv) {
  require("contexts", d.init, d.setDevice, d.memAlloc, d.memFree, d.ctxCreate, d.ctxDestroy,
          d.primaryCtxRelease);
  const bool release = argc > 2 && std::strcmp(argv[2], "release") == 0;
  start_on_device0(d);
  check(d.setDevice(0), "set device 0 again");
  check(d.memFree(alloc(d, kMiB, "alloc a (1 MiB)")), "free a");
  CUcontext c = nullptr;
  check(d.ctxCreate(&c, nullptr, 0, 1), "cuCtxCreate on device 1");
  check(d.memFree(alloc(d, 2 * kMiB, "alloc b (2 MiB)")), "free b");
  check(d.ctxDestroy(c), "cuCtxDestroy");
  if (release) {
    check(d.primaryCtxRelease(0), "first release of device 0's primary context");
    check(d.primaryCtxRelease(0), "last release of device 0's primary context");
  }
  return 0;
}

int scenario_spawn(const Driver& d, int, char**) {
  alloc_1mib_on_device0(d, "spawn");
  std::string path = sibling_static_like();
  std::fflush(nullptr);
  char exit_arg[] = "exit";
  char five[] = "5";
  char* exit_args[] = {path.data(), exit_arg, five, nullptr};
  const pid_t v = vfork();
  if (v == 0) {
    execv(path.c_str(), exit_args);
    _exit(127);
  }
  if (v < 0) {
    std::perror("ct: vfork");
    return 3;
  }
  if (!child_exited_with(v, 5, "vfork child")) return 3;
  char basic[] = "basic";
  char* basic_args[] = {path.data(), basic, nullptr};
  pid_t s = -1;
  if (const int rc = posix_spawn(&s, path.c_str(), nullptr, nullptr, basic_args, environ)) {
    std::fprintf(stderr, "ct: posix_spawn: %s\n", std::strerror(rc));
    return 3;
  }
  if (!child_exited_with(s, 0, "posix_spawn child")) return 3;
  alloc(d, 2 * kMiB, "alloc 2 MiB after the children");
  return 0;
}

int scenario_setsid(const Driver& d, int, char**) {
  require("setsid", d.memFree);
  alloc_1mib_on_device0(d, "setsid");
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) {
    std::perror("ct: fork");
    return 3;
  }
  if (child == 0) {
    CUdeviceptr p = 0, q = 0;
    if (d.memAlloc(&p, 2 * kMiB) != CUDA_SUCCESS) _exit(3);
    if (setsid() != getpid()) _exit(4);
    if (d.memAlloc(&q, 3 * kMiB) != CUDA_SUCCESS || d.memFree(p) != CUDA_SUCCESS) _exit(3);
    std::exit(0);  // through exit(): the child's own snapshot knows how it ended
  }
  return child_exited_with(child, 0, "setsid child") ? 0 : 3;
}

void close_descriptors_from_3() {
  // The system call rather than glibc's close_range() (2.34): the portable build's test programs
  // must also build and run against glibc 2.31 (scripts/portable_build.sh).
  if (syscall(__NR_close_range, 3, ~0U, 0) == 0) return;
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  for (rlim_t fd = 3; fd < lim.rlim_cur && fd < (1u << 20); ++fd) close(static_cast<int>(fd));
}

int scenario_closefds(const Driver& d, int argc, char** argv) {
  require("closefds", d.memFree);
  const double pause = argc > 2 ? std::strtod(argv[2], nullptr) : 0.5;
  const CUdeviceptr a = alloc_1mib_on_device0(d, "closefds");
  close_descriptors_from_3();
  // Reuses the numbers just freed, whatever the preload had there.
  constexpr int kReopened = 16;
  int fds[kReopened];
  for (int& fd : fds) {
    fd = open("/dev/null", O_RDONLY);
    if (fd < 0) {
      std::perror("ct: open /dev/null");
      return 3;
    }
  }
  sleep_seconds(pause);
  alloc(d, 2 * kMiB, "alloc 2 MiB after closing");
  check(d.memFree(a), "free 1 MiB");
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) {
    std::perror("ct: fork");
    return 3;
  }
  if (child == 0) {
    for (int fd : fds) {
      if (fcntl(fd, F_GETFD) < 0) _exit(4);
    }
    CUdeviceptr p = 0;
    _exit(d.memAlloc(&p, 3 * kMiB) == CUDA_SUCCESS ? 0 : 3);
  }
  if (!child_exited_with(child, 0, "closefds child")) return 3;
  const CUdeviceptr c = alloc(d, 4 * kMiB, "alloc 4 MiB");
  check(d.memFree(c), "free 4 MiB");
  return 0;
}

int scenario_forkloop(const Driver& d, int argc, char** argv) {
  require("forkloop", d.init, d.setDevice, d.memAlloc, d.memFree);
  const long forks = arg_long(argc, argv, 2, 50);
  check(d.init(), "init");
  check(d.setDevice(0), "set device 0");  // for the children, which run on this thread
  std::atomic<bool> stop{false}, started{false}, failed{false};
  std::atomic<long> rounds{0};
  std::thread hammer([&] {
    if (d.setDevice(0) != CUDA_SUCCESS) failed.store(true);
    while (!failed.load() && !stop.load()) {
      CUdeviceptr p = 0;
      if (d.memAlloc(&p, 4096) != CUDA_SUCCESS || d.memFree(p) != CUDA_SUCCESS) {
        failed.store(true);
        break;
      }
      rounds.fetch_add(1);
      started.store(true);
    }
    started.store(true);
  });
  while (!started.load()) std::this_thread::yield();
  bool children_ok = true;
  for (long i = 0; i < forks && children_ok && !failed.load(); ++i) {
    std::fflush(nullptr);
    const pid_t child = fork();
    if (child == 0) {
      CUdeviceptr p = 0;
      _exit(d.memAlloc(&p, 2 * kMiB) == CUDA_SUCCESS ? 0 : 3);
    }
    children_ok = child > 0 && child_exited_with(child, 0, "forkloop child");
  }
  stop.store(true);
  hammer.join();
  if (failed.load() || !children_ok) {
    std::fprintf(stderr, "ct: forkloop failed\n");
    return 3;
  }
  std::printf("rounds %ld\n", rounds.load());
  return 0;
}

int scenario_forkstart(const Driver& d, int argc, char** argv) {
  require("forkstart", d.init, d.setDevice, d.memAlloc);
  if (argc < 3) {
    std::fprintf(stderr, "ct: forkstart needs a directory\n");
    return 2;
  }
  const std::string dir = argv[2];
  check(d.init(), "init");
  std::atomic<bool> failed{false};
  std::thread first([&] {
    CUdeviceptr p = 0;
    if (d.setDevice(0) != CUDA_SUCCESS || d.memAlloc(&p, kMiB) != CUDA_SUCCESS) failed.store(true);
  });
  // The collector wrapper of the test creates this file once the first allocation is starting
  // the tracing session, and holds it there until `release` exists.
  const std::string started = dir + "/collector-started";
  struct stat st {};
  for (int i = 0; stat(started.c_str(), &st) != 0; ++i) {
    if (i == 20000) {
      std::fprintf(stderr, "ct: %s never appeared\n", started.c_str());
      std::exit(3);
    }
    timespec ts{0, 1000000};
    nanosleep(&ts, nullptr);
  }
  check(d.setDevice(0), "set device 0");
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child == 0) {
    CUdeviceptr p = 0;
    _exit(d.memAlloc(&p, 2 * kMiB) == CUDA_SUCCESS ? 0 : 3);
  }
  if (child < 0) {
    std::perror("ct: fork");
    std::exit(3);
  }
  const int fd = open((dir + "/release").c_str(), O_WRONLY | O_CREAT, 0644);
  if (fd >= 0) close(fd);
  const bool child_ok = child_exited_with(child, 0, "forkstart child");
  first.join();
  return child_ok && !failed.load() ? 0 : 3;
}

// burst [N [UNTRACKED]]: 1 MiB on device 0, "ready PID", then after a line on stdin N 4 KiB
// allocations freed at once and the 1 MiB freed. With UNTRACKED > 0, before "ready": that many
// more "fake-cuda-context-0" pages mapped (the fake NVML counts each as a context's cost: driver
// memory nobody tracked), then a context created and destroyed, whose end the collector reads
// NVML at: the live gauges' untracked remainder is UNTRACKED contexts' cost less the 1 MiB.
int scenario_burst(const Driver& d, int argc, char** argv) {
  require("burst", d.memFree);
  const long n = arg_long(argc, argv, 2, 20000);
  const long untracked = arg_long(argc, argv, 3, 0);
  const CUdeviceptr a = alloc_1mib_on_device0(d, "burst");
  for (long i = 0; i < untracked; ++i) {
    const int fd = memfd_create("fake-cuda-context-0", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 4096) != 0 ||
        mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED) {
      std::fprintf(stderr, "ct: burst: cannot map an untracked page: %s\n", strerror(errno));
      return 3;
    }
    close(fd);
  }
  if (untracked > 0) {
    require("burst", d.ctxCreate, d.ctxDestroy, d.setDevice);
    CUcontext c = nullptr;
    check(d.ctxCreate(&c, nullptr, 0, 0), "cuCtxCreate on device 0");
    check(d.ctxDestroy(c), "cuCtxDestroy");
    check(d.setDevice(0), "device 0's primary context current again");
  }
  std::printf("ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  char line[64];
  if (!std::fgets(line, sizeof line, stdin)) {
    std::fprintf(stderr, "ct: burst: no go line on stdin\n");
    return 3;
  }
  for (long i = 0; i < n; ++i) check(d.memFree(alloc(d, 4096, "alloc 4 KiB")), "free 4 KiB");
  check(d.memFree(a), "free 1 MiB");
  return 0;
}

// The hostile-process case: the ring is in this process's memory, so a buggy or malicious
// program can write anything there. Forges one published record the collector must reject.
int scenario_scribble(const Driver& d, int, char**) {
  require("scribble", d.memAlloc);
  alloc_1mib_on_device0(d, "scribble");
  uintptr_t ring = 0;
  if (FILE* maps = std::fopen("/proc/self/maps", "r")) {
    char line[512];
    while (!ring && std::fgets(line, sizeof line, maps)) {
      if (std::strstr(line, "/memfd:cumemtrace-ring")) ring = std::strtoull(line, nullptr, 16);
    }
    std::fclose(maps);
  }
  if (!ring) {
    std::fprintf(stderr, "ct: scribble: no cumemtrace ring mapped\n");
    return 3;
  }
  auto* header = reinterpret_cast<cumemtrace::wire::RingHeader*>(ring);
  auto* slots = reinterpret_cast<cumemtrace::wire::Slot*>(ring + cumemtrace::wire::kHeaderBytes);
  const uint64_t ticket = header->head.fetch_add(1);
  cumemtrace::wire::EventPayload ev{};
  ev.kind = cumemtrace::wire::Kind::kAlloc;
  ev.extra_slots = 200;  // more continuation slots than any record may have
  auto& slot = slots[ticket & (header->capacity - 1)];
  std::memcpy(slot.payload, &ev, sizeof ev);
  slot.seq.store(ticket + 1, std::memory_order_release);
  std::printf("forged %llu\n", static_cast<unsigned long long>(ticket));
  std::fflush(stdout);
  alloc(d, 2 * kMiB, "alloc 2 MiB");
  return 0;
}

struct Scenario {
  const char* name;
  int (*run)(const Driver&, int, char**);
};

constexpr Scenario kScenarios[] = {
    {"basic", scenario_basic},
    {"vmm", scenario_vmm},
    {"vmm_refs", scenario_vmm_refs},
    {"host", scenario_host},
    {"managed", scenario_managed},
    {"pitch", scenario_pitch},
    {"oom", scenario_oom},
    {"badfree", scenario_badfree},
    {"threads", scenario_threads},
    {"fork", scenario_fork},
    {"exec", scenario_exec},
    {"kill", scenario_kill},
    {"abort", scenario_abort},
    {"segv", scenario_segv},
    {"exit", scenario_exit},
    {"spin", scenario_spin},
    {"pause_recording", scenario_pause_recording},
    {"async_stream_device", scenario_async_stream_device},
    {"marks", scenario_marks},
    {"owners", scenario_owners},
    {"bytes", scenario_bytes},
    {"nvtx", scenario_nvtx},
    {"steps", scenario_steps},
    // Process lifecycle and back-pressure (issue 7).
    {"spawn", scenario_spawn},
    {"setsid", scenario_setsid},
    {"closefds", scenario_closefds},
    {"forkloop", scenario_forkloop},
    {"forkstart", scenario_forkstart},
    {"burst", scenario_burst},
    {"scribble", scenario_scribble},
    {"graph", scenario_graph},
    {"ipc", scenario_ipc},
    {"arrays", scenario_arrays},
    {"contexts", scenario_contexts},
};

}  // namespace

int run_scenario(const Driver& driver, int argc, char** argv) {
  if (argc >= 2) {
    for (const Scenario& s : kScenarios) {
      if (std::strcmp(s.name, argv[1]) == 0) return s.run(driver, argc, argv);
    }
  }
  std::fprintf(stderr, "usage: %s SCENARIO [ARGS]\nscenarios:", argc > 0 ? argv[0] : "ct");
  for (const Scenario& s : kScenarios) std::fprintf(stderr, " %s", s.name);
  std::fprintf(stderr, "\n");
  return 2;
}

}  // namespace cumemtrace::testprog

extern "C" __attribute__((noinline)) CUdeviceptr allocate_weights(
    const cumemtrace::testprog::Driver* driver) {
  CUdeviceptr weights = 0;
  const CUresult r = driver->memAlloc(&weights, 2 * 1024 * 1024);  // ALLOC_WEIGHTS_LINE
  cumemtrace::testprog::check(r, "allocate_weights (2 MiB)");
  return weights;
}
