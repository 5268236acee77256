#include "stacks/python_stack.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <initializer_list>

#include "core/config.h"
#include "core/emitter.h"
#include "core/log.h"
#include "driver/real_driver.h"
#include "stacks/cpython_layout.h"
#include "stacks/python_memory.h"
#include "stacks/thread_slots.h"

namespace cumemtrace::preload {

namespace {

// The reads of CPython's memory this reader is made of (python_memory.h).
using pymem::fetch;
using pymem::field;
using pymem::g_raw;
using pymem::g_raw_on;
using pymem::plausible_object;
using pymem::raw_off;
using pymem::read_str;
using pymem::str_key;
using pymem::view;

// The subset of CPython's C API used by the GIL-held path and the probation check; all present
// with these signatures in 3.9 to 3.14 except PyGC_Disable/PyGC_Enable (3.10+), without which
// the GIL-held path is unavailable.
struct PyApi {
  int (*is_initialized)();
  int (*gil_check)();
  void* (*eval_get_frame)();       // borrowed PyFrameObject*
  void* (*frame_get_code)(void*);  // new reference
  void* (*frame_get_back)(void*);  // new reference or NULL
  int (*frame_get_line)(void*);
  void (*decref)(void*);
  void (*incref)(void*);
  void* (*get_attr)(void*, const char*);  // new reference
  const char* (*utf8)(void*, long*);
  int (*gc_disable)();
  int (*gc_enable)();
};

enum : int { kUnknown = 0, kResolving = 1, kAvailable = 2, kAbsent = 3 };
std::atomic<int> g_state{kUnknown};
PyApi g_api;
bool g_api_gc = false;                // PyGC_Disable/Enable present: the GIL-held path is available
const char* g_name_attr = "co_name";  // the GIL-held path's name: co_qualname where it exists

// Frames still to be read through process_vm_readv before plain loads are trusted: enough to
// have checked the layout on real frames of this process (a few captures).
constexpr int kProbationFrames = 64;
std::atomic<int> g_probation{kProbationFrames};

// Frames walked per capture at most (skipped shim and incomplete frames included).
constexpr unsigned kMaxHops = 256;
// Bytes of a frame and of a code object read at most (the spans of every supported layout).
constexpr unsigned kMaxFrameSpan = 256, kMaxCodeSpan = 512;

// Announced code objects: code address -> signature of the (file, name) last announced for it.
// Open addressing, lock-free: a slot is claimed once by CAS on `code`; `sig` is stored after
// the announcement was published (release), so a thread that loads the same sig (acquire)
// reserves its record's ticket after the announcement's. Concurrent writers of one slot write
// the same value: two code objects that share an address never live at the same time, and a
// thread is inside the hook only while the code objects of its frames live.
struct SeenSlot {
  std::atomic<uint64_t> code;
  std::atomic<uint64_t> sig;
};
constexpr unsigned kSeenSlots = 1 << 16;
SeenSlot g_seen[kSeenSlots];
// Line numbers already computed. PyCode_Addr2Line scans the code's line table from its start
// (3.11+: _PyCode_CheckLineNumber): microseconds for a long function such as torch's
// Module._call_impl, at every frame of every event. perf on a 22-frame Python stack put it at
// 46% of the process and 40 us an event. A training loop asks the same questions every step,
// so the answer is kept per (code object, instruction). One 64-bit word per slot (40 bits of
// tag, 24 of line + 1): a read is never torn, a writer never waits, a lost race only costs a
// recomputation. The key is what the line depends on: the code's address, file and name (sig),
// length, first line and line table object. A code object built at a freed one's address
// (exec in a loop) hits only if all of these are the same.
constexpr unsigned kLineBits = 16;
std::atomic<uint64_t> g_lines[1u << kLineBits];
constexpr uint64_t kLineMask = (uint64_t{1} << 24) - 1;

uint64_t line_key(uint64_t code, uint64_t sig, int64_t units, int32_t firstlineno,
                  uint64_t linetable, int64_t addrq) noexcept {
  uint64_t h = (code ^ (sig * 0x9E3779B97F4A7C15ull) ^ (linetable << 17)) * 0xFF51AFD7ED558CCDull;
  h ^= h >> 31;
  h = (h ^ (static_cast<uint64_t>(units) << 32 | static_cast<uint32_t>(addrq))) *
      0xC4CEB9FE1A85EC53ull;
  h ^= h >> 29;
  h = (h ^ static_cast<uint32_t>(firstlineno)) * 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 32);
}

// The line of `addrq` in `code`: from the cache, else from the interpreter (then kept).
int line_of(uintptr_t code, uint64_t key, int64_t addrq) noexcept {
  std::atomic<uint64_t>& slot = g_lines[key >> (64 - kLineBits)];
  const uint64_t tag = (key & ~kLineMask) | (uint64_t{1} << 24);  // never 0: 0 is empty
  const uint64_t v = slot.load(std::memory_order_relaxed);
  if ((v & ~kLineMask) == tag) return static_cast<int>(v & kLineMask) - 1;
  const int line = g_raw.addr2line(reinterpret_cast<void*>(code), static_cast<int>(addrq));
  if (line >= -1 && static_cast<uint64_t>(line) + 1 < kLineMask) {
    slot.store(tag | (static_cast<uint64_t>(line) + 1), std::memory_order_relaxed);
  }
  return line;
}

// Bumped after every announcement (and at fork): entries of the threads' memos found before it
// are stale, since the announcement may have named another code object at a reused address.
std::atomic<uint64_t> g_announce_gen{1};

// Each thread's memo of the frames it read. A training loop asks the same questions at every
// step (the same code objects at the same instructions), and their answers (announced, line)
// came from four lines that nothing else touches between two events: the heads of the file
// and function name strs, the shared announce table and the shared line cache; a step evicts
// them (about 100 ns a frame on the H200). An entry keeps the answer under everything it
// depends on that the reader has in hand from the code object anyway: the code's address, its
// file and name objects, length, first line and line table object, and the instruction. A
// code object rebuilt at a freed one's address misses unless all of those are equal (its
// names objects at their old addresses too); one announced since the entry was made (its gen)
// makes every entry stale. A signal handler's capture stays away from one it interrupted (an
// entry is several words: ThreadSlots::Use).
struct PyMemoEntry {
  uint64_t code, filename, name, linetable;
  int64_t units, addrq;
  int32_t firstlineno, line;
  uint64_t gen;  // g_announce_gen when the answer was found; 0: empty
};
constexpr unsigned kPyMemoBits = 9;  // 512 entries, 32 KB: a model's frames and their lines

// Where CPython tells us of every code object it frees (3.12+ code watchers, registered by our
// sitecustomize: cumemtrace_python_code_watcher), a code object at an address is the one an
// answer was found for until g_code_gen moves, so a frame's answer needs no read of its code
// object at all: the frame's (code, instruction pointer) finds it. That leaves one line a
// frame, its own, where the checked memo above reads three of the code object's and one of
// its own, lines a training step evicts between two allocations (docs/performance.md, "Python
// frames read without the GIL"). Kept by the frame's address, so the frames of one capture,
// adjacent on the interpreter's data stack, have their answers in adjacent lines.
std::atomic<uint64_t> g_code_gen{1};    // bumped when a code object is freed, and at a reset
constexpr int kPyCodeEventDestroy = 1;  // PyCodeEvent's PY_CODE_EVENT_DESTROY (3.12 to 3.14)
std::atomic<bool> g_code_watched{false};
struct FrameAnswer {
  uint64_t code, instr;
  uint64_t gen;  // g_code_gen when found; 0: empty
  int64_t line;
};
constexpr unsigned kFrameAnswerBits = 8;  // 256 entries, 8 KB: frames 64 bytes apart or more
struct PyMemo {
  PyMemoEntry entries[1u << kPyMemoBits];
  FrameAnswer frames[1u << kFrameAnswerBits];
  // Entries hold process-wide answers, so a memo taken over from a gone thread keeps them.
  void claimed() noexcept {}
};
constexpr unsigned kPyMemos = 64;
constinit ThreadSlots<PyMemo, kPyMemos> g_py_memos;
thread_local constinit uint64_t t_py_memo_hits __attribute__((tls_model("initial-exec"))) = 0;
thread_local constinit uint64_t t_py_watched_hits __attribute__((tls_model("initial-exec"))) = 0;

// The calling thread's memo for one capture: none while the layout is on probation (every
// frame is then checked the long way) or inside a capture it interrupted.
struct PyMemoUse {
  ThreadSlots<PyMemo, kPyMemos>::Use use;
  PyMemo* m;
  uint64_t gen = 0;
  uint64_t code_gen = 0;  // 0: code objects are not watched

