// The cached CFI unwinder against _Unwind_Backtrace: for every stack either the same frames or
// an explicit fallback, never anything else.
#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "frames.h"
#include "stacks/cfi_unwinder.h"
#include "stacks/stack_capture.h"

using cumemtrace::unwind_test::Chain;
using cumemtrace::unwind_test::kMaxChain;
using cumemtrace::unwind_test::run_chain;
using cumemtrace::unwind_test::StepFn;
namespace cfi = cumemtrace::preload::cfi;

namespace {

constexpr unsigned kMaxFrames = 256;

struct Capture {
  unsigned max_depth = kMaxFrames;
  uint64_t skip_lo = 0, skip_hi = 0;
  uint64_t stop_at = 0;
  const cfi::CodeRange* stop_in = nullptr;
  bool mark = false;  // marked_leaf sets stop_at to a local of its own frame
  uint64_t fast[kMaxFrames] = {};
  uint64_t slow[kMaxFrames] = {};
  int nfast = 0, nslow = 0;
};

using UnwindFn = int (*)(uint64_t*, unsigned, uint64_t, uint64_t, cfi::FirstSeen*, uint64_t,
                         const cfi::CodeRange*);
UnwindFn const g_unwinders[2] = {&cfi::unwind_fast, &cfi::unwind_slow};

// Both unwinders from one call site (a loop the compiler cannot unroll), so every frame above
// the unwinder's own is identical for the two; frame 0 is the unwinder itself (when not skipped).
__attribute__((noinline)) void capture_both(Capture* r) {
  uint64_t* outs[2] = {r->fast, r->slow};
  int* counts[2] = {&r->nfast, &r->nslow};
  int two = 2;
  asm volatile("" : "+r"(two));  // an unknown trip count: the loop stays one call site
  for (int i = 0; i < two; ++i) {
    *counts[i] = g_unwinders[i](outs[i], r->max_depth, r->skip_lo, r->skip_hi, nullptr, r->stop_at,
                                r->stop_in);
  }
  asm volatile("" ::: "memory");
}

void leaf_capture(Chain* c) {
  capture_both(static_cast<Capture*>(c->arg));
}

// A leaf whose frame holds the stop address of its capture, when asked to: its frame address
// (the saved rbp's slot), not a local's, which AddressSanitizer may move to a heap-allocated
// fake stack.
__attribute__((noinline)) void marked_leaf(Chain* c) {
  auto* r = static_cast<Capture*>(c->arg);
  volatile int local = 0;
  if (r->mark) r->stop_at = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
  capture_both(r);
  asm volatile("" ::"r"(local) : "memory");
}

// Frames that must agree: all of them when the unwinder's own frame is skipped, else from 1 on.
bool same_frames(const Capture& r, std::string* why = nullptr) {
  auto fail = [&](const std::string& s) {
    if (why) *why = s;
    return false;
  };
  if (r.nfast == cfi::kFallback) return fail("fast unwinder fell back");
  if (r.nfast != r.nslow) {
    return fail("fast " + std::to_string(r.nfast) + " frames, slow " + std::to_string(r.nslow));
  }
  const int first = r.skip_hi > r.skip_lo ? 0 : 1;
  for (int i = first; i < r.nfast; ++i) {
    if (r.fast[i] != r.slow[i]) return fail("frame " + std::to_string(i) + " differs");
  }
  return true;
}

const StepFn kSteps[] = {&unwind_step_o0, &unwind_step_o2, &unwind_step_o2fp, &unwind_step_lib,
                         &unwind_step_plt};
const char* const kStepNames[] = {"O0+fp", "O2", "O2+fp", "lib", "plt"};
using RecurseFn = int (*)(Chain*, int);
const RecurseFn kRecursions[] = {&unwind_recurse_o0, &unwind_recurse_o2, &unwind_recurse_o2fp,
                                 &unwind_recurse_lib};

Chain random_chain(std::mt19937& rng, int depth) {
  Chain c;
  c.depth = depth;
  for (int i = 0; i < depth; ++i) {
    c.steps[i] = kSteps[rng() % 5];
    c.alloca_bytes[i] = rng() % 3 == 0 ? 1 + rng() % 700 : 0;
  }
  return c;
}

// Changes one step of the chain at random: its kind, which moves the return address above it,
// or its variable-size frame, which moves every frame inside it. Returns the step's index.
int change_one_step(Chain& c, std::mt19937& rng) {
  const int at = static_cast<int>(rng() % static_cast<unsigned>(c.depth));
  if (rng() % 2) {
    c.steps[at] = kSteps[rng() % 5];
  } else {
    c.alloca_bytes[at] = rng() % 4 == 0 ? 1 + rng() % 700 : 0;
  }
  return at;
}

// The executable text range, to exercise the same skipping as the preload does for its own.
int find_exe_text(dl_phdr_info* info, size_t, void* data) {
  auto* range = static_cast<uint64_t*>(data);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    lo = std::min<uint64_t>(lo, info->dlpi_addr + ph.p_vaddr);
    hi = std::max<uint64_t>(hi, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
  }
  const auto self = reinterpret_cast<uint64_t>(&capture_both);
  if (self < lo || self >= hi) return 0;
  range[0] = lo;
  range[1] = hi;
  return 1;
}

std::pair<uint64_t, uint64_t> exe_text() {
  uint64_t range[2] = {0, 0};
  dl_iterate_phdr(find_exe_text, range);
  return {range[0], range[1]};
}

// unwind_step_lib's code, found by its dynamic symbol as the preload finds PyTorch's functions:
// the stop function of the tests below.
cfi::CodeRange lib_step_code() {
  Dl_info di{};
  void* entry = nullptr;
  REQUIRE(dladdr1(reinterpret_cast<void*>(&unwind_step_lib), &di, &entry, RTLD_DL_SYMENT));
  const auto* sym = static_cast<const ElfW(Sym)*>(entry);
  REQUIRE(sym != nullptr);
  const auto lo = reinterpret_cast<uint64_t>(di.dli_saddr);
  return cfi::CodeRange{lo, lo + sym->st_size};
}

}  // namespace

