// Contract: keeps the collector's copy of the process's module map current. send_all() records
// every loaded module (at session start); note_frames() checks captured return addresses against
// the modules already sent and, when one falls outside all of them (a library loaded since),
// rescans and records the new ones before the event that needs them. Lock-free when nothing
// changed; a rescan takes a spin lock.
#pragma once

#include <cstdint>

namespace cumemtrace::preload {

// In a forked child (one thread left): forgets what was sent, and releases the lock that a thread
// of the parent may have held.
void modules_reset() noexcept;
void modules_send_all() noexcept;
void modules_note_frames(const uint64_t* frames, unsigned n) noexcept;

}  // namespace cumemtrace::preload
