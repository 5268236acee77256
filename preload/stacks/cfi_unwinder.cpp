#include "stacks/cfi_unwinder.h"

#include "stacks/cfi_rules.h"
#include "stacks/thread_slots.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <unwind.h>

#include <atomic>
#include <csignal>
#include <cstring>

namespace cumemtrace::preload::cfi {

namespace {

using preload::ThreadSlots;

thread_local uint64_t t_hits __attribute__((tls_model("initial-exec"))) = 0;
thread_local uint64_t t_misses __attribute__((tls_model("initial-exec"))) = 0;
thread_local uint64_t t_fallbacks __attribute__((tls_model("initial-exec"))) = 0;
thread_local uint64_t t_memo_hits __attribute__((tls_model("initial-exec"))) = 0;
thread_local uint64_t t_replayed __attribute__((tls_model("initial-exec"))) = 0;
thread_local uint64_t t_short_walks __attribute__((tls_model("initial-exec"))) = 0;
// set_stop_function(): the code of the function whose frame ends a walk, as its start and its
// length (0: none). The length is written last and read first.
std::atomic<uint64_t> g_stop_fn_lo{0};
std::atomic<uint64_t> g_stop_fn_len{0};

struct StopFunction {
  uint64_t lo = 0, len = 0;  // none
  static StopFunction current() noexcept {
    StopFunction s;
    s.len = g_stop_fn_len.load(std::memory_order_acquire);
    if (s.len) s.lo = g_stop_fn_lo.load(std::memory_order_relaxed);
    return s;
  }
  static StopFunction of(const CodeRange& r) noexcept {
    StopFunction s;
    if (r.hi > r.lo) {
      s.lo = r.lo;
      s.len = r.hi - r.lo;
    }
    return s;
  }
  static StopFunction of(const CodeRange* walk_own) noexcept {
    return walk_own ? of(*walk_own) : current();
  }
  // A return address lies after its call instruction: (lo, lo + len], as CodeRange::holds_return.
  bool holds(uint64_t pc) const noexcept { return pc - lo - 1 < len; }
};

// Process-wide, touched only on a fallback (which costs microseconds anyway).
std::atomic<uint64_t> g_fallback_stacks{0};
std::atomic<uint64_t> g_fallback_pcs[4];

void note_fallback(uint64_t pc) {
  ++t_fallbacks;
  g_fallback_stacks.fetch_add(1, std::memory_order_relaxed);
  for (auto& slot : g_fallback_pcs) {  // the first slot that is free or already holds pc
    uint64_t seen = 0;
    if (slot.compare_exchange_strong(seen, pc + 1, std::memory_order_relaxed) || seen == pc + 1) {
      break;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The rule cache: 2-way set associative (a direct-mapped table makes two frames of one stack
// evict each other forever when they collide), every entry guarded by its own seqlock. Readers
// retry nothing: a torn or busy entry is a miss. A writer that finds the entry busy does not
// insert, so a signal handler interrupting a writer on the same thread never waits for it.
struct Entry {
  std::atomic<uint32_t> seq;
  std::atomic<uint64_t> key;
  std::atomic<uint64_t> rule;
};
constexpr unsigned kSetBits = 14;
Entry g_cache[2u << kSetBits];

// Key of a frame whose pc is exact (the walker's own), not a return address: the row for pc and
// for the return address pc + 1 may differ. User space addresses never have bit 63 set.
constexpr uint64_t kExactBit = uint64_t{1} << 63;

Entry* set_of(uint64_t key) {
  return &g_cache[((key * 0x9E3779B97F4A7C15ull) >> (64 - kSetBits)) * 2];
}

bool cache_get(uint64_t key, uint64_t& rule) {
  Entry* set = set_of(key);
  for (int way = 0; way < 2; ++way) {
    Entry& e = set[way];
    const uint32_t s1 = e.seq.load(std::memory_order_acquire);
    if (s1 & 1) continue;
    // Acquire loads instead of a fence (same instructions on x86, and ThreadSanitizer models
    // them): a key or rule from a newer write makes that write's odd seq visible below.
    const uint64_t k = e.key.load(std::memory_order_acquire);
    const uint64_t r = e.rule.load(std::memory_order_acquire);
    if (e.seq.load(std::memory_order_relaxed) != s1 || k != key) continue;
    rule = r;
    return true;
  }
  return false;
}

void cache_put(uint64_t key, uint64_t rule) {
  Entry* set = set_of(key);
  unsigned way = (key >> 4) & 1;  // the victim when both ways hold other keys
  for (unsigned w = 0; w < 2; ++w) {
    const uint64_t k = set[w].key.load(std::memory_order_relaxed);
    if (k == 0 || k == key) {
      way = w;
      break;
    }
  }
  // A busy way (a writer on another thread, or one that died mid-write before a fork) is left
  // alone: the other way is tried, then the rule is simply not cached.
  for (unsigned i = 0; i < 2; ++i) {
    Entry& e = set[way ^ i];
    uint32_t s = e.seq.load(std::memory_order_relaxed);
    if ((s & 1) || !e.seq.compare_exchange_strong(s, s + 1, std::memory_order_relaxed,
                                                  std::memory_order_relaxed)) {
      continue;
    }
    // Release stores order the odd seq above before the new key and rule.
    e.key.store(key, std::memory_order_release);
    e.rule.store(rule, std::memory_order_release);
    e.seq.store(s + 2, std::memory_order_release);
    return;
  }
}

// ---------------------------------------------------------------------------------------------
// Stack bounds: the mapping that holds the thread's stack pointer, read once per thread from
// /proc/self/maps into a stack buffer (pthread_getattr_np allocates). Everything between a live
// rsp and the end of its mapping is mapped, so reads in that range cannot fault.
thread_local uint64_t t_stack_lo __attribute__((tls_model("initial-exec"))) = 0;
thread_local uint64_t t_stack_hi __attribute__((tls_model("initial-exec"))) = 0;
thread_local uint32_t t_stack_lookups __attribute__((tls_model("initial-exec"))) = 0;

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

bool find_mapping(uint64_t addr, uint64_t& lo, uint64_t& hi) {
  // Raw system calls: read() and close() are cancellation points, and the application may
  // interpose open().
  const long fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  uint64_t start = 0, end = 0;
  enum { kStart, kEnd, kSkip } state = kStart;
  bool found = false;
  ssize_t n;
  while (!found && (n = syscall(SYS_read, fd, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      const char c = buf[i];
      if (c == '\n') {
        state = kStart;
        start = end = 0;
        continue;
      }
      if (state == kSkip) continue;
      const int d = hex_digit(c);
      if (d >= 0) {
        (state == kStart ? start : end) = (state == kStart ? start : end) * 16 + d;
      } else if (state == kStart && c == '-') {
        state = kEnd;
      } else if (state == kEnd && c == ' ' && addr >= start && addr < end) {
        lo = start;
        hi = end;
        found = true;
        break;
      } else {
        state = kSkip;
      }
    }
  }
  syscall(SYS_close, fd);
  return found;
}

// The end of the readable stack above sp, or 0 when it cannot be known cheaply: a thread that
// keeps switching stacks (fibers, an alternate signal stack) gets a few lookups, then the slow
// unwinder. The main thread's stack growing down is a new lookup that costs nothing of those.
uint64_t stack_top(uint64_t sp) {
  if (sp >= t_stack_lo && sp < t_stack_hi) return t_stack_hi;
  if (t_stack_lookups >= 16) return 0;
  ++t_stack_lookups;
  uint64_t lo, hi;
  if (!find_mapping(sp, lo, hi)) return 0;
  if (hi == t_stack_hi && lo < t_stack_lo) --t_stack_lookups;
  // A signal handler on this thread must never see the new lo with the old hi.
  t_stack_hi = 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_stack_lo = lo;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_stack_hi = hi;
  return hi;
}

// A stack slot, always inside [the walk's rsp, the top of its stack mapping]. Not checked by
// AddressSanitizer: a replay reads the slots a remembered walk read before it knows this walk's
// frames are there too (same_run compares afterwards), and such a slot may lie in a redzone
// that ASan put around a local of the frames now on the stack. Mapped memory all the same.
__attribute__((no_sanitize_address)) uint64_t load(uint64_t addr) {
  uint64_t v;
  __builtin_memcpy(&v, reinterpret_cast<const void*>(addr), sizeof v);
  return v;
}

struct Walk {
  uint64_t* out;
  unsigned max;
  unsigned n;
  uint64_t lo, hi;
  uint64_t stop_at;  // 0: none
  bool skipping;
  StopFunction stop_fn;
};

_Unwind_Reason_Code on_frame(_Unwind_Context* ctx, void* arg) {
  auto* w = static_cast<Walk*>(arg);
  const uint64_t ip = _Unwind_GetIP(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  if (w->skipping) {
    if (ip >= w->lo && ip < w->hi) return _URC_NO_REASON;
    w->skipping = false;
  }
  // The context's CFA is its callee's, this frame's stack pointer: the frame before this one
  // spanned up to it, so it held stop_at (as in unwind_fast).
  if (w->stop_at && w->stop_at < _Unwind_GetCFA(ctx)) return _URC_END_OF_STACK;
  w->out[w->n++] = ip;
  return w->n >= w->max || w->stop_fn.holds(ip) ? _URC_END_OF_STACK : _URC_NO_REASON;
}

}  // namespace

// The rules of this thread's recent walks, by stack position. A thread that records many events
// walks much the same stacks each time: the same code at the same stack addresses. A frame whose
// (stack pointer, key) is in a recent walk takes its rule from there, and same_run() below takes
// the frames after it whole while the stack still holds what that walk read. A rule depends on
// the key alone, so a match is always the right rule; the stack pointer only says where in that
// walk to look (a walk is ordered by it).
//
// Where to look: first the last two walks, through cursors that only move outward (a thread
// that alternates two kinds of event, an allocation and a free, finds this kind's inner frames in
// the walk before the last); then an index of every frame of the last kWalks walks by (stack
// pointer, key), which finds the walk that last passed through this frame at this address. A
// training step allocates from a few dozen call sites in turn, each a different chain of
// library frames under the same interpreter frames: the last two walks are other call sites,
// whose frames part from this one's a few frames up (on the H200 a PyTorch allocation replayed
// 8-10 of its 24-31 frames from them), while the index finds this call site's walk of the
// previous step wherever the chain parts from a recent one. A signal handler's walk on the same
// thread stays away from a walk it interrupted (ThreadSlots::Use).
//
// Not thread_local (97 KB): a pool of memos, one claimed per thread (thread_slots.h). A thread
// that finds none walks without a memo.
constexpr unsigned kMemoFrames = 64;  // a deeper walk keeps its first 64 frames
constexpr unsigned kWalks = 32;       // walks kept per thread (a step's call sites)
constexpr unsigned kIndexBits = 12;   // 4096 entries for up to 2048 frames
constexpr unsigned kMemos = 64;
// The thread's own rules by address, direct-mapped: 16 KB, the frames of about a thousand call
// sites. Rules hold for the whole process, so a memo taken over from a gone thread keeps them.
constexpr unsigned kThreadRuleBits = 10;
// One frame of a walk, where the walk stood and how it went on from there; 24 bytes, so a
// replay of a PyTorch allocation's 28 frames reads 11 lines of the memo. The frame's rbp is not
// kept: where a rule computes the CFA from it, the next frame's stack pointer says what it was.
struct MemoFrame {
  uint64_t sp;
  uint64_t key;
  uint64_t rule;
};
struct MemoWalk {
  unsigned n;    // frames kept; 0 while the walk is being written
  uint32_t gen;  // bumped when the slot is rewritten: index entries of the walk before go stale
  MemoFrame f[kMemoFrames];
};
static_assert(kWalks <= 256 && kMemoFrames <= 256, "an index entry holds both in a byte");
struct ThreadRule {
  uint64_t key;  // 0: empty (no frame has pc 0)
  uint64_t rule;
};
// The thread's last short walk that ended in its stop function (a PyTorch pool tensor's: from
// the recorder through libcudart to PyTorch's allocator, 8-9 frames), as the stack slots it read,
// each at its offset from the walk's first stack pointer. A walk from the same pc meets the same
// frames when each of those slots holds what it held: frame 0's pc fixes its rule, its rule and
// CFA fix where its return address lies, that address is frame 1's pc and fixes its rule, and so
// on, where a CFA computed from rbp must also be where it was (rbp as the walk restores it), the
// induction same_run() makes with the memo's stack pointers. Checked before the memo is set up
// for a walk: independent loads from the stack's hot lines and this struct's four lines (the
// first next to the slot's busy flag), where the memo's way touched the next walk's, the index's
// and the last walks' lines, about ten that a training step evicts between two allocations
// (docs/performance.md, "The CFI unwinder's caches").
constexpr unsigned kShortFrames = 12;
struct ShortFrame {
  uint64_t ra;       // the return address read at cfa + ra_off: the next frame's pc
  uint16_t cfa_rel;  // the frame's CFA - the walk's first stack pointer
  int8_t ra_off;
  uint8_t flags;    // kCfaFromRbp, kRbpSaved
  int16_t rbp_off;  // where the caller's rbp is saved, from the CFA (kRbpSaved)
  int16_t cfa_off;  // the rule's offset from rbp (kCfaFromRbp)
};
constexpr uint8_t kCfaFromRbp = 1, kRbpSaved = 2;
struct ShortWalk {
  uint64_t start_pc;  // 0: none
  uint64_t stop_lo, stop_len, skip_lo, skip_hi;
  uint16_t frames;     // frames walked: return addresses checked
  uint16_t out_n;      // the walk's frames kept: the last out_n of (start pc, f[].ra)
  uint16_t max_depth;  // the depth it was walked with
  uint16_t top_rel;    // the last CFA: at most the stack's end, and below stop_at
  ShortFrame f[kShortFrames];
};
struct FrameMemo {
  ShortWalk short_walk;  // first: in the line of the slot's busy flag
  unsigned last;         // index of the last complete walk
  MemoWalk walks[kWalks];
  // (stack pointer, key) -> where the last walk through that frame holds it: the walk's gen
  // (32 bits), its slot (8), the frame's index in it (8), and 16 bits of the hash, which spare
  // a load of the walk when another frame owns the entry. Checked against the walk itself.
  uint64_t index[1u << kIndexBits];
  ThreadRule rules[1u << kThreadRuleBits];

  // The walks of a gone owner are at its stack's addresses; their index entries stay valid only
  // while a walk's gen matches, and n = 0 matches none.
  void claimed() noexcept {
    for (MemoWalk& w : walks) w.n = 0;
    last = 0;
    short_walk.start_pc = 0;
  }
};
constinit ThreadSlots<FrameMemo, kMemos> g_memos;

inline uint64_t index_hash(uint64_t sp, uint64_t key) noexcept {
  return (sp * 0x9E3779B97F4A7C15ull) ^ (key * 0xC2B2AE3D27D4EB4Full);
}

// Claims the memo for one walk (none when a walk of this thread is in progress below us).
struct MemoUse {
  // A walk to take rules and replays from, and where in it the last match was.
  struct Source {
    const MemoWalk* walk = nullptr;
    unsigned cursor = 0;

    bool find(uint64_t sp, uint64_t key, uint64_t& rule) noexcept {
      while (cursor < walk->n && walk->f[cursor].sp < sp) ++cursor;
      if (cursor >= walk->n || walk->f[cursor].sp != sp || walk->f[cursor].key != key) {
        return false;
      }
      rule = walk->f[cursor].rule;
      return true;
    }
  };
  ThreadSlots<FrameMemo, kMemos>::Use use;
  FrameMemo* m;
  Source last, before, found;  // found: the walk the index gave last, if any
  MemoWalk* next = nullptr;
  unsigned next_slot = 0;
  unsigned written = 0;

  MemoUse() noexcept : use(g_memos), m(use.get()) {}
  // Sets up the walk's sources and the slot it is written to; before find() and note().
  void begin() noexcept {
    if (!m) return;
    last.walk = &m->walks[m->last];
    before.walk = &m->walks[(m->last + kWalks - 1) % kWalks];
    next_slot = (m->last + 1) % kWalks;
    next = &m->walks[next_slot];
    next->n = 0;
    ++next->gen;
  }
  MemoUse(const MemoUse&) = delete;
  MemoUse& operator=(const MemoUse&) = delete;

  // The source whose frame matched, for same_run(); null when none did.
  Source* find(uint64_t sp, uint64_t key, uint64_t& rule) noexcept {
    if (!m) return nullptr;
    // Where a miss of the recent walks looks next: the index entry, then, for a frame to walk,
    // the thread's rule for the address. Each is a line that a training step has usually
    // evicted between two allocations (perf on the H200, autograd's thread: 44% of find's
    // samples on the index load, 10% of the walk's on the rule table's), so both fetches start
    // here, under the scans of the last two walks.
    const uint64_t h = index_hash(sp, key);
    const uint64_t* const entry = &m->index[h >> (64 - kIndexBits)];
    __builtin_prefetch(entry);
    __builtin_prefetch(rule_slot(key));
    if (last.find(sp, key, rule)) return &last;
    if (before.find(sp, key, rule)) return &before;
    if (found.walk && found.find(sp, key, rule)) return &found;
    const uint64_t e = *entry;
    if ((e & 0xffff) != (h & 0xffff)) return nullptr;
    const MemoWalk& w = m->walks[(e >> 24) & 0xff];
    const unsigned j = (e >> 16) & 0xff;
    // n is 0 for the walk being written, so an entry of this walk never matches.
    if (w.gen != static_cast<uint32_t>(e >> 32) || j >= w.n || w.f[j].sp != sp ||
        w.f[j].key != key) {
      return nullptr;
    }
    found.walk = &w;
    found.cursor = j;
    rule = w.f[j].rule;
    return &found;
  }
  // The thread's table of rules by address.
  ThreadRule* rule_slot(uint64_t key) noexcept {
    return &m->rules[(key * 0x9E3779B97F4A7C15ull) >> (64 - kThreadRuleBits)];
  }
  bool table_get(uint64_t key, uint64_t& rule) noexcept {
    if (!m) return false;
    const ThreadRule* e = rule_slot(key);
    if (e->key != key) return false;
    rule = e->rule;
    return true;
  }
  void table_put(uint64_t key, uint64_t rule) noexcept {
    if (!m) return;
    ThreadRule* e = rule_slot(key);
    e->key = key;
    e->rule = rule;
  }
  // Every frame goes into the walk; the index gets the frames where a lookup happened (walked
  // ones, and the first of each replayed run), not the replayed ones: a store to a random line
  // of the index per frame cost more than the replay saved once a step had evicted it
  // (BM_sites_evicted). A walk that repeats one from the index enters its own start there, so
  // the next round finds it; the frames it replayed are found through their first.
  void note(uint64_t sp, uint64_t key, uint64_t rule, bool index_it = true) noexcept {
    if (!m || written >= kMemoFrames) return;
    next->f[written] = MemoFrame{sp, key, rule};
    if (index_it) {
      const uint64_t h = index_hash(sp, key);
      m->index[h >> (64 - kIndexBits)] = (uint64_t{next->gen} << 32) | (uint64_t{next_slot} << 24) |
                                         (uint64_t{written} << 16) | (h & 0xffff);
    }
    ++written;
  }
  // The walk just kept (keep()) ended in the stop function, at the frame whose stack pointer is
  // `stop_sp`, with `out`'s n frames: it becomes the thread's short walk when it is one.
  void remember_short(uint64_t sp0, uint64_t stop_sp, const uint64_t* out, unsigned n,
                      unsigned max_depth, uint64_t skip_lo, uint64_t skip_hi,
                      const StopFunction& stop_fn) noexcept {
    if (!m || written == 0 || written > kShortFrames || n == 0 || n > written + 1) return;
    if (stop_sp < sp0 || stop_sp - sp0 > 0x7fff) return;
    const MemoWalk& w = *next;
    ShortFrame f[kShortFrames];
    for (unsigned i = 0; i < written; ++i) {
      const uint64_t rule = w.f[i].rule;
      if (rule_kind(rule) != kFrame) return;
      const uint64_t cfa = i + 1 < written ? w.f[i + 1].sp : stop_sp;
      const bool from_rbp = cfa_from_rbp(rule);
      if (!from_rbp && w.f[i].sp + static_cast<uint64_t>(cfa_offset(rule)) != cfa) return;
      if (cfa_offset(rule) != static_cast<int16_t>(cfa_offset(rule))) return;
      f[i] = ShortFrame{
          i + 1 < written ? w.f[i + 1].key : out[n - 1],
          static_cast<uint16_t>(cfa - sp0),
          static_cast<int8_t>(ra_offset(rule)),
          static_cast<uint8_t>((from_rbp ? kCfaFromRbp : 0) | (rbp_saved(rule) ? kRbpSaved : 0)),
          static_cast<int16_t>(rbp_offset(rule)),
          static_cast<int16_t>(cfa_offset(rule))};
    }
    // The frames it reported are the last n of (its first pc, the return addresses).
    for (unsigned i = 0; i < n; ++i) {
      const unsigned at = written + 1 - n + i;
      if (out[i] != (at == 0 ? w.f[0].key & ~kExactBit : f[at - 1].ra)) return;
    }
    ShortWalk& s = m->short_walk;
    s.start_pc = 0;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    s.stop_lo = stop_fn.lo;
    s.stop_len = stop_fn.len;
    s.skip_lo = skip_lo;
    s.skip_hi = skip_hi;
    s.frames = static_cast<uint16_t>(written);
    s.out_n = static_cast<uint16_t>(n);
    s.max_depth = static_cast<uint16_t>(max_depth);
    s.top_rel = static_cast<uint16_t>(stop_sp - sp0);
    for (unsigned i = 0; i < written; ++i) s.f[i] = f[i];
    std::atomic_signal_fence(std::memory_order_seq_cst);
    s.start_pc = w.f[0].key;
  }
  // The thread's short walk again, when a walk from (key, sp0, fp0) with these parameters would
  // meet it: its frames into `out`; -1 when not. Every address read comes from the struct, never
  // from a slot read before it, and what was read is compared afterwards (as same_run()).
  int replay_short(uint64_t key, uint64_t sp0, uint64_t fp0, uint64_t top, uint64_t stop_at,
                   uint64_t* out, unsigned max_depth, uint64_t skip_lo, uint64_t skip_hi,
                   const StopFunction& stop_fn) noexcept {
    if (!m) return -1;
    const ShortWalk& s = m->short_walk;
    if (s.start_pc != key || s.stop_lo != stop_fn.lo || s.stop_len != stop_fn.len ||
        s.skip_lo != skip_lo || s.skip_hi != skip_hi || s.max_depth != max_depth ||
        sp0 + s.top_rel > top || sp0 + s.top_rel > stop_at) {
      return -1;
    }
    const unsigned frames = s.frames;
    uint64_t fp = fp0;
    bool same = true;
    for (unsigned i = 0; i < frames; ++i) {
      const ShortFrame& f = s.f[i];
      const uint64_t cfa = sp0 + f.cfa_rel;
      if (f.flags & kCfaFromRbp) same &= fp + static_cast<uint64_t>(int64_t{f.cfa_off}) == cfa;
      if (f.flags & kRbpSaved) fp = load(cfa + static_cast<uint64_t>(int64_t{f.rbp_off}));
      same &= load(cfa + static_cast<uint64_t>(int64_t{f.ra_off})) == f.ra;
    }
    if (!same) return -1;
    const unsigned n = s.out_n;
    for (unsigned i = 0; i < n; ++i) {
      const unsigned at = frames + 1 - n + i;
      out[i] = at == 0 ? key & ~kExactBit : s.f[at - 1].ra;
    }
    return static_cast<int>(n);
  }
  // The walk ended normally: it becomes the last one.
  void keep() noexcept {
    if (!m) return;
    next->n = written;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    m->last = next_slot;
  }
};

// How far a walk repeats `w` from its frame j on, when it stands where w stood at j (same stack
// pointer and key) with rbp = `fp`: the last frame k >= j such that every slot w read between j
// and k holds what w read there, except the caller's rbp where a rule restores it, which need
// only be the same where a later rule computes its CFA from it (code built without frame
// pointers saves rbp as an ordinary register: it holds a different pointer at every call). A
// walk is a function of its registers at a frame and of the slots it reads from there, so this
// walk would meet w's frames j+1..k exactly; `fp` becomes rbp at frame k.
//
// Every read's address comes from the memo (the next frame's stack pointer), never from a slot
// read before it, and what was read is compared afterwards: the reads overlap in the core. Where
// a frame's CFA is rbp-based, computing the next addresses from the rbp just loaded made each
// frame wait for the previous one's load, a chain of misses once a training step has evicted
// the stack's outer lines (BM_fast_evicted in bench/bench_stack_capture.cpp); the comparison of
// the CFA with the memo's stack pointer checks that rbp all the same.
unsigned same_run(const MemoWalk& w, unsigned j, uint64_t& fp, uint64_t floor, uint64_t top) {
  unsigned k = j;
  for (; k + 1 < w.n; ++k) {
    const MemoFrame& at = w.f[k];
    const MemoFrame& next = w.f[k + 1];
    const uint64_t rule = at.rule;
    if (rule_kind(rule) != kFrame) break;
    const uint64_t cfa = next.sp;  // what this frame's rule must compute, checked below
    if (cfa <= at.sp || cfa > top) break;
    const uint64_t ra_at = cfa + static_cast<uint64_t>(ra_offset(rule));
    if (ra_at < floor || ra_at > top - 8) break;
    const uint64_t ra = load(ra_at);
    uint64_t caller_fp = fp;
    if (rbp_saved(rule)) {
      const uint64_t fp_at = cfa + static_cast<uint64_t>(rbp_offset(rule));
      if (fp_at < floor || fp_at > top - 8) break;
      caller_fp = load(fp_at);
    }
    if ((cfa_from_rbp(rule) ? fp : at.sp) + static_cast<uint64_t>(cfa_offset(rule)) != cfa ||
        ra != next.key) {
      break;
    }
    fp = caller_fp;
  }
  return k;
}

// The rule of the frame at `pc` (its memo key `key`) that the thread's memo did not replay: from
// the thread's table, the process's cache, or computed from the CFI (then kept in both), when
// `first_seen` is given noting a frame the unwinder meets for the first time.
__attribute__((always_inline)) inline uint64_t rule_of(MemoUse& memo, uint64_t key, uint64_t pc,
                                                       FirstSeen* first_seen) noexcept {
  uint64_t rule;
  if (memo.table_get(key, rule)) {
    ++t_hits;
  } else if (cache_get(key, rule)) {
    ++t_hits;
    memo.table_put(key, rule);
  } else {
    ++t_misses;
    rule = compute_rule((key & kExactBit) ? pc : pc - 1);
    cache_put(key, rule);
    memo.table_put(key, rule);
    if (first_seen) first_seen->add(pc);
  }
  return rule;
}

// unwind_fast_from's walk, compiled without the stop function's check per frame where none is
// set (kStopFn false): a replayed frame costs a few instructions, and the check would add three.
template <bool kStopFn>
__attribute__((noinline)) int walk_fast(const WalkStart& start, uint64_t* out, unsigned max_depth,
                                        uint64_t skip_lo, uint64_t skip_hi, FirstSeen* first_seen,
                                        uint64_t stop_at, StopFunction stop_fn) noexcept {
  if (max_depth == 0) return 0;
  uint64_t pc = start.pc, sp = start.sp, fp = start.fp;
  const uint64_t top = stack_top(sp);
  if (top < sp + 16) {
    note_fallback(0);
    return kFallback;
  }
  const uint64_t floor = sp;
  // A stop address outside this stack stops nothing.
  if (stop_at <= floor || stop_at >= top) stop_at = UINT64_MAX;
  unsigned n = 0;
  bool skipping = true;
  uint64_t key = pc | kExactBit;
  MemoUse memo;
  if constexpr (kStopFn) {
    const int got =
        memo.replay_short(key, sp, fp, top, stop_at, out, max_depth, skip_lo, skip_hi, stop_fn);
    if (got > 0) {
      ++t_short_walks;
      t_hits += static_cast<unsigned>(got);
      t_memo_hits += static_cast<unsigned>(got);
      t_replayed += static_cast<unsigned>(got);
      // As the walk below: the last frame's rule was never looked up.
      if (first_seen) first_seen->add(out[got - 1]);
      return got;
    }
  }
  memo.begin();
  uint64_t stopped_at = 0;  // the stack pointer of the stop function's frame that ended the walk
  for (;;) {
    // The frame before this one spanned [its stack pointer, this sp): it held stop_at.
    if (pc == 0 || sp > stop_at) break;
    if (!skipping || pc < skip_lo || pc >= skip_hi) {
      skipping = false;
      out[n++] = pc;
      // The last frame's rule is never looked up: it may be in a module not yet announced.
      if (n >= max_depth || (kStopFn && stop_fn.holds(pc))) {
        if (first_seen) first_seen->add(pc);
        if (kStopFn && stop_fn.holds(pc)) stopped_at = sp;
        break;
      }
    }
    uint64_t rule;
    if (MemoUse::Source* src = memo.find(sp, key, rule)) {
      ++t_hits;
      ++t_memo_hits;
      const MemoWalk& w = *src->walk;
      const unsigned j = src->cursor;
      uint64_t fp_k = fp;
      const unsigned k = same_run(w, j, fp_k, floor, top);
      if (k > j) {
        // Frames j+1..k as the loop would meet them, each checked against stop_at, the skipped
        // range and max_depth as above, with the rule of the last one to go on from. The
        // skipped frames (the recorder's own, five or six of them) are replayed too: one by
        // one they cost a lookup each, most of a PyTorch block event's lookups.
        memo.note(sp, key, rule);
        bool done = false;
        for (unsigned i = j + 1; i <= k; ++i) {
          if (w.f[i].sp > stop_at) {
            done = true;
            break;
          }
          const uint64_t pc_i = w.f[i].key;
          if (!skipping || pc_i < skip_lo || pc_i >= skip_hi) {
            skipping = false;
            out[n++] = pc_i;
            if (n >= max_depth || (kStopFn && stop_fn.holds(pc_i))) {
              if (first_seen) first_seen->add(pc_i);
              if (kStopFn && stop_fn.holds(pc_i)) stopped_at = w.f[i].sp;
              done = true;
              break;
            }
          }
          ++t_hits;
          ++t_memo_hits;
          ++t_replayed;
          if (i < k) memo.note(w.f[i].sp, pc_i, w.f[i].rule, false);
        }
        if (done) break;
        src->cursor = k;
        sp = w.f[k].sp;
        fp = fp_k;
        key = pc = w.f[k].key;
        rule = w.f[k].rule;
      }
    } else {
      rule = rule_of(memo, key, pc, !skipping ? first_seen : nullptr);
    }
    memo.note(sp, key, rule);
    const uint64_t kind = rule_kind(rule);
    if (kind == kOutermost) break;
    if (kind != kFrame) {
      note_fallback(pc);
      return kFallback;
    }
    const uint64_t cfa = (cfa_from_rbp(rule) ? fp : sp) + static_cast<uint64_t>(cfa_offset(rule));
    if (cfa <= sp || cfa > top) break;
    const uint64_t ra_at = cfa + static_cast<uint64_t>(ra_offset(rule));
    if (ra_at < floor || ra_at > top - 8) break;
    if (rbp_saved(rule)) {
      const uint64_t fp_at = cfa + static_cast<uint64_t>(rbp_offset(rule));
      if (fp_at < floor || fp_at > top - 8) break;
      fp = load(fp_at);
    }
    pc = load(ra_at);
    sp = cfa;
    key = pc;
  }
  memo.keep();
  if (stopped_at) {
    memo.remember_short(floor, stopped_at, out, n, max_depth, skip_lo, skip_hi, stop_fn);
  }
  return static_cast<int>(n);
}

int unwind_fast_from(const WalkStart& start, uint64_t* out, unsigned max_depth, uint64_t skip_lo,
                     uint64_t skip_hi, FirstSeen* first_seen, uint64_t stop_at,
                     const CodeRange* stop_in) noexcept {
  const StopFunction stop_fn = StopFunction::of(stop_in);
  return stop_fn.len ? walk_fast<true>(start, out, max_depth, skip_lo, skip_hi, first_seen, stop_at,
                                       stop_fn)
                     : walk_fast<false>(start, out, max_depth, skip_lo, skip_hi, first_seen,
                                        stop_at, stop_fn);
}

// Its own frame stays below the walk's start: `here` is passed by address, so no tail call.
__attribute__((noinline)) int unwind_fast(uint64_t* out, unsigned max_depth, uint64_t skip_lo,
                                          uint64_t skip_hi, FirstSeen* first_seen, uint64_t stop_at,
                                          const CodeRange* stop_in) noexcept {
  const WalkStart here = walk_start_here();
  return unwind_fast_from(here, out, max_depth, skip_lo, skip_hi, first_seen, stop_at, stop_in);
}

__attribute__((noinline)) int unwind_slow(uint64_t* out, unsigned max_depth, uint64_t skip_lo,
                                          uint64_t skip_hi, FirstSeen* first_seen, uint64_t stop_at,
                                          const CodeRange* stop_in) noexcept {
  if (first_seen) first_seen->all = true;
  if (max_depth == 0) return 0;
  if (stop_at) {  // as in unwind_fast: an address outside this stack stops nothing
    const auto sp = reinterpret_cast<uint64_t>(__builtin_frame_address(0));
    if (stop_at <= sp || stop_at >= stack_top(sp)) stop_at = 0;
  }
  Walk w{out, max_depth, 0, skip_lo, skip_hi, stop_at, true, StopFunction::of(stop_in)};
  _Unwind_Backtrace(on_frame, &w);
  return static_cast<int>(w.n);
}

void set_stop_function(uint64_t lo, uint64_t hi) noexcept {
  g_stop_fn_len.store(0, std::memory_order_release);
  if (hi <= lo) return;
  g_stop_fn_lo.store(lo, std::memory_order_relaxed);
  g_stop_fn_len.store(hi - lo, std::memory_order_release);
}

bool in_stop_function(uint64_t pc) noexcept {
  const StopFunction s = StopFunction::current();
  return s.len && s.holds(pc);
}

void memo_after_fork() noexcept {
  g_memos.after_fork();
}

CacheStats thread_cache_stats() noexcept {
  return CacheStats{t_hits, t_misses, t_fallbacks, t_memo_hits, t_replayed, t_short_walks};
}

FallbackStats fallback_stats() noexcept {
  FallbackStats f{g_fallback_stacks.load(std::memory_order_relaxed), {}};
  for (int i = 0; i < 4; ++i) {
    const uint64_t v = g_fallback_pcs[i].load(std::memory_order_relaxed);
    f.pcs[i] = v ? v - 1 : UINT64_MAX;
  }
  return f;
}

}  // namespace cumemtrace::preload::cfi