TEST_CASE("depth 0 captures nothing", "[unwind]") {
  uint64_t out[4] = {};
  CHECK(cfi::unwind_fast(out, 0, 0, 0) == 0);
  CHECK(cfi::unwind_slow(out, 0, 0, 0) == 0);
  CHECK(cumemtrace::preload::capture_stack(out, 0) == 0);
}

TEST_CASE("chains of one kind of frame, 1 to 60 deep", "[unwind]") {
  for (int kind = 0; kind < 5; ++kind) {
    for (int depth = 1; depth <= 60; ++depth) {
      Capture r;
      Chain c;
      c.depth = depth;
      for (int i = 0; i < depth; ++i) c.steps[i] = kSteps[kind];
      c.leaf = leaf_capture;
      c.arg = &r;
      run_chain(&c);
      std::string why;
      const bool same = same_frames(r, &why);
      INFO(kStepNames[kind] << " depth " << depth << ": " << why);
      REQUIRE(same);
      CHECK(r.nfast >= depth + 3);
    }
  }
}

TEST_CASE("a walk ends with the frame that holds the stop address", "[unwind]") {
  // The recorder stops at CPython's evaluation loop, found by a local of its C frame; here the
  // local is marked_leaf's, at the end of random chains. Both walks of a chain run from one call
  // site, so that even the frames above the chain are the same.
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    Chain c = random_chain(rng, 1 + static_cast<int>(rng() % 30));
    c.leaf = marked_leaf;
    Capture full, cut, outside;
    cut.mark = true;
    outside.stop_at = reinterpret_cast<uint64_t>(&g_unwinders);  // not on the stack
    for (Capture* r : {&full, &cut, &outside}) {
      c.arg = r;
      run_chain(&c);
    }
    std::string why;
    INFO("round " << round << ", depth " << c.depth);
    REQUIRE(same_frames(full, &why));
    const bool cut_same = same_frames(cut, &why);
    INFO(why << " fast " << cut.nfast << " slow " << cut.nslow);
    REQUIRE(cut_same);
    REQUIRE(same_frames(outside, &why));
    // The unwinder, capture_both, then marked_leaf's frame, which holds the address.
    REQUIRE(cut.nfast == 3);
    REQUIRE(full.nfast > 3 + c.depth);
    for (int i = 1; i < 3; ++i) REQUIRE(cut.fast[i] == full.fast[i]);
    REQUIRE(outside.nfast == full.nfast);
  }
}

