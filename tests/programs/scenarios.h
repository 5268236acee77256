// Contract: the scenarios every test program runs, written once against a table of driver entry
// points (Driver). ct_static_like, ct_shared_like and ct_lcuda differ only in how they fill the
// table; run_scenario() exits 2 when the scenario needs an entry the program left null, 3 when
// a driver call fails unexpectedly (message on stderr), and otherwise as the scenario says.
// Nothing is printed on success except where noted.
//
// What each scenario does, exactly; the end-to-end tests assert these numbers. "dev N" means
// device N's primary context is current; sizes are bytes requested (KiB = 1024, MiB = 1024 KiB).
//
//  basic    dev 0: a = alloc 1 MiB; b = allocate_weights() allocates 2 MiB (extern "C"
//           function `allocate_weights` in scenarios.cpp, the call on the line marked
//           ALLOC_WEIGHTS_LINE); free a. dev 1: c = alloc 4 MiB; s = stream created on dev 1;
//           d = allocAsync 3 MiB on s; freeAsync d on s; e = allocAsync_ptsz 512 KiB on stream 0.
//           Exit 0, b, c, e never freed.
//           device 0: 2 allocs, 1 free, live 2 MiB, peak 3 MiB.
//           device 1: 3 allocs (4 MiB plain, 3 MiB async on s, 512 KiB _ptsz on stream 0),
//                     1 free (async, on s), live 4.5 MiB, peak 7 MiB.
//  vmm      dev 0: granularity query (2 MiB); reserve va1 8 MiB; cuMemCreate h1 2 MiB on dev 0;
//           map h1 at va1+0; setAccess rw; unmap; release h1; addressFree va1. Then reserve
//           va2 8 MiB; cuMemCreate h2 2 MiB on dev 0; map h2 at va2+0; setAccess rw. Exit 0 with
//           h2 mapped and unreleased and va2 reserved.
//           Totals: 2 reserves, 1 addressFree, 2 creates (2 MiB each), 1 release, 2 maps,
//           1 unmap; physical live 2 MiB at exit, peak 2 MiB.
//  vmm_refs VMM handle references the way NCCL and CUDA's samples use them, all 2 MiB-granular:
//           (1) NCCL's alloc/free: h1 = cuMemCreate 2 MiB on dev 0; reserve va1 2 MiB; map h1;
//           setAccess; then r = cuMemRetainAllocationHandle(va1 + 4096) (must be h1, else
//           exit 3); release r; unmap va1; release h1; addressFree va1.
//           (2) release right after mapping: h2 = cuMemCreate 4 MiB on dev 0; reserve va2 4 MiB;
//           map h2; setAccess; release h2 (its memory lives on while mapped).
//           (3) import: h3 = cuMemCreate 2 MiB on dev 1 (POSIX fd shareable); export to fd;
//           h4 = import(fd) (a new handle, not h3, else exit 3); reserve va3 2 MiB; map h4 at
//           va3 (stays mapped: listed as imported, not a segment); release h4; release h3;
//           close fd.
//           Exit 0. device 0: 2 creates, live 4 MiB (h2, mapped at va2), peak 4 MiB; one
//           segment (va2, 4 MiB, expandable), segment_map x2 and segment_unmap x1 on device 0.
//           device 1: 1 create, peak 2 MiB, live 0 once h3 is released (what stays mapped is
//           h4's, an import, which counts no bytes), no segment. Handles at exit: h2 (4 MiB,
//           dev 0); imported_mappings: va3, 2 MiB, device 1, handle h4. No anomalies.
//  host     dev 0: p = cuMemHostAlloc 1 MiB (flags 0); q = cuMemAllocHost_v2 64 KiB; freeHost p.
//           Exit 0, q leaked (64 KiB host-pinned live).
//  managed  dev 0: cuMemAllocManaged 256 KiB (CU_MEM_ATTACH_GLOBAL), then freed.
//  pitch    dev 0: cuMemAllocPitch_v2 width 1000, height 10, element 4: the fake's pitch is
//           1024, so 10240 bytes; leaked. Exits 3 if the pitch is not 1024.
//  oom      dev 0: alloc 1 MiB blocks until one returns CUDA_ERROR_OUT_OF_MEMORY; prints
//           "allocated N" (N successful allocations) to stdout; frees all N; exit 0. With
//           FAKE_CUDA_MEM_LIMIT=L, N = floor(L / 1 MiB). Exits 3 if 100000 blocks all succeed.
//  badfree  dev 0: p = alloc 1 MiB; free p (success); free p again and free 0xdead0000 must both
//           return CUDA_ERROR_INVALID_VALUE (anything else: exit 3). Exit 0.
//           device 0: 1 alloc, 1 successful free, 2 failed frees.
//  threads [N [M]]  N threads (default 8), each makes dev 0 current and does M (default 1000)
//           rounds of alloc((t+1)*4096 + round) then free, t = 0..N-1, round = 0..M-1, all
//           concurrently. device 0: N*M allocs, N*M frees, live 0 at exit.
//  fork     dev 0: alloc 1 MiB (leaked); fork(). Child: alloc 2 MiB, _exit(0). Parent waits
//           (child must exit 0), then alloc 3 MiB (leaked); exit 0.
//           parent: 2 allocs, 4 MiB live; child: 1 alloc of its own, 2 MiB live at _exit.
//  exec     dev 0: alloc 1 MiB (leaked), then execv("<dir of this program>/ct_static_like",
//           "basic"); the exit status is basic's (0).
//  kill     dev 0: alloc 1 MiB, raise(SIGKILL).
//  abort    dev 0: alloc 1 MiB, abort() (SIGABRT).
//  segv     dev 0: alloc 1 MiB, store to address 0 (SIGSEGV).
//  exit [N] dev 0: alloc 1 MiB (leaked), exit(N) (default 0).
//  spin [SECONDS]  dev 0: alloc 1 MiB; sleep SECONDS (default 1, fractions allowed; signals
//           that do not kill the process do not shorten it); free; exit 0.
//  marks    include/cumemtrace.h (no-ops without the preload), in this order: mark "begin";
//           dev 0; push "load"; a = alloc 1 MiB; push "inner"; b = alloc 2 MiB; pop; pop;
//           cumemtrace_snapshot("after load") (file tag after_load: a and b live); free a;
//           dev 1; alloc 512 KiB; mark "on device 1"; mark "done"; exit 0.
//           Annotations: MARK begin (device 0), START load, START inner, END inner, END load
//           (device 0), MARK "on device 1", MARK done (device 1). Live at exit: 2 MiB on dev 0,
//           512 KiB on dev 1.
//  nvtx     NVTX3 (nvToolsExt.h, header-only; active when NVTX_INJECTION64_PATH names an
//           injection library): nvtxMarkA "nvtx mark"; dev 0; l0 = nvtxRangePushA "outer";
//           alloc 1 MiB; l1 = nvtxRangePushW L"wide é"; p1 = nvtxRangePop; p0 = nvtxRangePop;
//           id = nvtxRangeStartA "cross-thread"; alloc 2 MiB; another thread: nvtxRangeEnd(id);
//           domain "ct": nvtxDomainRangePushEx ascii "domain range", nvtxDomainRangePop;
//           h = nvtxDomainRegisterStringA with a buffer then overwritten; nvtxDomainMarkEx with
//           registered h ("registered"). Prints "nvtx levels l0 l1 p1 p0" (0 1 1 0 when an
//           injection tracks push/pop, -2 -2 -2 -2 without one); exit 0.
//  steps N LEAK  dev 0: N times: mark "step" (cumemtrace.h); t = alloc 1 MiB; if LEAK > 0,
//           alloc LEAK bytes (never freed); free t. Exit 0: N*LEAK bytes live, 2N (or N)
//           allocations, N frees.
//  spawn    dev 0: alloc 1 MiB (leaked); vfork() + execv("<dir of this program>/ct_static_like",
//           "exit", "5"), which must exit 5; posix_spawn of ct_static_like "basic", which must
//           exit 0 (else exit 3); then alloc 2 MiB (leaked); exit 0.
//           parent: 2 allocs, 3 MiB live; the children: exactly `exit 5` and `basic`.
//  setsid   dev 0: alloc 1 MiB (leaked); fork(). Child: p = alloc 2 MiB; setsid() (must return
//           its pid, else _exit(4)); alloc 3 MiB; free p; exit(0). Parent waits (child must exit
//           0, else exit 3); exit 0.
//           parent: 1 alloc, 1 MiB live; child: 2 allocs, 1 free, 3 MiB live, peak 5 MiB.
//  closefds [SECONDS]  dev 0: a = alloc 1 MiB; close every descriptor >= 3 (close_range); open
//           /dev/null 16 times (reusing those numbers); sleep SECONDS (default 0.5); alloc 2 MiB
//           (leaked); free a; fork(): the child checks that the 16 descriptors are still open
//           (else _exit(4)), allocs 3 MiB and _exit(0)s; the parent waits (child must exit 0,
//           else exit 3); c = alloc 4 MiB; free c; exit 0.
//           parent: 3 allocs, 2 frees, 2 MiB live, peak 6 MiB; child: 1 alloc, 3 MiB live.
//  forkloop [N]  dev 0 current on the main thread; a second thread (dev 0) repeats alloc 4096 +
//           free until stopped. Once it has done one round, the main thread forks N children
//           (default 50) one after another while it runs; each child allocs 2 MiB and _exit(0)s
//           (3 if the allocation failed); the parent waits for each (must exit 0). Then stops the
//           thread, prints "rounds K" (its completed rounds) and exits 0 (3 on any failure).
//           parent: K allocs of 4096, K frees, live 0; each child: 1 alloc, 2 MiB live.
//  forkstart DIR  a second thread makes the process's first traced call (the first retain of dev
//           0's primary context, which creates it) and its first allocation (1 MiB, leaked). When
//           DIR/collector-started exists (the test's collector wrapper creates it while that call
//           is starting the tracing session, and holds it until DIR/release exists), the main
//           thread makes dev 0 current (a retain of an active context: not traced) and forks;
//           the child allocs 2 MiB and
//           _exit(0)s (3 on failure); the parent creates DIR/release, waits for the child (must
//           exit 0) and the thread; exit 0 (3 on any failure or after 20 s without the file).
//           parent: 1 alloc, 1 MiB live; child: 1 alloc, 2 MiB live.
//  burst [N]  dev 0: a = alloc 1 MiB; prints "ready PID" (flushed); reads one line from stdin;
//           N times (default 20000) alloc 4096 + free; free a; exit 0.
//           2N + 2 allocation events (N + 1 allocs, N + 1 frees), live 0.
//  graph    CUDA graph memory, dev 0, stream s created on dev 0 (the end-to-end tests and
//           tests/gpu/graph_memory.cu assert these numbers):
//           (1) graph G1 (cuGraphCreate): alloc node a 1 MiB, alloc node b 2 MiB, free node of b;
//           E1 = instantiate G1 (flags 0); launch E1 on s; cuMemFree(a) (graph memory freed
//           outside any graph); launch E1 again (a live again).
//           (2) capture on s (cuStreamBeginCapture_v2, global mode): c = cuMemAllocAsync 4 MiB,
//           cuMemFreeAsync(a) (frees what G1 made), d = cuMemAllocAsync 512 KiB (never freed);
//           end capture -> G2; E2 = instantiate G2 with AUTO_FREE_ON_LAUNCH; launch E2;
//           cuMemFreeAsync(c, s) outside any capture.
//           (3) graph G3: alloc node e 256 KiB through cuGraphAddNode (_v2); E3 = instantiate
//           with AUTO_FREE_ON_LAUNCH; launch E3 three times (each relaunch frees e first).
//           (4) cuDeviceGraphMemTrim(0); destroy E1, E2, E3, G1, G2, G3. Exit 0.
//           device 0: 9 allocations (a, b twice; c, d; e three times), 7 frees, peak 5 MiB
//           (during E2: a, c), live 768 KiB at exit: d and e, 2 graph allocations leaked, with
//           the stacks of the capture (d) and of the cuGraphAddNode call (e). No anomalies.
//           Graph pool on device 0: highest reading 5 MiB, 768 KiB after the trim.
//  ipc      dev 0: a = alloc 2 MiB; h = cuIpcGetMemHandle(a); fork(). Child: dev 0;
//           p = cuIpcOpenMemHandle_v2(h) (2 MiB of the parent's, imported); cuIpcCloseMemHandle
//           p; q = cuIpcOpenMemHandle_v2(h) (left open); _exit(0) (4 on a failed call). Parent
//           waits (child must exit 0, else exit 3), frees a; exit 0.
//           parent: 1 alloc, 1 free, live 0; child: no allocation of its own, live 0, one
//           imported mapping (2 MiB, device 0, handle 0). No anomalies in either.
//  arrays   dev 0: a = cuArrayCreate_v2 1024 x 256 float4 (4 MiB); b = cuArray3DCreate_v2
//           64 x 64 x 16 uint8 (64 KiB); c = cuMipmappedArrayCreate 512 x 512 float, 3 levels
//           (1 MiB + 256 KiB + 64 KiB = 1,376,256 B); d = cuArray3DCreate_v2 256 x 256 float with
//           CUDA_ARRAY3D_DEFERRED_MAPPING (0 B); destroy a, d. External memory: e =
//           cuImportExternalMemory of a 2 MiB memfd (OPAQUE_FD, 2 MiB); p = mapped buffer
//           [0, 1 MiB) of e, freed with cuMemFree; q = mapped buffer [1 MiB, 1.5 MiB) of e, left
//           mapped. Exit 0 with b, c and e held.
//           device 0: 5 allocations (a, b, c, d, e), 2 frees, peak 5,636,096 B (a, b, c), live
//           3,538,944 B (b, c, e) in 3 segments; imported mapping q (512 KiB, handle e). No
//           anomalies.
//  contexts [release]  dev 0 (its primary context's first retain: a new context); dev 0 again
//           (a second reference, no new context); a = alloc 1 MiB; free a. c = cuCtxCreate (_v4
//           ABI, no parameters, flags 0) on device 1 (current from then on); b = alloc 2 MiB;
//           free b; cuCtxDestroy(c). With "release": cuDevicePrimaryCtxRelease(dev 0) twice (the
//           second release drops the last reference: the primary context ends). Exit 0.
//           Contexts: device 0 (primary, alive at exit unless released), device 1 (created and
//           destroyed). Live 0 on both devices at exit, peak 1 MiB on device 0, 2 MiB on 1.
//  scribble dev 0: alloc 1 MiB (leaked); then, as a hostile program would, writes into its own
//           cumemtrace ring (found in /proc/self/maps; exit 3 when there is none): reserves the
//           next ticket T and publishes a record claiming 200 continuation slots (the limit is
//           64); prints "forged T"; alloc 2 MiB (leaked); exit 0.
//  owners   the automatic phases' ownership walks, reached as Python's ctypes reaches them
//           (dlsym of cumemtrace_torch_owners; exit 3 when it is not there: not preloaded).
//           dev 0; a = alloc 1 MiB; b = alloc 2 MiB; walks: parameter {(a, 1 MiB), (b, 2 MiB)};
//           gradient {(0x10000000 + 4096 i, 4096 + i) for i = 0..299} (300 pairs: more than one
//           record holds, 224 a record); gradient {} (no gradients now); then calls that must be
//           refused: role 9 (past the last, 8), role 0, null pairs with npairs 1. Prints "owners 0
//           0 0 -1 -1 -1" (the six return values); free a; exit 0. Snapshot: 3 walks, in that
//           order, with exactly those pairs; b live (2 MiB).

#pragma once

#include <cuda.h>

#include <cstddef>

#include "driver_calls.h"

namespace cumemtrace::testprog {

// Driver-API signatures, whatever the program reaches them through. Null: not offered.
struct Driver : DriverCalls {
  CUresult (*init)();                  // bring the driver up (cuInit(0), or a runtime's first call)
  CUresult (*setDevice)(int ordinal);  // make the device's primary context current on this thread
};

// Runs the scenario named by argv[1] (its arguments follow); returns the process exit status.
int run_scenario(const Driver& driver, int argc, char** argv);

}  // namespace cumemtrace::testprog

// The allocation the end-to-end tests find by function name and line: 2 MiB on the current
// device. extern "C" so that its symbol is exactly `allocate_weights`.
extern "C" CUdeviceptr allocate_weights(const cumemtrace::testprog::Driver* driver);
