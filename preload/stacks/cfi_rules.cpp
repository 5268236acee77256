#include "stacks/cfi_rules.h"

#include <cstddef>
#include <cstring>

// libgcc's FDE lookup, declared in unwind-dw2-fde.h, which is not installed. It takes whatever
// lock _Unwind_Backtrace would take for the same frame, and is only called on a cache miss.
struct dwarf_eh_bases {
  void* tbase;
  void* dbase;
  void* func;
};
extern "C" const void* _Unwind_Find_FDE(void* pc, dwarf_eh_bases* bases);

namespace cumemtrace::preload::cfi {

namespace {

// ---------------------------------------------------------------------------------------------
// CIE/FDE parsing. All reads stay inside the entry's own length; anything unexpected gives up.
struct Reader {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;

  bool need(size_t n) {
    if (!ok || static_cast<size_t>(end - p) < n) ok = false;
    return ok;
  }
  template <typename T>
  T fixed() {
    T v{};
    if (!need(sizeof(T))) return v;
    memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  // An LEB128 number's bits; `end` gets the shift past its last byte, `last` that byte.
  uint64_t leb(unsigned& end, uint8_t& last) {
    uint64_t v = 0;
    for (unsigned shift = 0;; shift += 7) {
      if (!need(1) || shift >= 64) return ok = false, end = 64, last = 0, 0;
      last = *p++;
      v |= uint64_t{last & 0x7fu} << shift;
      if (!(last & 0x80)) return end = shift + 7, v;
    }
  }
  uint64_t uleb() {
    unsigned end;
    uint8_t last;
    return leb(end, last);
  }
  int64_t sleb() {
    unsigned end;
    uint8_t last;
    uint64_t v = leb(end, last);
    if (end < 64 && (last & 0x40)) v |= ~uint64_t{0} << end;
    return static_cast<int64_t>(v);
  }
  void skip(uint64_t n) {
    if (need(n)) p += n;
  }
};

// DW_EH_PE_* pointer decoding; `apply` is false for an FDE's pc_range (a length, not an address).
bool read_encoded(Reader& r, uint8_t enc, const dwarf_eh_bases& bases, bool apply, uint64_t& out) {
  if (enc == 0xff) return false;  // DW_EH_PE_omit
  const uint64_t field = reinterpret_cast<uint64_t>(r.p);
  uint64_t v;
  switch (enc & 0x0f) {
    case 0x00:
      v = r.fixed<uint64_t>();
      break;  // absptr
    case 0x01:
      v = r.uleb();
      break;
    case 0x02:
      v = r.fixed<uint16_t>();
      break;
    case 0x03:
      v = r.fixed<uint32_t>();
      break;
    case 0x04:
      v = r.fixed<uint64_t>();
      break;
    case 0x09:
      v = static_cast<uint64_t>(r.sleb());
      break;
    case 0x0a:
      v = static_cast<uint64_t>(int64_t{r.fixed<int16_t>()});
      break;
    case 0x0b:
      v = static_cast<uint64_t>(int64_t{r.fixed<int32_t>()});
      break;
    case 0x0c:
      v = r.fixed<uint64_t>();
      break;
    default:
      return false;
  }
  if (!r.ok) return false;
  if (!apply) {
    out = v;
    return true;
  }
  if (enc & 0x80) return false;  // indirect: never used for code addresses
  switch (enc & 0x70) {
    case 0x00:
      break;
    case 0x10:
      v += field;
      break;  // pcrel
    case 0x20:
      v += reinterpret_cast<uint64_t>(bases.tbase);
      break;
    case 0x30:
      v += reinterpret_cast<uint64_t>(bases.dbase);
      break;
    case 0x40:
      v += reinterpret_cast<uint64_t>(bases.func);
      break;
    default:
      return false;  // aligned and unknown
  }
  out = v;
  return true;
}

// Size of a pointer we only skip (the personality routine), which may be aligned or indirect.
bool skip_encoded(Reader& r, uint8_t enc) {
  if ((enc & 0x70) == 0x50) {  // DW_EH_PE_aligned
    const uint64_t a = reinterpret_cast<uint64_t>(r.p);
    r.skip(((a + 7) & ~uint64_t{7}) - a + 8);
    return r.ok;
  }
  uint64_t ignored;
  dwarf_eh_bases none{};
  return read_encoded(r, enc & 0x0f, none, false, ignored);
}

// Reads an entry's length field and narrows r to the entry; is64: 64-bit DWARF offsets follow.
bool open_entry(Reader& r, bool& is64) {
  uint64_t len = r.fixed<uint32_t>();
  is64 = len == 0xffffffffu;
  if (is64) len = r.fixed<uint64_t>();
  if (!r.ok || len == 0 || len > (uint64_t{1} << 30)) return false;
  r.end = r.p + len;
  return true;
}

struct Cie {
  uint64_t code_align;
  int64_t data_align;
  uint8_t fde_enc = 0;
  bool has_z = false;
  const uint8_t* insns;
  const uint8_t* end;
};

bool parse_cie(const uint8_t* at, Cie& c) {
  // Only the length field is readable until open_entry knows the entry's size.
  Reader r{at, at + 12};
  bool is64;
  if (!open_entry(r, is64)) return false;
  const uint64_t id = is64 ? r.fixed<uint64_t>() : r.fixed<uint32_t>();
  if (!r.ok || id != 0) return false;
  const uint8_t version = r.fixed<uint8_t>();
  if (version != 1 && version != 3 && version != 4) return false;
  const uint8_t* aug = r.p;
  while (r.need(1) && *r.p) ++r.p;
  if (!r.need(1)) return false;
  ++r.p;
  if (version == 4) {
    if (r.fixed<uint8_t>() != 8 || r.fixed<uint8_t>() != 0) return false;
  }
  c.code_align = r.uleb();
  c.data_align = r.sleb();
  const uint64_t ra_reg = version == 1 ? r.fixed<uint8_t>() : r.uleb();
  if (!r.ok || ra_reg != 16) return false;
  if (aug[0] == 'z') {
    c.has_z = true;
    const uint64_t len = r.uleb();
    if (!r.ok || len > static_cast<uint64_t>(r.end - r.p)) return false;
    const uint8_t* data_end = r.p + len;
    for (const uint8_t* a = aug + 1; *a; ++a) {
      switch (*a) {
        case 'R':
          c.fde_enc = r.fixed<uint8_t>();
          break;
        case 'L':
          r.fixed<uint8_t>();
          break;
        case 'P': {
          const uint8_t enc = r.fixed<uint8_t>();
          if (!skip_encoded(r, enc)) return false;
          break;
        }
        default:
          return false;  // 'S' (signal frame) and anything unknown
      }
      if (!r.ok || r.p > data_end) return false;
    }
    r.p = data_end;
  } else if (aug[0] != 0) {
    return false;
  }
  c.insns = r.p;
  c.end = r.end;
  return r.ok;
}

// The registers the rule model follows (DWARF numbers on x86-64).
constexpr uint64_t kRbp = 6, kRsp = 7, kRip = 16;

enum How : uint8_t { kSame, kAtCfa, kUndefined, kOther };

struct RegRule {
  How how = kSame;
  int64_t off = 0;
};

struct Row {
  bool cfa_is_reg = true;
  uint64_t cfa_reg = kRsp;
  int64_t cfa_off = 0;
  RegRule rbp, rsp, rip;
};

RegRule* tracked(Row& row, uint64_t reg) {
  switch (reg) {
    case kRbp:
      return &row.rbp;
    case kRsp:
      return &row.rsp;
    case kRip:
      return &row.rip;
    default:
      return nullptr;
  }
}

struct Interp {
  const Cie& cie;
  const dwarf_eh_bases& bases;
  Row row;
  Row initial;  // after the CIE's instructions, for DW_CFA_restore
  Row saved[8];
  unsigned nsaved = 0;