TEST_CASE("a walk ends with the stop function's frame, walked or replayed", "[unwind]") {
  // The preload stops the walks of PyTorch's autograd thread at Engine::evaluate_function, a
  // function of a shared library found by its dynamic symbol; here unwind_step_lib's code. One
  // chain walked again and again with one step changed, in turn without the stop and with it (and
  // sometimes a depth limit), so that the stopped walk replays the full one's frames from the
  // memo: both unwinders must give the full walk's frames up to the innermost frame in the
  // function, that one included. The same with the range as the walk's own stop (stop_in: the
  // recorder's, for PyTorch's pool allocator), which takes the place of the process-wide one:
  // that one is then set to capture_both, which every walk meets first.
  const bool per_walk = GENERATE(false, true);
  const cfi::CodeRange lib = lib_step_code();
  const uint64_t lo = lib.lo, hi = lib.hi;
  struct Clear {
    ~Clear() { cfi::set_stop_function(0, 0); }
  } clear;
  std::mt19937 rng(11);
  Chain c = random_chain(rng, 40);
  c.leaf = marked_leaf;
  int stopped = 0;
  for (int round = 0; round < 300; ++round) {
    change_one_step(c, rng);
    Capture full, cut;
    if (rng() % 4 == 0) cut.max_depth = 1 + rng() % 60;
    cfi::set_stop_function(0, 0);
    c.arg = &full;
    run_chain(&c);
    const cfi::CodeRange range{lo, hi};
    if (per_walk) {
      const auto own = reinterpret_cast<uint64_t>(&capture_both);
      cfi::set_stop_function(own, own + 4096);
      cut.stop_in = &range;
    } else {
      cfi::set_stop_function(lo, hi);
    }
    c.arg = &cut;
    run_chain(&c);
    std::string why;
    INFO("round " << round << ", limit " << cut.max_depth << (per_walk ? ", per walk" : ""));
    REQUIRE(same_frames(full, &why));
    const bool same = same_frames(cut, &why);
    INFO(why);
    REQUIRE(same);
    int want = full.nfast;
    for (int i = 1; i < full.nfast; ++i) {
      if (full.fast[i] > lo && full.fast[i] <= hi) {
        want = i + 1;
        break;
      }
    }
    if (want < full.nfast) ++stopped;
    want = std::min(want, static_cast<int>(cut.max_depth));
    REQUIRE(cut.nfast == want);
    for (int i = 1; i < want; ++i) REQUIRE(cut.fast[i] == full.fast[i]);
  }
  // Nearly every chain of 40 random steps has a step in the library.
  CHECK(stopped > 250);
}

// A short walk that ends in its own stop function (the recorder's, for a PyTorch pool tensor:
// through libcudart to PyTorch's allocator) is taken whole from the thread's last one while the
// stack slots it read hold the same return addresses, and walked again as soon as one differs.
struct ShortWalks {
  Capture r;
  cfi::CacheStats delta{};
};

void leaf_capture_counted(Chain* c) {
  auto* x = static_cast<ShortWalks*>(c->arg);
  const cfi::CacheStats before = cfi::thread_cache_stats();
  capture_both(&x->r);
  const cfi::CacheStats after = cfi::thread_cache_stats();
  x->delta.short_walks = after.short_walks - before.short_walks;
  x->delta.misses = after.misses - before.misses;
}

TEST_CASE("a short walk to the stop function is replayed from its stack slots, or walked again",
          "[unwind]") {
  const cfi::CodeRange range = lib_step_code();
  // The unwinder's frame, capture_both, the leaf, two steps, the library's step that stops the
  // walk; the outer steps are never walked.
  Chain c;
  c.depth = 10;
  for (int i = 0; i < c.depth; ++i) c.steps[i] = &unwind_step_o2;
  c.steps[7] = &unwind_step_lib;
  c.leaf = leaf_capture_counted;
  ShortWalks w;
  w.r.stop_in = &range;
  c.arg = &w;
  const auto walk = [&](const char* what) {
    run_chain(&c);
    INFO(what);
    std::string why;
    const bool same = same_frames(w.r, &why);
    INFO(why);
    REQUIRE(same);
    // The unwinder's frame, capture_both, the leaf, the steps below the library's, and its own.
    REQUIRE(w.r.nfast >= 5);
    REQUIRE(w.r.nfast <= 7);
    REQUIRE(w.r.fast[w.r.nfast - 1] > range.lo);
    REQUIRE(w.r.fast[w.r.nfast - 1] <= range.hi);
  };
  walk("first walk");
  walk("second walk");
  // Code built with frame pointers computes its frames' CFAs from rbp, which a short walk does
  // not replay (sanitizer builds of this test): those walks take the memo's way.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  CHECK(w.delta.short_walks == 1);
#endif
  walk("third walk");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  CHECK(w.delta.short_walks == 1);
#endif
  // A step between the leaf and the stop changes: its return address moves, and the walk that
  // meets it is a walk again (its new frame's rule a miss the first time), then replayed.
  c.steps[8] = &unwind_step_plt;
  walk("after a step changed");
  CHECK(w.delta.short_walks == 0);
  walk("again after the change");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  CHECK(w.delta.short_walks == 1);
#endif
  // A frame that grows (alloca) moves every slot above it.
  c.alloca_bytes[9] = 128;
  walk("after a frame grew");
  CHECK(w.delta.short_walks == 0);
  // Past the stop: a deeper chain above the library's step changes nothing below it.
  c.alloca_bytes[9] = 0;
  c.steps[2] = &unwind_step_o0;
  walk("outer step changed");
}

