#include "core/config.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "core/log.h"
#include "core/settings_table.h"
#include "wire/wire_format.h"

namespace cumemtrace::preload {

Config g_config;

namespace {

using settings::Id;

// The ring's slots for a buffer of `mb` MiB: the largest power of two that fits, within the ring's
// bounds.
uint64_t ring_slots_for(uint64_t mb) {
  const uint64_t slots = (mb << 20) / wire::kSlotBytes;
  uint64_t pow2 = wire::kMinCapacity;
  while (pow2 * 2 <= slots && pow2 < wire::kMaxCapacity) pow2 *= 2;
  return pow2;
}

// Copies the settings given into `c` (the rest keep Config's defaults).
void apply(Config& c, const settings::Value* v, const bool* given) {
  auto is = [&](Id id) { return given[static_cast<size_t>(id)]; };
  auto at = [&](Id id) -> const settings::Value& { return v[static_cast<size_t>(id)]; };
  if (is(Id::kStackDepth)) c.stack_depth = static_cast<unsigned>(at(Id::kStackDepth).number);
  if (is(Id::kBufferMb)) c.ring_slots = ring_slots_for(at(Id::kBufferMb).number);
  if (is(Id::kMaxWaitMs)) c.max_wait_ns = at(Id::kMaxWaitMs).number * 1000000ull;
  if (is(Id::kControlFd)) c.control_fd = static_cast<int>(at(Id::kControlFd).number);
  if (is(Id::kFollow)) c.follow = at(Id::kFollow).number == 1;
  if (is(Id::kPythonStacks)) c.python_stacks = at(Id::kPythonStacks).number == 1;
  if (is(Id::kNativeAbovePython)) {
    c.native_above_python = at(Id::kNativeAbovePython).number == 1;
  }
  if (is(Id::kFreeStacks)) c.free_stacks = at(Id::kFreeStacks).number == 1;
  if (is(Id::kTorchNativeStacks)) c.torch_native_stacks = at(Id::kTorchNativeStacks).number == 1;
  if (is(Id::kClock)) c.coarse_clock = at(Id::kClock).number == 1;  // precise|coarse
  if (is(Id::kSlowUnwind)) c.slow_unwind = at(Id::kSlowUnwind).number == 1;
  if (is(Id::kDebug)) c.debug = at(Id::kDebug).number == 1;
  c.control_socket = at(Id::kControlSocket).text;
  c.output = at(Id::kOutput).text;
  c.collector = at(Id::kCollectorPath).text;
}

}  // namespace

bool load_config(Config& c) noexcept {
  settings::Value values[settings::kCount];
  bool given[settings::kCount] = {};
  for (size_t i = 0; i < settings::kCount; ++i) {
    const settings::Setting& s = settings::kTable[i];
    if (!(s.readers & settings::kPreload)) continue;
    const char* text = settings::from_env(s);
    if (!text) continue;
    if (!settings::parse(s, text, values[i])) {
      char msg[192];
      settings::bad_setting_line(s, msg, sizeof msg);
      strncat(msg, "; tracing disabled: ", sizeof msg - strlen(msg) - 1);
      print_line(msg, text);
      return false;
    }
    given[i] = true;
  }
  apply(c, values, given);
  // Under --no-follow only the launched program itself is traced, not what it execs.
  const settings::Value& root = values[static_cast<size_t>(Id::kRootPid)];
  if (!c.follow &&
      (!given[static_cast<size_t>(Id::kRootPid)] || static_cast<pid_t>(root.number) != getpid())) {
    return false;
  }
  return true;
}

}  // namespace cumemtrace::preload