  explicit PyMemoUse(bool checked) noexcept : use(g_py_memos), m(checked ? nullptr : use.get()) {
    if (!m) return;
    gen = g_announce_gen.load(std::memory_order_acquire);
    if (g_code_watched.load(std::memory_order_acquire)) {
      code_gen = g_code_gen.load(std::memory_order_acquire);
    }
  }

  // The answer slot of the frame at `frame`; null without a watcher.
  FrameAnswer* frame_answer(uintptr_t frame) noexcept {
    if (code_gen == 0) return nullptr;
    return &m->frames[(frame >> 6) & ((1u << kFrameAnswerBits) - 1)];
  }

  PyMemoEntry* entry(uint64_t code, int64_t addrq) noexcept {
    if (!m) return nullptr;
    const uint64_t h =
        (code ^ static_cast<uint64_t>(addrq) * 0xC2B2AE3D27D4EB4Full) * 0x9E3779B97F4A7C15ull;
    return &m->entries[h >> (64 - kPyMemoBits)];
  }
};

// torch.nn.Module._wrapped_call_impl's code object (0: not told); a frame of it carries its module.
std::atomic<uint64_t> g_module_code{0};

// The line word of the frame at `frame` running `code` at `line`: a module call's carries the
// module (`self`, its first local) when the layout says where locals are; other frames' is the
// line. The local is read on its own (not with the frame's header): a frame of other code may
// have no local slot to read.
__attribute__((always_inline)) inline uint64_t line_word(uintptr_t frame, uintptr_t code,
                                                         int64_t line, uint64_t module_code,
                                                         bool checked) noexcept {
  const CpythonLayout& L = g_raw.layout;
  if (code != module_code || module_code == 0 || L.frame_localsplus == kNoField) {
    return static_cast<uint64_t>(line);
  }
  uintptr_t self = 0;
  if (!fetch(&self, frame + L.frame_localsplus, sizeof self, checked)) {
    return static_cast<uint64_t>(line);
  }
  if (L.executable_tagged) self &= ~uintptr_t{3};  // 3.14: locals are tagged _PyStackRefs too
  if (self == 0 || (self & ~wire::kPyModulePointerMask) != 0 || (self & 7) != 0) {
    return static_cast<uint64_t>(line);
  }
  const uint64_t l = line < 0 ? 0 : std::min(static_cast<uint64_t>(line), wire::kPyModuleLineMax);
  return wire::kPyModuleTag | l << wire::kPyModuleLineShift | self;
}

// The GIL-held path's signature: the code object is kept alive by our reference, so its
// address is never reused. Raw signatures are odd, so they never equal it.
constexpr uint64_t kPinned = 2;

unsigned span(std::initializer_list<unsigned> ends) noexcept {
  unsigned m = 0;
  for (unsigned e : ends) m = e > m ? e : m;
  return m;
}

// The running interpreter's version: Py_Version (3.11+), else parsed from Py_GetVersion().
unsigned long python_version(void* (*get)(const char*)) noexcept {
  if (const auto* v = static_cast<const unsigned long*>(get("Py_Version"))) return *v;
  const auto text = reinterpret_cast<const char* (*)()>(get("Py_GetVersion"));
  return text ? parse_python_version(text()) : 0;
}

// Finds the interpreter's layout; false (after one line) for an interpreter whose frames this
// reader must not guess: an unknown version or a free-threaded build.
bool resolve_layout(void* (*get)(const char*)) noexcept {
  const unsigned long version = python_version(get);
  CpythonLayout& L = g_raw.layout;
  switch (cpython_layout(version, get("_PyRuntime"), &L)) {
    case LayoutVerdict::kKnown:
      break;
    case LayoutVerdict::kFreeThreaded:
      print_line("no Python frames: free-threaded CPython builds are not supported");
      return false;
    case LayoutVerdict::kBadDebugOffsets:
      print_line("no Python frames: this CPython's _Py_DebugOffsets are missing or unexpected");
      return false;
    case LayoutVerdict::kUnknownVersion: {
      // "3.15 (supported: 3.9 to 3.14 releases)", without snprintf (no locale, no heap).
      char v[64] = "of unknown version";
      if (version) {
        char* p = v;
        const unsigned parts[2] = {static_cast<unsigned>(version >> 24 & 0xff),
                                   static_cast<unsigned>(version >> 16 & 0xff)};
        for (int i = 0; i < 2; ++i) {
          if (i) *p++ = '.';
          if (parts[i] >= 100) *p++ = static_cast<char>('0' + parts[i] / 100);
          if (parts[i] >= 10) *p++ = static_cast<char>('0' + parts[i] / 10 % 10);
          *p++ = static_cast<char>('0' + parts[i] % 10);
        }
        const char* tail = (version >> 4 & 0xf) < 0xc ? " pre-release" : "";
        while (*tail) *p++ = *tail++;
        *p = '\0';
      }
      std::strncat(v, " (supported: 3.9 to 3.14 releases)", sizeof v - std::strlen(v) - 1);
      print_line("no Python frames: unsupported CPython ", v);
      return false;
    }
  }
  const bool object_frames = L.model == FrameModel::kFrameObject;
  g_raw.frame_span =
      span({L.frame_code + 8u, L.frame_previous + 8u, L.frame_instr + (object_frames ? 4u : 8u),
            L.frame_owner == kNoField ? 0u : L.frame_owner + 1u});
  g_raw.code_span = span({kObSize + 8u, L.code_filename + 8u, L.code_name + 8u,
                          L.code_firsttraceable == kNoField ? 0u : L.code_firsttraceable + 4u,
                          L.code_firstlineno + 4u, L.code_linetable + 8u,
                          object_frames ? L.code_bytecode + 8u : L.code_bytecode});
  if (g_raw.frame_span > kMaxFrameSpan || g_raw.code_span > kMaxCodeSpan) {
    print_line("no Python frames: this CPython's frame or code layout is larger than expected");
    return false;
  }
  g_name_attr = L.minor >= 11 ? "co_qualname" : "co_name";
  return true;
}

bool resolve() noexcept {
  DlsymFn dl = real_dlsym();
  if (!dl) return false;
  static DlsymFn s_dl;
  s_dl = dl;
  auto get = [](const char* name) { return s_dl(RTLD_DEFAULT, name); };
  void* p[12] = {get("Py_IsInitialized"),
                 get("PyGILState_Check"),
                 get("PyEval_GetFrame"),
                 get("PyFrame_GetCode"),
                 get("PyFrame_GetBack"),
                 get("PyFrame_GetLineNumber"),
                 get("Py_DecRef"),
                 get("Py_IncRef"),
                 get("PyObject_GetAttrString"),
                 get("PyUnicode_AsUTF8AndSize"),
                 get("PyGC_Disable"),
                 get("PyGC_Enable")};
  if (!p[0]) return false;  // no CPython in this process
  if (!resolve_layout(get)) return false;
  for (int i = 1; i < 10; ++i) {
    if (!p[i]) return false;  // not a full CPython (versions without a layout stop above)
  }
  static_assert(sizeof(PyApi) == sizeof p);
  std::memcpy(&g_api, p, sizeof p);
  g_api_gc = p[10] && p[11];

  g_raw.code_type = reinterpret_cast<uintptr_t>(get("PyCode_Type"));
  g_raw.str_type = reinterpret_cast<uintptr_t>(get("PyUnicode_Type"));
  g_raw.frame_type = reinterpret_cast<uintptr_t>(get("PyFrame_Type"));
  g_raw.bytes_type = reinterpret_cast<uintptr_t>(get("PyBytes_Type"));
  g_raw.this_tstate = reinterpret_cast<void* (*)()>(get("PyGILState_GetThisThreadState"));
  g_raw.main_interp = reinterpret_cast<void* (*)()>(get("PyInterpreterState_Main"));
  g_raw.addr2line = reinterpret_cast<int (*)(void*, int)>(get("PyCode_Addr2Line"));
  const bool object_frames = g_raw.layout.model == FrameModel::kFrameObject;
  g_raw_on.store(g_raw.code_type && g_raw.str_type && g_raw.this_tstate && g_raw.addr2line &&
                     (!object_frames || (g_raw.frame_type && g_raw.bytes_type)),
                 std::memory_order_relaxed);
  return true;
}

// --- Announcements -----------------------------------------------------------------------

// The slot of `code`, claimed if new; nullptr when its neighbourhood is full (the code object
// is then announced at every sight: correct, only costlier).
SeenSlot* slot_of(uint64_t code) noexcept {
  const uint64_t h = code * 0x9E3779B97F4A7C15ull;
  for (unsigned i = 0; i < 64; ++i) {
    SeenSlot& s = g_seen[((h >> 48) + i) & (kSeenSlots - 1)];
    uint64_t cur = s.code.load(std::memory_order_acquire);
    if (cur == 0 && s.code.compare_exchange_strong(cur, code, std::memory_order_acq_rel)) return &s;
    if (cur == code) return &s;
  }
  return nullptr;
}

bool announced(SeenSlot* s, uint64_t sig) noexcept {
  return s && s->sig.load(std::memory_order_acquire) == sig;
}

void mark_announced(SeenSlot* s, uint64_t sig) noexcept {
  if (s) s->sig.store(sig, std::memory_order_release);
}

// GIL held: names through the API, and a reference that keeps the address ours.
void announce_pinned(void* code) noexcept {
  char buf[1024];
  size_t n = 0;
  for (const char* attr : {"co_filename", g_name_attr}) {
    void* s = g_api.get_attr(code, attr);
    long len = 0;
    const char* text = s ? g_api.utf8(s, &len) : nullptr;
    if (!text) len = 0;
    const size_t room = sizeof buf - n - 1;
    const size_t take = static_cast<size_t>(len) < room ? static_cast<size_t>(len) : room;
    if (take) std::memcpy(buf + n, text, take);
    n += take;
    buf[n++] = '\0';
    if (s) g_api.decref(s);
  }
  g_api.incref(code);  // never freed: its address stays its own
  buf[sizeof buf - 1] = '\0';
  record_bytes(wire::Kind::kPyCode, reinterpret_cast<uint64_t>(code), buf, n);
  g_announce_gen.fetch_add(1, std::memory_order_release);
}

// --- GIL-less reads --------------------------------------------------------------------------

bool announce_raw(uintptr_t code, uintptr_t filename, uintptr_t name, bool checked) noexcept {
  char buf[1024];
  size_t nf = 0, nn = 0;
  if (!read_str(filename, buf, 760, &nf, checked)) return false;
  buf[nf] = '\0';
  if (!read_str(name, buf + nf + 1, sizeof buf - nf - 2, &nn, checked)) return false;
  buf[nf + 1 + nn] = '\0';
  record_bytes(wire::Kind::kPyCode, code, buf, nf + 1 + nn + 1);
  g_announce_gen.fetch_add(1, std::memory_order_release);
  return true;
}

// The frame the calling thread runs now (0: none), from its thread state; 3.11/3.12 also give
// the innermost evaluation loop's _PyCFrame, a local of that loop's C frame, as `loop_at`.
bool current_frame(uintptr_t ts, uintptr_t* frame, uintptr_t* loop_at, bool checked) noexcept {
  const CpythonLayout& L = g_raw.layout;
  unsigned char b[8];
  if (!fetch(b, ts + L.tstate_frame, 8, checked)) return false;
  *frame = field<uintptr_t>(b, 0);
  if (L.model != FrameModel::kCFrame || *frame == 0) return true;
  const uintptr_t cframe = *frame;  // the _PyCFrame of the innermost evaluation loop
  *loop_at = cframe;
  if (!plausible_object(cframe) || !fetch(b, cframe + L.cframe_current_frame, 8, checked)) {
    return false;
  }
  *frame = field<uintptr_t>(b, 0);
  return true;
}

// The length of a code object's bytecode in code units (3.9: bytes, its instructions' unit).
bool code_units(const unsigned char* cb, int64_t* units, bool checked) noexcept {
  const CpythonLayout& L = g_raw.layout;
  if (L.model != FrameModel::kFrameObject) {
    *units = field<int64_t>(cb, kObSize);  // PyCodeObject is a PyVarObject of code units
  } else {
    unsigned char bb[kObSize + 8];  // co_code: an exact bytes object
    const uintptr_t bytes = field<uintptr_t>(cb, L.code_bytecode);
    if (!plausible_object(bytes) || !fetch(bb, bytes, sizeof bb, checked)) return false;
    if (field<uintptr_t>(bb, kObType) != g_raw.bytes_type) return false;
    *units = field<int64_t>(bb, kObSize);
    if (L.minor >= 10) *units /= kCodeUnitBytes;
  }
  return *units > 0 && *units <= (int64_t{1} << 30);
}

// The instruction frame `fb` runs in `code` (`units` long), in code units from the start (-1: not
// started yet); false when it lies outside the code.
__attribute__((always_inline)) inline bool frame_lasti(const unsigned char* fb, uintptr_t code,
                                                       int64_t units, int64_t* lasti) noexcept {
  const CpythonLayout& L = g_raw.layout;
  if (L.model == FrameModel::kFrameObject) {
    *lasti = field<int>(fb, L.frame_instr);  // 3.9: bytes, 3.10: units; -1 before the first
  } else {
    const auto delta =
        static_cast<int64_t>(field<uintptr_t>(fb, L.frame_instr) - (code + L.code_bytecode));
    if (delta % static_cast<int64_t>(kCodeUnitBytes) != 0) return false;
    *lasti = delta / static_cast<int64_t>(kCodeUnitBytes);
  }
  return *lasti >= (L.model == FrameModel::kCurrentFrame ? 0 : -1) && *lasti < units;
}

// The signature of `code`'s (file, name) in *sig, the code object announced first when this is
// the first sight of it under that signature; false when its names could not be read.
inline bool announce_if_new(uintptr_t code, uintptr_t filename, uintptr_t name, bool checked,
                            uint64_t* sig) noexcept {
  uint64_t kf = 0, kn = 0;
  if (!str_key(filename, &kf, checked) || !str_key(name, &kn, checked)) return false;
  *sig = ((kf * 0x9E3779B97F4A7C15ull) ^ (kn + 0x632BE59BD9B4E019ull)) | 1;
  SeenSlot* slot = slot_of(code);
  if (!announced(slot, *sig)) {
    if (!announce_raw(code, filename, name, checked)) return false;
    mark_announced(slot, *sig);
  }
  return true;
}

// Walks the calling thread's frames from its thread state. Returns the number of pairs, or -1
// when something did not look like the layout says (the caller turns the reader off).
// With `stop_at_module`, the walk ends after the first frame whose line word names a module (the
// innermost module call): node_modules.h wants only that one.
int raw_capture(uint64_t* out, unsigned max, uintptr_t* loop_at,
                bool stop_at_module = false) noexcept {
  const CpythonLayout& L = g_raw.layout;
  const bool object_frames = L.model == FrameModel::kFrameObject;
  const bool checked = g_probation.load(std::memory_order_relaxed) > 0;
  const auto ts = reinterpret_cast<uintptr_t>(g_raw.this_tstate());
  if (ts == 0) return 0;  // no thread state: a thread that never ran Python
  uintptr_t frame = 0;
  if (!current_frame(ts, &frame, loop_at, checked)) return -1;
  PyMemoUse memo(checked);
  // The watcher sees the code objects of the interpreter whose sitecustomize registered it, the
  // main one: a thread of a sub-interpreter (its PyThreadState's interp, the third pointer of the
  // struct in every version with watchers) takes the checked answers.
  if (memo.code_gen &&
      (!g_raw.main_interp || *reinterpret_cast<const uintptr_t*>(ts + 2 * sizeof(uintptr_t)) !=
                                 reinterpret_cast<uintptr_t>(g_raw.main_interp()))) {
    memo.code_gen = 0;
  }
  const uint64_t module_code = g_module_code.load(std::memory_order_relaxed);
  int n = 0;
  for (unsigned hops = 0; frame && static_cast<unsigned>(n) < max && hops < kMaxHops; ++hops) {
    if (stop_at_module && n > 0 &&
        (out[2 * n - 1] & wire::kPyModuleTagMask) == wire::kPyModuleTag) {
      break;
    }
    unsigned char frame_copy[kMaxFrameSpan];
    const unsigned char* fb =
        plausible_object(frame) ? view(frame_copy, frame, g_raw.frame_span, checked) : nullptr;
    if (!fb) return -1;
    if (object_frames && field<uintptr_t>(fb, kObType) != g_raw.frame_type) return -1;
    const uintptr_t here = frame;
    uintptr_t code = field<uintptr_t>(fb, L.frame_code);
    if (L.executable_tagged) code &= ~uintptr_t{3};  // _PyStackRef: reference-kind tag bits
    frame = field<uintptr_t>(fb, L.frame_previous);
    bool generator = false;
    if (L.frame_owner != kNoField) {
      const int owner = static_cast<signed char>(fb[L.frame_owner]);
      if (owner < 0 || owner > L.max_owner) return -1;
      // An evaluation loop's entry frame (3.12+: f_code/f_executable is no code object), a
      // local of that loop's C frame.
      if (L.owner_not_python >= 0 && owner >= L.owner_not_python) {
        if (*loop_at == 0) *loop_at = here;
        continue;
      }
      generator = owner == kOwnedByGenerator;
    }

    // The frame's own words find its answer when code objects are watched (3.11+ frames).
    FrameAnswer* answer = object_frames ? nullptr : memo.frame_answer(here);
    uintptr_t instr = 0;
    if (answer) {
      instr = field<uintptr_t>(fb, L.frame_instr);
      if (answer->gen == memo.code_gen && answer->code == code && answer->instr == instr) {
        out[2 * n] = code;
        out[2 * n + 1] = line_word(here, code, answer->line, module_code, checked);
        ++n;
        ++t_py_memo_hits;
        ++t_py_watched_hits;
        continue;
      }
    }

    unsigned char code_copy[kMaxCodeSpan];
    const unsigned char* cb =
        plausible_object(code) ? view(code_copy, code, g_raw.code_span, checked) : nullptr;
    if (!cb) return -1;
    if (field<uintptr_t>(cb, kObType) != g_raw.code_type) return -1;
    int64_t units = 0;
    if (!code_units(cb, &units, checked)) return -1;
    int64_t lasti = 0;
    if (!frame_lasti(fb, code, units, &lasti)) return -1;
    // Incomplete frames (still before their first RESUME) are skipped, as sys._getframe does
    // (3.11/3.12; 3.13+ does not publish where that is: such a frame reads as its first line).
    if (L.code_firsttraceable != kNoField) {
      const int first_traceable = field<int>(cb, L.code_firsttraceable);
      if (first_traceable < 0 || first_traceable > units) return -1;
      if (lasti < first_traceable) {
        if (!generator) continue;
        answer = nullptr;  // a generator's: the same instruction in another frame is skipped
      }
    }
    // PyFrame_GetLineNumber asks PyCode_Addr2Line for the byte offset of the instruction
    // (3.11/3.12: of prev_instr, which is what lasti counts here).
    const int64_t addrq = L.minor == 9 ? lasti : lasti * kCodeUnitBytes;

    const uintptr_t filename = field<uintptr_t>(cb, L.code_filename);
    const uintptr_t name = field<uintptr_t>(cb, L.code_name);
    const int32_t firstlineno = field<int32_t>(cb, L.code_firstlineno);
    const uintptr_t linetable = field<uintptr_t>(cb, L.code_linetable);
    out[2 * n] = code;
    PyMemoEntry* e = memo.entry(code, addrq);
    if (e && e->gen == memo.gen && e->code == code && e->addrq == addrq &&
        e->filename == filename && e->name == name && e->linetable == linetable &&
        e->units == units && e->firstlineno == firstlineno) {
      out[2 * n + 1] = line_word(here, code, e->line, module_code, checked);
      ++n;
      ++t_py_memo_hits;
      // The code object is this capture's frame's, alive, and was announced: the entry's gen
      // says no announcement came since, so no other code object took the address meanwhile.
      if (answer) *answer = FrameAnswer{code, instr, memo.code_gen, e->line};
      continue;
    }
    uint64_t sig = 0;
    if (!announce_if_new(code, filename, name, checked, &sig)) return -1;
    const uint64_t key = line_key(code, sig, units, firstlineno, linetable, addrq);
    const int line = line_of(code, key, addrq);
    out[2 * n + 1] = line_word(here, code, line, module_code, checked);
    ++n;
    // Kept under the generation read before this answer was checked: an announcement since
    // (this one included) leaves it stale, never wrong.
    if (e)
      *e = PyMemoEntry{code, filename, name, linetable, units, addrq, firstlineno, line, memo.gen};
    // Under the code generation read before this frame's code was read: a code object freed
    // since (this capture's are not: its frames hold them) leaves the answer stale, never wrong.
    if (answer) *answer = FrameAnswer{code, instr, memo.code_gen, line};
  }
  if (checked) g_probation.fetch_sub(n + 1, std::memory_order_relaxed);
  return n;
}

// --- GIL-held path -----------------------------------------------------------------------------

unsigned api_capture(uint64_t* out, unsigned max) noexcept {
  if (!g_api.gil_check()) return 0;
  void* frame = g_api.eval_get_frame();
  if (!frame) return 0;
  const int gc_was_enabled = g_api.gc_disable();
  unsigned n = 0;
  void* owned = nullptr;  // the frame we hold a reference to (PyEval_GetFrame's is borrowed)
  while (frame && n < max) {
    void* code = g_api.frame_get_code(frame);
    if (code) {
      const auto addr = reinterpret_cast<uint64_t>(code);
      SeenSlot* slot = slot_of(addr);
      if (!announced(slot, kPinned)) {
        announce_pinned(code);
        mark_announced(slot, kPinned);
      }
      out[2 * n] = addr;
      out[2 * n + 1] = static_cast<uint64_t>(g_api.frame_get_line(frame));
      ++n;
      g_api.decref(code);
    }
    void* back = g_api.frame_get_back(frame);
    if (owned) g_api.decref(owned);
    owned = back;
    frame = back;
  }
  if (owned) g_api.decref(owned);
  if (gc_was_enabled) g_api.gc_enable();
  return n;
}

// On probation, where the calling thread holds the GIL: the innermost frame read from memory
// must be the one the public API reports. This catches what reads cannot (a thread state
// offset that lands on a null pointer would otherwise just yield no frames, forever).
bool agrees_with_api(const uint64_t* out, int n) noexcept {
  if (!g_api.gil_check()) return true;
  void* frame = g_api.eval_get_frame();  // borrowed; the innermost complete frame
  if (!frame) return n == 0;
  void* code = g_api.frame_get_code(frame);  // new reference
  const bool same = n > 0 && out[0] == reinterpret_cast<uint64_t>(code) &&
                    static_cast<int>(out[1]) == g_api.frame_get_line(frame);
  if (code) g_api.decref(code);
  return same;
}

}  // namespace