// A walk from a start captured in an outer frame (the recorder's hook), made two calls deeper.
struct FromStart {
  unsigned max_depth = kMaxFrames;
  bool mark = false;  // start_leaf stops the walk at its own frame
  uint64_t stop_at = 0;
  uint64_t start_pc = 0;
  uint64_t from[kMaxFrames] = {};
  uint64_t slow[kMaxFrames] = {};
  int nfrom = 0, nslow = 0;
};
__attribute__((noinline)) void walk_from_below(const cfi::WalkStart& start, FromStart* r) {
  r->nfrom = cfi::unwind_fast_from(start, r->from, r->max_depth, 0, 0, nullptr, r->stop_at);
  r->nslow = cfi::unwind_slow(r->slow, kMaxFrames, 0, 0, nullptr, 0);
  asm volatile("" ::: "memory");
}
__attribute__((noinline)) void walk_from_between(const cfi::WalkStart& start, FromStart* r) {
  walk_from_below(start, r);
  asm volatile("" ::: "memory");
}
// The chain's leaf: captures its own frame, then walks from it two frames further down.
__attribute__((noinline)) void start_leaf(Chain* c) {
  auto* r = static_cast<FromStart*>(c->arg);
  const cfi::WalkStart start = cfi::walk_start_here();
  r->start_pc = start.pc;
  if (r->mark) r->stop_at = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
  walk_from_between(start, r);
  asm volatile("" ::: "memory");
}

TEST_CASE("a walk from a start captured in an outer frame skips the frames below it", "[unwind]") {
  // The slow walk from walk_from_below sees [unwind_slow's body, walk_from_below,
  // walk_from_between, start_leaf, the chain, ...]; the walk from start_leaf's captured state
  // sees [start_leaf at the capture, the chain, ...]: the same frames from the chain on.
  std::mt19937 rng(4242);
  for (int round = 0; round < 300; ++round) {
    Chain c = random_chain(rng, 1 + static_cast<int>(rng() % 40));
    c.leaf = start_leaf;
    FromStart r;
    if (round % 3 == 1) r.max_depth = 1 + rng() % 20;
    c.arg = &r;
    run_chain(&c);
    INFO("round " << round << ", depth " << c.depth << ", max " << r.max_depth);
    REQUIRE(r.nfrom != cfi::kFallback);
    REQUIRE(r.nfrom >= 1);
    CHECK(r.from[0] == r.start_pc);
    // Frames 1.. of the walk from the start are the slow walk's last ones, less any cut by
    // max_depth: the slow walk's frame 4 is start_leaf's return address into the chain.
    REQUIRE(r.nslow >= 5);
    const int expect = std::min<int>(static_cast<int>(r.max_depth), r.nslow - 3);
    REQUIRE(r.nfrom == expect);
    for (int i = 1; i < r.nfrom; ++i) REQUIRE(r.from[i] == r.slow[i + 3]);
    // The frame the slow walk saw in start_leaf is its return address from walk_from_between,
    // after the capture.
    CHECK(r.slow[3] > r.start_pc);
  }
  // A stop address in start_leaf's own frame ends the walk there, at its first frame.
  Chain c = random_chain(rng, 12);
  c.leaf = start_leaf;
  FromStart r;
  r.mark = true;
  c.arg = &r;
  run_chain(&c);
  REQUIRE(r.nfrom == 1);
  CHECK(r.from[0] == r.start_pc);
}

TEST_CASE("direct self-recursion 1 to 60 deep", "[unwind]") {
  for (int kind = 0; kind < 4; ++kind) {
    for (int depth = 1; depth <= 60; ++depth) {
      Capture r;
      Chain c;
      c.leaf = leaf_capture;
      c.arg = &r;
      kRecursions[kind](&c, depth);
      std::string why;
      const bool same = same_frames(r, &why);
      INFO(kStepNames[kind] << " depth " << depth << ": " << why);
      REQUIRE(same);
      CHECK(r.nfast >= depth + 3);
    }
  }
}

TEST_CASE("mutually recursive mixed chains with alloca frames, every depth limit", "[unwind]") {
  std::mt19937 rng(12345);
  for (int round = 0; round < 400; ++round) {
    Capture r;
    Chain c = random_chain(rng, 1 + static_cast<int>(rng() % 60));
    r.max_depth = 1 + rng() % 80;
    c.leaf = leaf_capture;
    c.arg = &r;
    run_chain(&c);
    std::string why;
    const bool same = same_frames(r, &why);
    INFO("round " << round << " depth " << c.depth << " limit " << r.max_depth << ": " << why);
    REQUIRE(same);
    CHECK(static_cast<unsigned>(r.nfast) <= r.max_depth);
  }
}

