// Contract: per-thread state too large for TLS, kept in a fixed pool (bss: only the pages of
// slots in use are ever touched). A dlopen'ed libcumemtrace.so (rather than a preloaded one) has
// only the small static TLS surplus for its initial-exec variables, so a per-thread cache of
// kilobytes cannot be thread_local. A thread claims a slot at its first mine() with a CAS on the
// slot's owner tid; when every slot is owned, a slot whose owner is gone (tgkill(pid, tid, 0)
// says ESRCH) is taken over; when none is, mine() returns nullptr for good and the thread goes
// without. T::claimed() runs when a thread takes a slot (a gone owner's state is still in it).
// after_fork(): the forked child's thread (its only one) keeps its slot under its new tid, so
// that no other thread of the child takes it over. No allocation, no lock; errno is preserved.
// Use: the thread's T for the length of one use, none while a use of it on this thread is in
// progress below (a signal handler interrupted it: a T is several words, never consistent in
// between). One instance per T (the thread's slot index is a static of the class).
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace cumemtrace::preload {

template <typename T, unsigned N>
class ThreadSlots {
 public:
  T* mine() noexcept {
    Slot* s = mine_slot();
    return s ? &s->value : nullptr;
  }

  class Use {
   public:
    explicit Use(ThreadSlots& slots) noexcept : s_(slots.mine_slot()) {
      if (!s_ || s_->busy) {
        s_ = nullptr;
        return;
      }
      s_->busy = true;
      std::atomic_signal_fence(std::memory_order_seq_cst);
    }
    ~Use() {
      if (!s_) return;
      std::atomic_signal_fence(std::memory_order_seq_cst);
      s_->busy = false;
    }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    T* get() const noexcept { return s_ ? &s_->value : nullptr; }

   private:
    typename ThreadSlots::Slot* s_;
  };

  void after_fork() noexcept {
    const int i = t_index;
    if (i > 0) slots_[i - 1].owner.store(this_tid(), std::memory_order_relaxed);
  }

 private:
  struct alignas(64) Slot {
    std::atomic<uint32_t> owner{0};  // tid, 0 when free
    bool busy = false;               // a Use of it is in progress on its owner thread
    T value{};
  };

  Slot* mine_slot() noexcept {
    const int i = t_index;
    if (i > 0) return &slots_[i - 1];
    return i == 0 ? claim() : nullptr;
  }

  static uint32_t this_tid() noexcept { return static_cast<uint32_t>(syscall(SYS_gettid)); }
  static bool owner_gone(uint32_t tid) noexcept {
    return syscall(SYS_tgkill, getpid(), static_cast<pid_t>(tid), 0) != 0 && errno == ESRCH;
  }

  __attribute__((noinline)) Slot* claim() noexcept {
    const int saved_errno = errno;  // a hook (or a signal handler) must leave errno as it was
    const uint32_t tid = this_tid();
    Slot* got = nullptr;
    t_index = -1;
    for (int pass = 0; pass < 2 && !got; ++pass) {
      for (unsigned i = 0; i < N; ++i) {
        uint32_t seen = slots_[i].owner.load(std::memory_order_relaxed);
        if (seen != 0 && (pass == 0 || !owner_gone(seen))) continue;
        if (!slots_[i].owner.compare_exchange_strong(seen, tid, std::memory_order_acquire)) {
          continue;
        }
        got = &slots_[i];
        got->busy = false;  // a gone owner may have died inside a use
        got->value.claimed();
        t_index = static_cast<int>(i) + 1;
        break;
      }
    }
    errno = saved_errno;
    return got;
  }

  Slot slots_[N];
  // 1 + the index of this thread's slot; 0 before its first mine(); -1: none was available.
  static inline thread_local int t_index __attribute__((tls_model("initial-exec"))) = 0;
};

}  // namespace cumemtrace::preload