  void set(uint64_t reg, How how, int64_t off = 0) {
    if (RegRule* r = tracked(row, reg)) *r = RegRule{how, off};
  }

  // The instructions that define the CFA (def_cfa and its kin) from its register and offset, or
  // from an expression (not modelled). False: `op` is none of them.
  bool define_cfa(uint8_t op, Reader& r) {
    switch (op) {
      case 0x0c:  // def_cfa
        row.cfa_reg = r.uleb();
        row.cfa_off = static_cast<int64_t>(r.uleb());
        row.cfa_is_reg = true;
        return true;
      case 0x0d:  // def_cfa_register
        row.cfa_reg = r.uleb();
        row.cfa_is_reg = true;
        return true;
      case 0x0e:  // def_cfa_offset
        row.cfa_off = static_cast<int64_t>(r.uleb());
        return true;
      case 0x0f:  // def_cfa_expression
        row.cfa_is_reg = false;
        r.skip(r.uleb());
        return true;
      case 0x12:  // def_cfa_sf
        row.cfa_reg = r.uleb();
        row.cfa_off = r.sleb() * cie.data_align;
        row.cfa_is_reg = true;
        return true;
      case 0x13:  // def_cfa_offset_sf
        row.cfa_off = r.sleb() * cie.data_align;
        return true;
      default:
        return false;
    }
  }