TEST_CASE("skipping the leading frames of one module, as the preload skips its own", "[unwind]") {
  const auto [lo, hi] = exe_text();
  REQUIRE(hi > lo);
  std::mt19937 rng(777);
  for (int round = 0; round < 200; ++round) {
    Capture r;
    r.skip_lo = lo;
    r.skip_hi = hi;
    r.max_depth = 1 + rng() % 40;
    Chain c = random_chain(rng, 2 + static_cast<int>(rng() % 30));
    // Executable frames innermost, then the library: the skip must stop at the first lib frame.
    c.steps[c.depth - 1] = &unwind_step_o2;
    c.steps[c.depth - 2] = &unwind_step_lib;
    c.leaf = leaf_capture;
    c.arg = &r;
    run_chain(&c);
    std::string why;
    const bool same = same_frames(r, &why);
    INFO("round " << round << ": " << why);
    REQUIRE(same);
    REQUIRE(r.nfast >= 1);
    Dl_info di;
    REQUIRE(dladdr(reinterpret_cast<void*>(r.fast[0] - 1), &di));
    CHECK(std::string(di.dli_fname).find("unwind_test_frames") != std::string::npos);
  }
}

TEST_CASE("capture_stack gives the slow path's frames", "[unwind]") {
  const auto [lo, hi] = exe_text();
  struct Both {
    uint64_t fast[64], slow[64];
    unsigned nfast;
    int nslow;
    uint64_t lo, hi;
  } b{};
  b.lo = lo;
  b.hi = hi;
  Chain c;
  c.depth = 6;
  for (int i = 0; i < 6; ++i) c.steps[i] = i == 3 ? &unwind_step_plt : &unwind_step_o2;
  c.leaf = [](Chain* ch) {
    auto* x = static_cast<Both*>(ch->arg);
    x->nfast = cumemtrace::preload::capture_stack(x->fast, 64);
    x->nslow = cfi::unwind_slow(x->slow, 64, x->lo, x->hi);
  };
  c.arg = &b;
  run_chain(&c);
  REQUIRE(b.nfast >= 3);
  REQUIRE(static_cast<int>(b.nfast) == b.nslow);
  for (unsigned i = 0; i < b.nfast; ++i) CHECK(b.fast[i] == b.slow[i]);
}

TEST_CASE("the walker names the frames it meets for the first time (for the module map)",
          "[unwind]") {
  struct Walks {
    uint64_t f[3][64];
    int n[3];
    cfi::FirstSeen seen[3];
  } w{};
  Chain c;
  c.depth = 8;
  for (int i = 0; i < 8; ++i) c.steps[i] = kSteps[i % 5];
  c.leaf = [](Chain* ch) {
    auto* x = static_cast<Walks*>(ch->arg);
    int three = 3;
    asm volatile("" : "+r"(three));  // one call site for the three walks
    // The depth comes from memory, not from `i == 2 ? 3 : 64`: at -O3 GCC splits a loop on such
    // a condition (-fsplit-loops), which made the third walk a call site of its own (Release).
    unsigned depth[3] = {64, 64, 3};
    asm volatile("" ::"r"(depth) : "memory");
    for (int i = 0; i < three; ++i) {
      x->n[i] = cfi::unwind_fast(x->f[i], depth[i], 0, 0, &x->seen[i]);
    }
  };
  c.arg = &w;
  run_chain(&c);
  REQUIRE(w.n[0] > 8);
  REQUIRE(w.n[1] == w.n[0]);
  // The first walk: the return address into this test's own leaf was never walked before.
  REQUIRE(!w.seen[0].all);
  CHECK(std::count(w.seen[0].pcs, w.seen[0].pcs + w.seen[0].n, w.f[0][1]) == 1);
  // The same stack again: nothing is new.
  CHECK(w.seen[1].n == 0);
  CHECK(!w.seen[1].all);
  // Stopped at max_depth: the last frame's rule was never looked up, so it is named.
  REQUIRE(w.n[2] == 3);
  REQUIRE(w.seen[2].n == 1);
  CHECK(w.seen[2].pcs[0] == w.f[2][2]);
  // The platform unwinder caches nothing: every frame must be checked.
  cfi::FirstSeen slow;
  uint64_t out[64];
  cfi::unwind_slow(out, 64, 0, 0, &slow);
  CHECK(slow.all);
}

// Captures the chain's stack twice from one call site (the second walk meets only return
// addresses seen before) and keeps the rule cache's counters of the second walk.
struct TwoWalks {
  Capture r;
  cfi::CacheStats second{};
};

