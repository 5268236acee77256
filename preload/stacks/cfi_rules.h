// Contract: how one frame of x86-64 code is unwound, as one 64-bit word (a packed rule), and
// where such a word comes from: the DWARF CFI (FDE and its CIE) that libgcc's _Unwind_Find_FDE
// finds for a code address. The walker (cfi_unwinder.cpp) keeps these words in its caches and
// memo, so a rule is plain data: published with one 8-byte atomic store, compared with ==.
//
// The rule model is the one the walker can follow with loads alone: CFA = rsp or rbp + N; the
// return address at a fixed offset from the CFA; the caller's rbp either saved at a fixed offset
// from the CFA or unchanged; rsp = CFA. Anything else (signal frames, CFA or register
// expressions, other registers as the CFA base, code without unwind info) is kUnsupported, and
// the walker falls back to _Unwind_Backtrace for that stack. compute_rule() reads only inside
// the FDE's and CIE's own lengths; it never allocates and takes only the lock that
// _Unwind_Find_FDE takes (the walker calls it only on a miss of all its caches).
#pragma once

#include <cstdint>

namespace cumemtrace::preload::cfi {

// Layout of a packed rule:
//   bits  0..31  CFA offset (signed)          bits 48..55  return address offset from the CFA
//   bits 32..47  saved rbp offset from CFA    bits 56..57  kind, bit 58 CFA base is rbp,
//                                             bit 59 caller's rbp is saved (else unchanged)
enum Kind : uint64_t { kEmpty = 0, kFrame = 1, kOutermost = 2, kUnsupported = 3 };

inline constexpr uint64_t kUnsupportedRule = kUnsupported << 56;

constexpr uint64_t pack_frame(bool cfa_rbp, int32_t cfa_off, bool rbp_saved, int16_t rbp_off,
                              int8_t ra_off) noexcept {
  return static_cast<uint32_t>(cfa_off) | uint64_t{static_cast<uint16_t>(rbp_off)} << 32 |
         uint64_t{static_cast<uint8_t>(ra_off)} << 48 | kFrame << 56 | uint64_t{cfa_rbp} << 58 |
         uint64_t{rbp_saved} << 59;
}
constexpr uint64_t rule_kind(uint64_t rule) noexcept {
  return (rule >> 56) & 3;
}
constexpr bool cfa_from_rbp(uint64_t rule) noexcept {
  return (rule >> 58) & 1;
}
constexpr int64_t cfa_offset(uint64_t rule) noexcept {
  return static_cast<int32_t>(rule);
}
constexpr int64_t ra_offset(uint64_t rule) noexcept {
  return static_cast<int8_t>(rule >> 48);
}
constexpr bool rbp_saved(uint64_t rule) noexcept {
  return (rule >> 59) & 1;
}
constexpr int64_t rbp_offset(uint64_t rule) noexcept {
  return static_cast<int16_t>(rule >> 32);
}

static_assert(rule_kind(pack_frame(true, -24, true, -16, -8)) == kFrame &&
                  cfa_from_rbp(pack_frame(true, -24, true, -16, -8)) &&
                  cfa_offset(pack_frame(true, -24, true, -16, -8)) == -24 &&
                  rbp_saved(pack_frame(true, -24, true, -16, -8)) &&
                  rbp_offset(pack_frame(true, -24, true, -16, -8)) == -16 &&
                  ra_offset(pack_frame(true, -24, true, -16, -8)) == -8,
              "the decoders read back what pack_frame packs");

// The rule for code address `pc` (a return address minus one, or an exact pc): a kFrame rule,
// kOutermost << 56 where the CFI says the return address is undefined (the thread's first
// frame), or kUnsupportedRule.
uint64_t compute_rule(uint64_t pc) noexcept;

}  // namespace cumemtrace::preload::cfi