void python_stack_reset() noexcept {
  for (auto& s : g_seen) {
    s.code.store(0, std::memory_order_relaxed);
    s.sig.store(0, std::memory_order_relaxed);
  }
  for (auto& l : g_lines) l.store(0, std::memory_order_relaxed);
  // The new session's collector has heard of no code object: every memo entry is stale.
  g_announce_gen.fetch_add(1, std::memory_order_release);
  g_code_gen.fetch_add(1, std::memory_order_release);
  g_py_memos.after_fork();
}

uint64_t python_memo_hits() noexcept {
  return t_py_memo_hits;
}

uint64_t python_watched_hits() noexcept {
  return t_py_watched_hits;
}

namespace {

// Whether frames can be read now: CPython found (resolved by the first caller; the others go
// without Python frames meanwhile) and its interpreter initialized.
bool reader_ready() noexcept {
  int state = g_state.load(std::memory_order_acquire);
  if (state == kUnknown) {
    if (!g_state.compare_exchange_strong(state, kResolving, std::memory_order_acquire)) {
      return false;
    }
    state = resolve() ? kAvailable : kAbsent;
    g_state.store(state, std::memory_order_release);
  }
  return state == kAvailable && g_api.is_initialized();
}

}  // namespace

unsigned capture_python_stack(uint64_t* out, unsigned max, uint64_t* loop_at) noexcept {
  *loop_at = 0;
  if (max == 0 || !reader_ready()) return 0;
  if (g_raw_on.load(std::memory_order_relaxed)) {
    const bool probation = g_probation.load(std::memory_order_relaxed) > 0;
    uintptr_t at = 0;
    const int n = raw_capture(out, max, &at);
    if (n >= 0 && (!probation || agrees_with_api(out, n))) {
      *loop_at = n > 0 ? at : 0;
      return static_cast<unsigned>(n);
    }
    raw_off("a frame did not match the CPython layout");
  }
  return g_api_gc ? api_capture(out, max) : 0;
}