  // Runs instructions while the location is <= target. False: unknown or malformed program.
  bool run(Reader r, uint64_t loc, uint64_t target) {
    while (r.p < r.end) {
      const uint8_t op = r.fixed<uint8_t>();
      const uint8_t low = op & 0x3f;
      uint64_t reg = 0, advance = 0;
      bool is_advance = false;
      switch (op & 0xc0) {
        case 0x40:
          advance = low, is_advance = true;
          break;
        case 0x80:
          set(low, kAtCfa, static_cast<int64_t>(r.uleb()) * cie.data_align);
          break;
        case 0xc0: {
          RegRule* cur = tracked(row, low);
          if (cur) *cur = *tracked(initial, low);
          break;
        }
        default:
          switch (op) {
            case 0x00:
              break;    // nop
            case 0x01:  // set_loc
              if (!read_encoded(r, cie.fde_enc, bases, true, loc)) return false;
              if (loc > target) return true;
              break;
            case 0x02:
              advance = r.fixed<uint8_t>(), is_advance = true;
              break;
            case 0x03:
              advance = r.fixed<uint16_t>(), is_advance = true;
              break;
            case 0x04:
              advance = r.fixed<uint32_t>(), is_advance = true;
              break;
            case 0x05:  // offset_extended
              reg = r.uleb();
              set(reg, kAtCfa, static_cast<int64_t>(r.uleb()) * cie.data_align);
              break;
            case 0x06:  // restore_extended
              reg = r.uleb();
              if (RegRule* cur = tracked(row, reg)) *cur = *tracked(initial, reg);
              break;
            case 0x07:
              set(r.uleb(), kUndefined);
              break;
            case 0x08:
              set(r.uleb(), kSame);
              break;
            case 0x09:  // register: a tracked register kept in another one is not modelled
              reg = r.uleb();
              r.uleb();
              set(reg, kOther);
              break;
            case 0x0a:  // remember_state (libgcc saves the CFA rule with the registers)
              if (nsaved == 8) return false;
              saved[nsaved++] = row;
              break;
            case 0x0b:  // restore_state
              if (nsaved == 0) return false;
              row = saved[--nsaved];
              break;
            case 0x10:  // expression
            case 0x16:  // val_expression
              reg = r.uleb();
              r.skip(r.uleb());
              set(reg, kOther);
              break;
            case 0x11:  // offset_extended_sf
              reg = r.uleb();
              set(reg, kAtCfa, r.sleb() * cie.data_align);
              break;
            case 0x14:  // val_offset
              reg = r.uleb();
              r.uleb();
              set(reg, kOther);
              break;
            case 0x15:  // val_offset_sf
              reg = r.uleb();
              r.sleb();
              set(reg, kOther);
              break;
            case 0x2e:
              r.uleb();
              break;    // GNU_args_size
            case 0x2f:  // GNU_negative_offset_extended
              reg = r.uleb();
              set(reg, kAtCfa, -static_cast<int64_t>(r.uleb()) * cie.data_align);
              break;
            default:
              if (!define_cfa(op, r)) return false;  // unknown
          }
      }
      if (!r.ok) return false;
      if (is_advance) {
        loc += advance * cie.code_align;
        if (loc > target) return true;
      }
    }
    return true;
  }
};

}  // namespace

uint64_t compute_rule(uint64_t pc) noexcept {
  dwarf_eh_bases bases{};
  const auto* fde =
      static_cast<const uint8_t*>(_Unwind_Find_FDE(reinterpret_cast<void*>(pc), &bases));
  if (!fde) return kUnsupportedRule;  // no unwind info, or the signal trampoline
  Reader r{fde, fde + 12};
  bool is64;
  if (!open_entry(r, is64)) return kUnsupportedRule;
  const uint8_t* id_field = r.p;
  const uint64_t cie_off = is64 ? r.fixed<uint64_t>() : r.fixed<uint32_t>();
  if (!r.ok || cie_off == 0 || cie_off > reinterpret_cast<uint64_t>(id_field)) {
    return kUnsupportedRule;
  }
  Cie cie;
  if (!parse_cie(id_field - cie_off, cie)) return kUnsupportedRule;
  uint64_t begin, range;
  if (!read_encoded(r, cie.fde_enc, bases, true, begin) ||
      !read_encoded(r, cie.fde_enc & 0x0f, bases, false, range) || pc < begin ||
      pc - begin >= range) {
    return kUnsupportedRule;
  }
  if (cie.has_z) r.skip(r.uleb());
  if (!r.ok) return kUnsupportedRule;

  Interp in{cie, bases, {}, {}, {}, 0};
  if (!in.run(Reader{cie.insns, cie.end}, 0, UINT64_MAX)) return kUnsupportedRule;
  in.initial = in.row;
  in.nsaved = 0;
  if (!in.run(r, begin, pc)) return kUnsupportedRule;

  const Row& row = in.row;
  if (row.rip.how == kUndefined) return kOutermost << 56;
  if (!row.cfa_is_reg || (row.cfa_reg != kRsp && row.cfa_reg != kRbp)) return kUnsupportedRule;
  if (row.cfa_off < INT32_MIN || row.cfa_off > INT32_MAX) return kUnsupportedRule;
  if (row.rsp.how != kSame) return kUnsupportedRule;
  if (row.rip.how != kAtCfa || row.rip.off < INT8_MIN || row.rip.off > INT8_MAX) {
    return kUnsupportedRule;
  }
  // libgcc treats an undefined callee-saved register like an unchanged one.
  const bool rbp_saved = row.rbp.how == kAtCfa;
  if (row.rbp.how == kOther || row.rbp.off < INT16_MIN || row.rbp.off > INT16_MAX) {
    return kUnsupportedRule;
  }
  return pack_frame(row.cfa_reg == kRbp, static_cast<int32_t>(row.cfa_off), rbp_saved,
                    static_cast<int16_t>(row.rbp.off), static_cast<int8_t>(row.rip.off));
}

}  // namespace cumemtrace::preload::cfi
