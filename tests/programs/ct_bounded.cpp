// Contract: the program bounded capture is tested and benchmarked with (tests/e2e/test_bounded.py,
// bench/bench_bounded.sh). Links the fake driver with -lcuda, like ct_lcuda. Usage:
// ct_bounded [STEPS [CHURN]] (defaults 40 and 5000). On device 0 (its primary context), STEPS
// steps s = 0..STEPS-1, each:
//   - CHURN rounds of alloc 4096 + free;
//   - s in 10..19: alloc 1 MiB, kept (sustained growth: 1 MiB more live at each step's end);
//   - s == 24: alloc 64 blocks of 1 MiB, print "growth ADDR" for each growth block and "peak
//     ADDR" for each of the 64 (hex, flushed), then free the 64: the run's peak, 74 MiB live;
//   - s == 29: alloc 1 TiB must fail with CUDA_ERROR_OUT_OF_MEMORY (else exit 3): the OOM;
//   - s == 2, 5, 8: cumemtrace_snapshot("request-at-S") (include/cumemtrace.h);
//   - cumemtrace_mark("auto:step"): the automatic phases' iteration boundary (pytorch/phases.h).
// Then frees the growth blocks and exits 0 (live 0). With STEPS < 25 there is no peak block and
// with STEPS < 30 no OOM. Device 0 totals (STEPS = 40): STEPS*CHURN + 74 allocations and as many
// frees; STEPS*CHURN*4096 + 74 MiB allocated and freed.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cumemtrace.h"

namespace {

constexpr size_t kMiB = 1 << 20;

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "ct_bounded: %s failed: %d\n", what, static_cast<int>(r));
    std::exit(3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const long steps = argc > 1 ? std::atol(argv[1]) : 40;
  const long churn = argc > 2 ? std::atol(argv[2]) : 5000;
  check(cuInit(0), "cuInit");
  CUdevice dev = 0;
  check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx = nullptr;
  check(cuDevicePrimaryCtxRetain(&ctx, dev), "retain");
  check(cuCtxSetCurrent(ctx), "set current");
  std::vector<CUdeviceptr> growth;
  for (long s = 0; s < steps; ++s) {
    for (long i = 0; i < churn; ++i) {
      CUdeviceptr p = 0;
      check(cuMemAlloc(&p, 4096), "alloc 4096");
      check(cuMemFree(p), "free 4096");
    }
    if (s >= 10 && s < 20) {
      CUdeviceptr p = 0;
      check(cuMemAlloc(&p, kMiB), "alloc growth block");
      growth.push_back(p);
    }
    if (s == 24) {
      std::vector<CUdeviceptr> peak(64);
      for (auto& p : peak) check(cuMemAlloc(&p, kMiB), "alloc peak block");
      for (auto p : growth) std::printf("growth %llx\n", static_cast<unsigned long long>(p));
      for (auto p : peak) std::printf("peak %llx\n", static_cast<unsigned long long>(p));
      std::fflush(stdout);
      for (auto p : peak) check(cuMemFree(p), "free peak block");
    }
    if (s == 29) {
      CUdeviceptr p = 0;
      if (cuMemAlloc(&p, kMiB << 20) != CUDA_ERROR_OUT_OF_MEMORY) {
        std::fprintf(stderr, "ct_bounded: 1 TiB did not fail with out of memory\n");
        return 3;
      }
    }
    if (s == 2 || s == 5 || s == 8)
      cumemtrace_snapshot(("request-at-" + std::to_string(s)).c_str());
    cumemtrace_mark("auto:step");
  }
  for (auto p : growth) check(cuMemFree(p), "free growth block");
  return 0;
}