void capture_twice(Chain* c) {
  c->leaf = [](Chain* ch) {
    auto* x = static_cast<TwoWalks*>(ch->arg);
    int two = 2;
    asm volatile("" : "+r"(two));
    for (int i = 0; i < two; ++i) {
      const cfi::CacheStats before = cfi::thread_cache_stats();
      capture_both(&x->r);
      const cfi::CacheStats after = cfi::thread_cache_stats();
      x->second = {after.hits - before.hits,           after.misses - before.misses,
                   after.fallbacks - before.fallbacks, after.memo_hits - before.memo_hits,
                   after.replayed - before.replayed,   after.short_walks - before.short_walks};
    }
  };
  run_chain(c);
}

TEST_CASE("a second capture of the same stack is served from the cache", "[unwind]") {
  TwoWalks w;
  Chain c;
  c.depth = 30;
  for (int i = 0; i < 30; ++i) c.steps[i] = kSteps[i % 5];
  c.arg = &w;
  capture_twice(&c);
  REQUIRE(same_frames(w.r));
  CHECK(w.second.misses == 0);
  CHECK(w.second.hits >= static_cast<uint64_t>(w.r.nfast) - 1);
  // The unwinder's own frame starts at a new stack address (its exact pc keys differ from a
  // return address's), then one frame is matched in the memo and the rest are replayed.
  CHECK(w.second.replayed + 3 >= static_cast<uint64_t>(w.r.nfast));
}

TEST_CASE("two stacks that differ in one middle frame, walked in turn at the same addresses",
          "[unwind]") {
  // The fast walker reuses the rules of its last walk for frames at the same stack address with
  // the same key: here the frames inside the differing one sit at the same addresses in both
  // stacks, while the return addresses above them differ.
  for (int round = 0; round < 60; ++round) {
    Capture r;
    Chain c;
    c.depth = 12;
    for (int i = 0; i < 12; ++i) c.steps[i] = &unwind_step_o2;
    c.steps[6] = round % 2 ? &unwind_step_o2 : &unwind_step_lib;
    c.steps[round % 12] = round % 3 ? c.steps[round % 12] : &unwind_step_o0;
    c.leaf = leaf_capture;
    c.arg = &r;
    run_chain(&c);
    std::string why;
    const bool same = same_frames(r, &why);
    INFO("round " << round << ": " << why);
    REQUIRE(same);
  }
}

TEST_CASE("a repeated stack is replayed from the memo, up to the first slot that changed",
          "[unwind]") {
  // One chain walked again and again, each time with one step changed (its kind, which moves
  // the return address above it, or its variable-size frame, which moves every frame inside
  // it), and a random depth limit or a stop inside the leaf. The fast walker takes frames whole
  // from its last walks while their slots hold the same values; every walk must still give
  // exactly the slow unwinder's frames, and most frames must come from the replay.
  std::mt19937 rng(2026);
  Chain c = random_chain(rng, 40);
  c.leaf = marked_leaf;
  uint64_t frames = 0, replayed = 0;
  for (int round = 0; round < 400; ++round) {
    const int at = change_one_step(c, rng);
    Capture r;
    if (rng() % 4 == 0) r.max_depth = 1 + rng() % 60;
    r.mark = rng() % 8 == 0;
    c.arg = &r;
    const cfi::CacheStats before = cfi::thread_cache_stats();
    run_chain(&c);
    const cfi::CacheStats after = cfi::thread_cache_stats();
    std::string why;
    const bool same = same_frames(r, &why);
    INFO("round " << round << " changed step " << at << ", limit " << r.max_depth
                  << (r.mark ? ", stopped in the leaf" : "") << ": " << why);
    REQUIRE(same);
    if (r.mark) REQUIRE(r.nfast == 3);
    frames += static_cast<uint64_t>(r.nfast);
    replayed += after.replayed - before.replayed;
  }
  // One changed step in 40 leaves the frames on one side of it as they were: most of each walk.
  INFO(replayed << " of " << frames << " frames replayed");
  CHECK(replayed * 2 > frames);
}

