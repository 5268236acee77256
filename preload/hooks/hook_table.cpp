#include "hooks/hook_table.h"

#include <atomic>

#include "driver/real_driver.h"

// Only the addresses of the hooks are needed here, so they are declared without their types
// (cuda.h is deliberately not included: its macros rename several of these names).
extern "C" {
#define CUMEMTRACE_DECLARE(name) void name();
CUMEMTRACE_HOOKS(CUMEMTRACE_DECLARE)
#undef CUMEMTRACE_DECLARE
}

namespace cumemtrace::preload {

std::atomic<void*> g_real[static_cast<unsigned>(HookId::kCount)];

namespace {

constexpr unsigned kCount = static_cast<unsigned>(HookId::kCount);

const char* const kNames[kCount] = {
#define CUMEMTRACE_NAME(name) #name,
    CUMEMTRACE_HOOKS(CUMEMTRACE_NAME)
#undef CUMEMTRACE_NAME
};

void* const kHooks[kCount] = {
#define CUMEMTRACE_ADDR(name) reinterpret_cast<void*>(&::name),
    CUMEMTRACE_HOOKS(CUMEMTRACE_ADDR)
#undef CUMEMTRACE_ADDR
};

std::atomic<bool> g_identities_ready{false};

void resolve_all() noexcept {
  if (!libcuda_handle()) return;
  for (unsigned i = 0; i < kCount; ++i) {
    if (!g_real[i].load(std::memory_order_acquire)) {
      g_real[i].store(driver_symbol(kNames[i]), std::memory_order_release);
    }
  }
  g_identities_ready.store(true, std::memory_order_release);
}

}  // namespace

void* real_slow(HookId id) noexcept {
  const auto i = static_cast<unsigned>(id);
  void* p = driver_symbol(kNames[i]);
  g_real[i].store(p, std::memory_order_release);
  return p;
}

void set_real(HookId id, void* fn) noexcept {
  if (fn) g_real[static_cast<unsigned>(id)].store(fn, std::memory_order_release);
}

void* route(void* real_fn) noexcept {
  if (!real_fn) return real_fn;
  if (!g_identities_ready.load(std::memory_order_acquire)) resolve_all();
  for (unsigned i = 0; i < kCount; ++i) {
    if (g_real[i].load(std::memory_order_relaxed) == real_fn) return kHooks[i];
  }
  return real_fn;
}

}  // namespace cumemtrace::preload
