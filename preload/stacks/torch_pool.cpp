#include "stacks/torch_pool.h"

#include <atomic>

namespace cumemtrace::preload {

namespace {

cfi::CodeRange g_text;  // written once, before g_set says so
std::atomic<bool> g_set{false};
std::atomic<bool> g_claimed{false};

}  // namespace

bool set_torch_pool_allocator(const cfi::CodeRange& text) noexcept {
  if (g_claimed.exchange(true, std::memory_order_acq_rel)) return false;
  g_text = text;
  g_set.store(true, std::memory_order_release);
  return true;
}

const cfi::CodeRange* torch_pool_allocator() noexcept {
  return g_set.load(std::memory_order_acquire) ? &g_text : nullptr;
}

}  // namespace cumemtrace::preload