TEST_CASE("call sites taken in turn are each replayed from their own last walk", "[unwind]") {
  // As in a training step: a dozen call sites, each its own chain of frames, allocate in turn
  // from the same loop, and the step repeats. The last two walks are always other call sites,
  // whose frames part from this one's at the first step; the index of recent walks finds this
  // call site's walk of the previous round, so from the second round on every frame but the
  // first few is replayed. Every walk must still give exactly the slow unwinder's frames.
  std::mt19937 rng(1124);
  constexpr int kSites = 12;
  std::vector<Chain> sites;
  for (int i = 0; i < kSites; ++i) {
    sites.push_back(random_chain(rng, 10 + static_cast<int>(rng() % 20)));
    sites.back().leaf = leaf_capture;
  }
  // Frames a walk met without replaying them: the unwinder's own first frame, and the one where
  // this chain parts from the last walk (another site's), where the index finds this site's.
  // The index is direct-mapped, and which frames share an entry depends on the addresses ASLR
  // gave this run, so now and then a walk meets one more. Such a collision belongs to a call site
  // and repeats in every round: about 1 run in 100 has one site that meets 3 frames in all 19
  // rounds (19 of 228 walks; a clean clone's CI run failed on that when 1 walk in 20 was allowed).
  // Allowed: 1 walk in 4 (three such sites), and 1 frame in 20 walks overall. With the index off
  // every walk meets more than 2 (228 of 228).
  uint64_t walks = 0, walked = 0, longer = 0;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < kSites; ++i) {
      Capture r;
      sites[i].arg = &r;
      const cfi::CacheStats before = cfi::thread_cache_stats();
      run_chain(&sites[i]);
      const cfi::CacheStats after = cfi::thread_cache_stats();
      std::string why;
      const bool same = same_frames(r, &why);
      INFO("round " << round << ", site " << i << ": " << why);
      REQUIRE(same);
      if (round == 0) continue;
      const uint64_t met = after.hits + after.misses - before.hits - before.misses;
      const uint64_t w = met - (after.replayed - before.replayed);
      ++walks;
      walked += w;
      longer += w > 2;
    }
  }
  INFO(walked << " frames walked in " << walks << " walks, " << longer << " walks met more than 2");
  CHECK(longer * 4 <= walks);
  CHECK(walked * 20 <= walks * (2 * 20 + 1));
}

TEST_CASE("a replay goes on past saved rbp values that no rule computes a CFA from", "[unwind]") {
  // Frames that keep data in rbp, so that the slots where their callees save it hold a new
  // value at every run of the chain; between them, -O0 frames whose CFA is their real frame
  // pointer. The chain runs twice from one call site, so its frames sit at the same addresses.
  for (int round = 0; round < 20; ++round) {
    TwoWalks w;
    Chain c;
    c.depth = 24;
    for (int i = 0; i < 24; ++i) {
      c.steps[i] = i % 3 == 0 ? &unwind_step_o0 : &unwind_step_rbp_data;
    }
    c.arg = &w;
    c.leaf = [](Chain* ch) {
      auto* x = static_cast<TwoWalks*>(ch->arg);
      const cfi::CacheStats before = cfi::thread_cache_stats();
      capture_both(&x->r);
      const cfi::CacheStats after = cfi::thread_cache_stats();
      x->second.replayed = after.replayed - before.replayed;
    };
    int two = 2;
    asm volatile("" : "+r"(two));
    for (int i = 0; i < two; ++i) {
      unwind_test_salt = unwind_test_salt + 0x1000;
      run_chain(&c);
    }
    std::string why;
    const bool same = same_frames(w.r, &why);
    INFO("round " << round << ": " << why);
    REQUIRE(same);
    REQUIRE(w.r.nfast > 24);
    CHECK(w.second.replayed + 3 >= static_cast<uint64_t>(w.r.nfast));
  }
}

TEST_CASE("threads that ended leave their memo of the last walk to new threads", "[unwind]") {
  // More threads, one after another, than there are memos: each must still get one (taken over
  // from a thread that is gone) and serve its second walk of a stack from it.
  for (int t = 0; t < 150; ++t) {
    TwoWalks w;
    std::thread th([&] {
      Chain c;
      c.depth = 10;
      for (int i = 0; i < 10; ++i) c.steps[i] = kSteps[i % 4];
      c.arg = &w;
      capture_twice(&c);
    });
    th.join();
    INFO("thread " << t);
    REQUIRE(same_frames(w.r));
    // Every frame of the second walk but the unwinder's own two (they start at a new stack
    // address inside unwind_fast) from the memo.
    CHECK(w.second.memo_hits + 2 >= static_cast<uint64_t>(w.r.nfast));
  }
}

TEST_CASE("a stack from a second thread", "[unwind]") {
  Capture r;
  std::thread t([&] {
    std::mt19937 rng(99);
    Chain c = random_chain(rng, 25);
    c.leaf = leaf_capture;
    c.arg = &r;
    run_chain(&c);
  });
  t.join();
  std::string why;
  const bool same = same_frames(r, &why);
  INFO(why);
  REQUIRE(same);
}

