// cudaMallocAsync + cudaFreeAsync pool hits: the cheapest allocation path there is (about 0.7-1.4
// us per pair bare on an H200), so it shows cumemtrace's per-event cost most clearly.
// Usage: async_pool_pair [PAIRS] [--ab BLOCKS [--aa]]
//   prints "ns_per_pair N" (the whole loop).
// --ab BLOCKS (under cumemtrace with CUMEMTRACE_PRELOAD=build/lib/libcumemtrace_bench.so, the
//   library with the switches): the PAIRS are run in BLOCKS blocks, recording paused
//   (cumemtrace_bench_pause_recording, preload/hooks/bench_switches.cpp) and on in turn, paused first; each
//   recording block is compared with the mean of the paused blocks on either side, so a drift of
//   the host's speed cancels out of each comparison. Whole runs of this program differ by more
//   than the cost being measured (the bare pair is bimodal on the H200 host, 600-760 or
//   1,050-1,250 ns from one process to the next). Prints "ab recording R paused P ns_per_pair,
//   per_pair_median M% (quartiles Q1% .. Q3%)". A paused block still goes through the hooks (the
//   guard, the real call, the state check), so the difference is what recording adds, and
//   (paused - bare) is the interposition, measured across processes. --aa never pauses: the
//   noise floor of the comparison.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

// ns per pair of `n` pool-hit pairs on `s`; -1 on an error.
double pairs_ns(cudaStream_t s, long n) {
  void* p = nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) {
    if (cudaMallocAsync(&p, 4096, s) != cudaSuccess) return -1;
    cudaFreeAsync(p, s);
  }
  cudaStreamSynchronize(s);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
         static_cast<double>(n);
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(at);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

}  // namespace

int main(int argc, char** argv) {
  const long pairs = argc > 1 ? std::atol(argv[1]) : 200000;
  int blocks = 0;
  bool aa = false;
  for (int i = 2; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--ab") && i + 1 < argc) blocks = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--aa")) aa = true;
  }
  cudaStream_t s;
  if (cudaStreamCreate(&s) != cudaSuccess) return 3;
  if (pairs_ns(s, 1000) < 0) return 3;  // warm the pool
  if (blocks < 3) {
    const double ns = pairs_ns(s, pairs);
    if (ns < 0) return 3;
    std::printf("ns_per_pair %.1f\n", ns);
    return 0;
  }
  auto pause =
      reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "cumemtrace_bench_pause_recording"));
  if (!pause || pause(0) != 0) {
    std::fprintf(stderr,
                 "async_pool_pair: --ab runs under cumemtrace (no preload, or not tracing)\n");
    return 2;
  }
  const long per_block = pairs / blocks;
  std::vector<double> ns(blocks);
  for (int b = 0; b < blocks; ++b) {
    const bool recording = b % 2 == 1;
    pause(aa || recording ? 0 : 1);
    ns[b] = pairs_ns(s, per_block);
    if (ns[b] < 0) return 3;
  }
  pause(0);
  std::vector<double> on, off, rel;
  for (int b = 0; b < blocks; ++b) (b % 2 ? on : off).push_back(ns[b]);
  for (int b = 1; b + 1 < blocks; b += 2)
    rel.push_back(100 * (ns[b] / ((ns[b - 1] + ns[b + 1]) / 2) - 1));
  std::printf(
      "ab%s recording %.1f paused %.1f ns_per_pair, per_pair_median %+.2f%% (quartiles %+.2f%% .. "
      "%+.2f%%)\n",
      aa ? " A/A (never paused)" : "", quantile(on, 0.5), quantile(off, 0.5), quantile(rel, 0.5),
      quantile(rel, 0.25), quantile(rel, 0.75));
  return 0;
}
