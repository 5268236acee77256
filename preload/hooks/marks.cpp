// The public marks API (include/cumemtrace.h) and the NVTX injection entry point. Both turn the
// application's phase names into kMark records; ranges are resolved by the collector, so the
// preload keeps no name stack: a push is START with the name, a pop is END without one (the
// collector closes the thread's innermost push), and a start/end range carries a process-wide id
// in the record's aux (aux = MarkStage | id << 8) that the collector matches. What the preload
// keeps per thread is only the push depth, which NVTX returns to the caller.
#include <wchar.h>

#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>
#undef NVTX_NO_IMPL

#include <atomic>
#include <cstring>

#include "core/export.h"
#include "record/recorder.h"
#include "wire/wire_format.h"

namespace cumemtrace::preload {
namespace {

using wire::Kind;
using wire::MarkStage;

thread_local int t_push_depth __attribute__((tls_model("initial-exec"))) = 0;
std::atomic<uint64_t> g_next_range_id{1};

uint64_t mark_aux(MarkStage stage, uint64_t range_id) {
  return static_cast<uint64_t>(stage) | range_id << 8;
}

void mark(MarkStage stage, const char* name, uint64_t range_id = 0) noexcept {
  ReentryGuard guard;
  if (!guard.outer || !tracing_possible()) return;
  record_string(Kind::kMark, mark_aux(stage, range_id), name ? name : "");
}

int push(const char* name) noexcept {
  mark(MarkStage::kStart, name);
  return t_push_depth++;
}

int pop() noexcept {
  if (t_push_depth == 0) return -1;  // NVTX: a pop without a push is an error, not an END
  mark(MarkStage::kEnd, nullptr);
  return --t_push_depth;
}

uint64_t range_start(const char* name) noexcept {
  const uint64_t id = g_next_range_id.fetch_add(1, std::memory_order_relaxed);
  mark(MarkStage::kStart, name, id);
  return id;
}

void range_end(uint64_t id) noexcept {
  if (id != 0) mark(MarkStage::kEnd, nullptr, id);
}

// --- NVTX -----------------------------------------------------------------------------------

// Wide strings become UTF-8 in a buffer on the stack: names are short, records are bounded.
constexpr size_t kNameBytes = 512;

void utf8_from_wide(const wchar_t* w, char (&out)[kNameBytes]) noexcept {
  size_t n = 0;
  for (; w && *w; ++w) {
    const auto c = static_cast<uint32_t>(*w);
    char b[4];
    size_t len;
    if (c < 0x80) {
      b[0] = static_cast<char>(c);
      len = 1;
    } else if (c < 0x800) {
      b[0] = static_cast<char>(0xc0 | c >> 6);
      b[1] = static_cast<char>(0x80 | (c & 0x3f));
      len = 2;
    } else if (c < 0x10000) {
      b[0] = static_cast<char>(0xe0 | c >> 12);
      b[1] = static_cast<char>(0x80 | (c >> 6 & 0x3f));
      b[2] = static_cast<char>(0x80 | (c & 0x3f));
      len = 3;
    } else if (c < 0x110000) {
      b[0] = static_cast<char>(0xf0 | c >> 18);
      b[1] = static_cast<char>(0x80 | (c >> 12 & 0x3f));
      b[2] = static_cast<char>(0x80 | (c >> 6 & 0x3f));
      b[3] = static_cast<char>(0x80 | (c & 0x3f));
      len = 4;
    } else {
      b[0] = '?';
      len = 1;
    }
    if (n + len >= kNameBytes) break;
    memcpy(out + n, b, len);
    n += len;
  }
  out[n] = '\0';
}

// Registered strings (nvtxDomainRegisterString*) are copied into a fixed arena so that the
// handle stays valid whatever the application does with its own copy; registration is rare and
// the arena is bump-allocated without a lock. A full arena hands out no handle (null), which
// NVTX callers treat as an unnamed event.
constexpr size_t kArenaBytes = 64 * 1024;
char g_arena[kArenaBytes];
std::atomic<size_t> g_arena_used{0};

nvtxStringHandle_t intern(const char* s) noexcept {
  const size_t len = strnlen(s ? s : "", kArenaBytes);
  const size_t at = g_arena_used.fetch_add(len + 1, std::memory_order_relaxed);
  if (at + len + 1 > kArenaBytes) return nullptr;
  memcpy(g_arena + at, s ? s : "", len);
  g_arena[at + len] = '\0';
  return reinterpret_cast<nvtxStringHandle_t>(g_arena + at);
}

// The message of an event attribute structure as UTF-8 ("" when it has none).
const char* attr_name(const nvtxEventAttributes_t* a, char (&buf)[kNameBytes]) noexcept {
  if (!a || a->size < offsetof(nvtxEventAttributes_t, message) + sizeof a->message) return "";
  switch (a->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return a->message.ascii ? a->message.ascii : "";
    case NVTX_MESSAGE_TYPE_UNICODE:
      utf8_from_wide(a->message.unicode, buf);
      return buf;
    case NVTX_MESSAGE_TYPE_REGISTERED:
      return a->message.registered ? reinterpret_cast<const char*>(a->message.registered) : "";
    default:
      return "";
  }
}

void NVTX_API nvtx_mark_ex(const nvtxEventAttributes_t* a) {
  char buf[kNameBytes];
  mark(MarkStage::kMark, attr_name(a, buf));
}
void NVTX_API nvtx_mark_a(const char* m) {
  mark(MarkStage::kMark, m);
}
void NVTX_API nvtx_mark_w(const wchar_t* m) {
  char buf[kNameBytes];
  utf8_from_wide(m, buf);
  mark(MarkStage::kMark, buf);
}
nvtxRangeId_t NVTX_API nvtx_range_start_ex(const nvtxEventAttributes_t* a) {
  char buf[kNameBytes];
  return range_start(attr_name(a, buf));
}
nvtxRangeId_t NVTX_API nvtx_range_start_a(const char* m) {
  return range_start(m);
}
nvtxRangeId_t NVTX_API nvtx_range_start_w(const wchar_t* m) {
  char buf[kNameBytes];
  utf8_from_wide(m, buf);
  return range_start(buf);
}
void NVTX_API nvtx_range_end(nvtxRangeId_t id) {
  range_end(id);
}
int NVTX_API nvtx_range_push_ex(const nvtxEventAttributes_t* a) {
  char buf[kNameBytes];
  return push(attr_name(a, buf));
}
int NVTX_API nvtx_range_push_a(const char* m) {
  return push(m);
}
int NVTX_API nvtx_range_push_w(const wchar_t* m) {
  char buf[kNameBytes];
  utf8_from_wide(m, buf);
  return push(buf);
}
int NVTX_API nvtx_range_pop() {
  return pop();
}

// Domains: events of every domain are recorded alike (the domain name is not part of the
// annotation); a domain handle only has to be non-null and unique.
std::atomic<uintptr_t> g_next_domain{1};
nvtxDomainHandle_t NVTX_API nvtx_domain_create(const void*) {
  return reinterpret_cast<nvtxDomainHandle_t>(g_next_domain.fetch_add(1));
}
void NVTX_API nvtx_domain_destroy(nvtxDomainHandle_t) {}
void NVTX_API nvtx_domain_mark_ex(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) {
  nvtx_mark_ex(a);
}
nvtxRangeId_t NVTX_API nvtx_domain_range_start_ex(nvtxDomainHandle_t,
                                                  const nvtxEventAttributes_t* a) {
  return nvtx_range_start_ex(a);
}
void NVTX_API nvtx_domain_range_end(nvtxDomainHandle_t, nvtxRangeId_t id) {
  range_end(id);
}
int NVTX_API nvtx_domain_range_push_ex(nvtxDomainHandle_t, const nvtxEventAttributes_t* a) {
  return nvtx_range_push_ex(a);
}
int NVTX_API nvtx_domain_range_pop(nvtxDomainHandle_t) {
  return pop();
}
nvtxStringHandle_t NVTX_API nvtx_domain_register_string_a(nvtxDomainHandle_t, const char* s) {
  return intern(s);
}
nvtxStringHandle_t NVTX_API nvtx_domain_register_string_w(nvtxDomainHandle_t, const wchar_t* s) {
  char buf[kNameBytes];
  utf8_from_wide(s, buf);
  return intern(buf);
}

template <typename Fn>
void assign(NvtxFunctionTable table, unsigned size, unsigned id, Fn fn) noexcept {
  if (id < size && table[id]) *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
}

bool fill_nvtx(NvtxGetExportTableFunc_t get_table) noexcept {
  if (!get_table) return false;
  auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_table(NVTX_ETID_CALLBACKS));
  if (!callbacks || callbacks->struct_size < sizeof(NvtxExportTableCallbacks) ||
      !callbacks->GetModuleFunctionTable) {
    return false;
  }
  NvtxFunctionTable t = nullptr;
  unsigned n = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &t, &n) || !t) return false;
  assign(t, n, NVTX_CBID_CORE_MarkEx, nvtx_mark_ex);
  assign(t, n, NVTX_CBID_CORE_MarkA, nvtx_mark_a);
  assign(t, n, NVTX_CBID_CORE_MarkW, nvtx_mark_w);
  assign(t, n, NVTX_CBID_CORE_RangeStartEx, nvtx_range_start_ex);
  assign(t, n, NVTX_CBID_CORE_RangeStartA, nvtx_range_start_a);
  assign(t, n, NVTX_CBID_CORE_RangeStartW, nvtx_range_start_w);
  assign(t, n, NVTX_CBID_CORE_RangeEnd, nvtx_range_end);
  assign(t, n, NVTX_CBID_CORE_RangePushEx, nvtx_range_push_ex);
  assign(t, n, NVTX_CBID_CORE_RangePushA, nvtx_range_push_a);
  assign(t, n, NVTX_CBID_CORE_RangePushW, nvtx_range_push_w);
  assign(t, n, NVTX_CBID_CORE_RangePop, nvtx_range_pop);
  // Older NVTX libraries have no CORE2 module: the core functions are enough then.
  if (callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t, &n) && t) {
    assign(t, n, NVTX_CBID_CORE2_DomainMarkEx, nvtx_domain_mark_ex);
    assign(t, n, NVTX_CBID_CORE2_DomainRangeStartEx, nvtx_domain_range_start_ex);
    assign(t, n, NVTX_CBID_CORE2_DomainRangeEnd, nvtx_domain_range_end);
    assign(t, n, NVTX_CBID_CORE2_DomainRangePushEx, nvtx_domain_range_push_ex);
    assign(t, n, NVTX_CBID_CORE2_DomainRangePop, nvtx_domain_range_pop);
    assign(t, n, NVTX_CBID_CORE2_DomainRegisterStringA, nvtx_domain_register_string_a);
    assign(t, n, NVTX_CBID_CORE2_DomainRegisterStringW, nvtx_domain_register_string_w);
    assign(t, n, NVTX_CBID_CORE2_DomainCreateA, nvtx_domain_create);
    assign(t, n, NVTX_CBID_CORE2_DomainCreateW, nvtx_domain_create);
    assign(t, n, NVTX_CBID_CORE2_DomainDestroy, nvtx_domain_destroy);
  }
  return true;
}

}  // namespace
}  // namespace cumemtrace::preload

namespace pl = cumemtrace::preload;

CUMEMTRACE_EXPORT void cumemtrace_mark(const char* name) {
  pl::mark(cumemtrace::wire::MarkStage::kMark, name);
}

CUMEMTRACE_EXPORT void cumemtrace_range_push(const char* name) {
  pl::push(name);
}

CUMEMTRACE_EXPORT void cumemtrace_range_pop() {
  pl::pop();
}

CUMEMTRACE_EXPORT void cumemtrace_snapshot(const char* tag) {
  pl::ReentryGuard guard;
  if (!guard.outer || !pl::tracing_possible()) return;
  pl::record_string(cumemtrace::wire::Kind::kSnapshot, 0, tag ? tag : "", 10'000'000'000ull);
}

// NVTX calls this once per NVTX instance in the process (the NVTX_INJECTION64_PATH library):
// 1 = attached. Returning 0 when the table is unusable makes NVTX fall back to no-ops.
CUMEMTRACE_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  return pl::fill_nvtx(get_table) ? 1 : 0;
}