namespace {

Capture* g_capture = nullptr;
unsigned g_signal_public = 0;
uint64_t g_signal_frames[64];

void on_signal(int) {
  capture_both(g_capture);
  g_signal_public = cumemtrace::preload::capture_stack(g_signal_frames, 64);
}

void raise_in_chain(Chain* c) {
  (void)c;
  raise(SIGUSR1);
}

void signal_capture(bool altstack) {
  static Capture r;
  r = Capture{};
  g_capture = &r;
  g_signal_public = 0;
  std::vector<char> alt(1 << 16);
  if (altstack) {
    stack_t ss{};
    ss.ss_sp = alt.data();
    ss.ss_size = alt.size();
    REQUIRE(sigaltstack(&ss, nullptr) == 0);
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = altstack ? SA_ONSTACK : 0;
  sigemptyset(&sa.sa_mask);
  REQUIRE(sigaction(SIGUSR1, &sa, nullptr) == 0);
  std::mt19937 rng(5);
  Chain c = random_chain(rng, 12);
  c.leaf = raise_in_chain;
  run_chain(&c);
  signal(SIGUSR1, SIG_DFL);
  if (altstack) {
    stack_t ss{};
    ss.ss_flags = SS_DISABLE;
    sigaltstack(&ss, nullptr);
  }
  // The signal frame is beyond the rule model: the fast unwinder must hand the stack over.
  CHECK(r.nfast == cfi::kFallback);
  CHECK(r.nslow > 12);
  CHECK(g_signal_public > 12);
}

}  // namespace

TEST_CASE("a stack captured in a signal handler falls back", "[unwind]") {
  signal_capture(false);
}

TEST_CASE("a stack captured on an alternate signal stack falls back", "[unwind]") {
  // In its own thread: the thread's stack bounds are looked up again for the other stack.
  std::thread t([] { signal_capture(true); });
  t.join();
}

TEST_CASE("16 threads capturing different stacks concurrently agree with the slow path",
          "[unwind]") {
  constexpr int kThreads = 16;
  std::atomic<uint64_t> captures{0}, mismatches{0}, fallbacks{0};
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1000 + t);
      while (std::chrono::steady_clock::now() < end) {
        Capture r;
        Chain c = random_chain(rng, 1 + static_cast<int>(rng() % 50));
        c.leaf = leaf_capture;
        c.arg = &r;
        run_chain(&c);
        captures.fetch_add(1);
        if (r.nfast == cfi::kFallback) fallbacks.fetch_add(1);
        if (!same_frames(r)) mismatches.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  INFO("captures " << captures.load());
  CHECK(captures.load() > 100);
  CHECK(fallbacks.load() == 0);
  CHECK(mismatches.load() == 0);
}

namespace {

// Capture in a callback called from inside libc, below and above its own frames.
int compare_and_capture(const void* a, const void* b) {
  static bool done = false;
  if (!done) {
    done = true;
    capture_both(static_cast<Capture*>(g_capture));
  }
  return *static_cast<const int*>(a) - *static_cast<const int*>(b);
}

int phdr_and_capture(dl_phdr_info*, size_t, void* data) {
  capture_both(static_cast<Capture*>(data));
  return 1;
}

}  // namespace

TEST_CASE("stacks through libc's own frames (qsort, dl_iterate_phdr)", "[unwind]") {
  Capture r;
  g_capture = &r;
  int values[64];
  for (int i = 0; i < 64; ++i) values[i] = (i * 37) % 64;
  qsort(values, 64, sizeof(int), compare_and_capture);
  std::string why;
  bool same = same_frames(r, &why);
  INFO("qsort: " << why);
  REQUIRE(same);
  Capture p;
  dl_iterate_phdr(phdr_and_capture, &p);
  same = same_frames(p, &why);
  INFO("dl_iterate_phdr: " << why);
  REQUIRE(same);
}

TEST_CASE("a frame with a CFA expression falls back, the rest of the chain does not matter",
          "[unwind]") {
  std::mt19937 rng(31);
  for (int round = 0; round < 50; ++round) {
    Capture r;
    Chain c = random_chain(rng, 3 + static_cast<int>(rng() % 20));
    c.steps[rng() % c.depth] = &unwind_step_drap;
    c.leaf = leaf_capture;
    c.arg = &r;
    run_chain(&c);
    REQUIRE(r.nfast == cfi::kFallback);
    REQUIRE(r.nslow > c.depth);
  }
}

TEST_CASE("code without unwind information falls back", "[unwind]") {
  // sub $8,%rsp; call *%rdi; add $8,%rsp; ret -- a JIT-like frame no FDE describes.
  static const unsigned char kCode[] = {0x48, 0x83, 0xec, 0x08, 0xff, 0xd7,
                                        0x48, 0x83, 0xc4, 0x08, 0xc3};
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(page != MAP_FAILED);
  memcpy(page, kCode, sizeof kCode);
  REQUIRE(mprotect(page, 4096, PROT_READ | PROT_EXEC) == 0);
  static Capture r;
  r = Capture{};
  auto trampoline = reinterpret_cast<void (*)(void (*)())>(page);
  trampoline([] { capture_both(&r); });
  munmap(page, 4096);
  CHECK(r.nfast == cfi::kFallback);
  // _Unwind_Backtrace reports the unknown frame and stops there.
  CHECK(r.nslow >= 3);
}
