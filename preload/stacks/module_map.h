// Contract: keeps the collector's copy of the process's module map current. send_all() records
// every loaded module (at session start); note_frames() checks captured return addresses against
// the modules already sent and, when one falls outside all of them (a library loaded since),
// rescans and records the new ones (ahead of the event that needs them, or just after it: the
// collector resolves frames when it writes the snapshot). Lock-free when nothing changed; one
// thread at a time rescans, and a thread that finds a rescan under way goes on without waiting
// (a try-lock: no hook ever waits for another thread's dl_iterate_phdr or ring wait here).
#pragma once

#include <cstdint>

namespace cumemtrace::preload {

// In a forked child (one thread left): forgets what was sent, and releases the lock that a thread
// of the parent may have held.
void modules_reset() noexcept;
void modules_send_all() noexcept;
void modules_note_frames(const uint64_t* frames, unsigned n) noexcept;
// Rescans published since start or modules_reset() (the recorder test counts them).
uint32_t modules_generation() noexcept;

}  // namespace cumemtrace::preload
