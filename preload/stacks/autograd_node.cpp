#include "stacks/autograd_node.h"

#include <atomic>

#include "stacks/node_modules.h"

namespace cumemtrace::preload {

namespace {

// What torch::autograd::get_current_node() returns: a std::shared_ptr<Node> by value, which
// libstdc++ lays out as the object's pointer, then its control block (_Sp_counted_base: a vtable
// pointer, then the use count). A type with a destructor is returned the way shared_ptr is
// (through a hidden pointer: rdi on x86-64, x8 on AArch64), so calling through this type matches
// PyTorch's ABI; the destructor gives back the reference the copy took, as shared_ptr's would.
// It never frees: the engine's own thread-local (its NodeGuard) holds the node for as long as
// the node is evaluated, which is when a hook can run.
struct SharedNode {
  const uint64_t* const* node;  // the node, whose first word is its vtable pointer
  unsigned char* control;
  SharedNode(const SharedNode&) = delete;
  SharedNode& operator=(const SharedNode&) = delete;
  ~SharedNode() {
    if (control) __atomic_fetch_sub(reinterpret_cast<int*>(control + 8), 1, __ATOMIC_ACQ_REL);
  }
};
using GetCurrentNode = SharedNode (*)();

std::atomic<GetCurrentNode> g_get{nullptr};
unsigned g_apply_slot = 0;  // written once, before g_get
std::atomic<bool> g_claimed{false};

thread_local bool t_engine_thread __attribute__((tls_model("initial-exec"))) = false;

}  // namespace

bool set_autograd_node_source(const void* get_current_node, unsigned apply_slot) noexcept {
  if (g_claimed.exchange(true, std::memory_order_acq_rel)) return false;
  g_apply_slot = apply_slot;
  g_get.store(reinterpret_cast<GetCurrentNode>(const_cast<void*>(get_current_node)),
              std::memory_order_release);
  return true;
}

void note_engine_thread() noexcept {
  t_engine_thread = true;
}

bool on_engine_thread() noexcept {
  return t_engine_thread;
}

uint64_t autograd_node_frame(uint64_t* module_word) noexcept {
  if (module_word) *module_word = 0;
  if (!t_engine_thread) return 0;
  const GetCurrentNode get = g_get.load(std::memory_order_acquire);
  if (!get) return 0;
  const SharedNode current = get();
  if (!current.node) return 0;
  if (module_word) *module_word = node_module_word(current.node);
  const uint64_t apply = (*current.node)[g_apply_slot];
  return apply ? apply + 1 : 0;
}

}  // namespace cumemtrace::preload
