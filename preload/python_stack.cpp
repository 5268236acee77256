#include "python_stack.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>

#include "real_driver.h"
#include "recorder.h"

namespace cumemtrace::preload {

namespace {

// The subset of CPython's C API used here; all present with these signatures in 3.9 to 3.13.
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

enum : int { kUnknown = 0, kAvailable = 1, kAbsent = 2 };
std::atomic<int> g_state{kUnknown};
PyApi g_api;

// Code objects already announced: an open-addressing set written under the GIL.
constexpr unsigned kSeenSlots = 1 << 16;
std::atomic<uint64_t> g_seen[kSeenSlots];

bool resolve() noexcept {
  DlsymFn dl = real_dlsym();
  if (!dl) return false;
  auto get = [&](const char* name) { return dl(RTLD_DEFAULT, name); };
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
  for (void* f : p) {
    if (!f) return false;
  }
  static_assert(sizeof(PyApi) == sizeof p);
  std::memcpy(&g_api, p, sizeof p);
  return true;
}

// Returns true when `code` was not announced yet (and claims it).
bool first_sight(uint64_t code) noexcept {
  uint64_t h = code * 0x9E3779B97F4A7C15ull;
  for (unsigned i = 0; i < 64; ++i) {
    auto& slot = g_seen[((h >> 48) + i) & (kSeenSlots - 1)];
    uint64_t cur = slot.load(std::memory_order_relaxed);
    if (cur == code) return false;
    if (cur == 0 && slot.compare_exchange_strong(cur, code, std::memory_order_relaxed)) return true;
    if (cur == code) return false;
  }
  return false;  // table full around here: the frame stays anonymous rather than costly
}

void announce(void* code) noexcept {
  char buf[1024];
  size_t n = 0;
  for (const char* attr : {"co_filename", "co_name"}) {
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
}

}  // namespace

void python_stack_reset() noexcept {
  for (auto& s : g_seen) s.store(0, std::memory_order_relaxed);
}

unsigned capture_python_stack(uint64_t* out, unsigned max) noexcept {
  int state = g_state.load(std::memory_order_acquire);
  if (state == kUnknown) {
    state = resolve() ? kAvailable : kAbsent;
    g_state.store(state, std::memory_order_release);
  }
  if (state != kAvailable || max == 0) return 0;
  if (!g_api.is_initialized() || !g_api.gil_check()) return 0;
  void* frame = g_api.eval_get_frame();
  if (!frame) return 0;
  const int gc_was_enabled = g_api.gc_disable();
  unsigned n = 0;
  void* owned = nullptr;  // the frame we hold a reference to (PyEval_GetFrame's is borrowed)
  while (frame && n < max) {
    void* code = g_api.frame_get_code(frame);
    if (code) {
      const auto addr = reinterpret_cast<uint64_t>(code);
      if (first_sight(addr)) announce(code);
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

}  // namespace cumemtrace::preload