uint64_t innermost_module_word() noexcept {
  if (g_module_code.load(std::memory_order_relaxed) == 0 || !reader_ready()) return 0;
  if (!g_raw_on.load(std::memory_order_relaxed)) return 0;  // the GIL-held path reads no module
  const bool probation = g_probation.load(std::memory_order_relaxed) > 0;
  uint64_t pairs[2 * wire::kMaxPythonFrames];
  uintptr_t at = 0;
  const int n = raw_capture(pairs, wire::kMaxPythonFrames, &at, /*stop_at_module=*/true);
  if (n < 0 || (probation && !agrees_with_api(pairs, n))) {
    raw_off("a frame did not match the CPython layout");
    return 0;
  }
  const uint64_t word = n > 0 ? pairs[2 * n - 1] : 0;
  return (word & wire::kPyModuleTagMask) == wire::kPyModuleTag ? word : 0;
}

uint64_t module_code() noexcept {
  return g_module_code.load(std::memory_order_relaxed);
}

bool set_module_code(uint64_t code) noexcept {
  uint64_t none = 0;
  return code != 0 && g_module_code.compare_exchange_strong(none, code, std::memory_order_relaxed);
}

void note_code_event(int event) noexcept {
  if (event == kPyCodeEventDestroy) g_code_gen.fetch_add(1, std::memory_order_release);
}

void note_code_watcher(int id) noexcept {
  if (id >= 0) g_code_watched.store(true, std::memory_order_release);
}

}  // namespace cumemtrace::preload
