#include "stacks/python_memory.h"

#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/config.h"
#include "core/log.h"

namespace cumemtrace::preload::pymem {

RawApi g_raw;
std::atomic<bool> g_raw_on{false};

void raw_off(const char* why) noexcept {
  if (g_raw_on.exchange(false, std::memory_order_relaxed) && config().debug) {
    print_line("Python frames of threads without the GIL are off for this process: ", why);
  }
}

bool fetch_checked(void* dst, uintptr_t src, size_t n) noexcept {
  iovec local{dst, n};
  iovec remote{reinterpret_cast<void*>(src), n};
  const ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
  if (got < 0 && errno != EFAULT) raw_off("process_vm_readv is not permitted");
  return got == static_cast<ssize_t>(n);
}

namespace {

// Characters of a file or function name read at most.
constexpr size_t kMaxChars = 256;

struct StrHead {
  uint64_t hash;   // Python's cached hash, or ~0 (-1) when not computed yet
  int64_t length;  // code points
  uint32_t state;
};

bool read_str_head(uintptr_t s, StrHead* h, bool checked) noexcept {
  unsigned char copy[kStrState + 4];
  const unsigned char* b = plausible_object(s) ? view(copy, s, sizeof copy, checked) : nullptr;
  if (!b) return false;
  if (field<uintptr_t>(b, kObType) != g_raw.str_type) return false;  // exact str only
  h->hash = field<uint64_t>(b, kStrHash);
  h->length = field<int64_t>(b, kStrLength);
  h->state = field<uint32_t>(b, kStrState);
  const unsigned kind = (h->state >> kStrKindShift) & 7;
  return h->length >= 0 && (kind == 1 || kind == 2 || kind == 4);
}

size_t put_utf8(char* out, size_t room, uint32_t c) noexcept {
  if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) c = '?';  // lone surrogates: never emitted
  if (c < 0x80) {
    if (room < 1) return 0;
    out[0] = c == 0 ? '?' : static_cast<char>(c);  // NUL separates the wire's fields
    return 1;
  }
  if (c < 0x800) {
    if (room < 2) return 0;
    out[0] = static_cast<char>(0xC0 | (c >> 6));
    out[1] = static_cast<char>(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    if (room < 3) return 0;
    out[0] = static_cast<char>(0xE0 | (c >> 12));
    out[1] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out[2] = static_cast<char>(0x80 | (c & 0x3F));
    return 3;
  }
  if (room < 4) return 0;
  out[0] = static_cast<char>(0xF0 | (c >> 18));
  out[1] = static_cast<char>(0x80 | ((c >> 12) & 0x3F));
  out[2] = static_cast<char>(0x80 | ((c >> 6) & 0x3F));
  out[3] = static_cast<char>(0x80 | (c & 0x3F));
  return 4;
}

// A 64-bit hash of n bytes, eight at a time (names are hashed at every sight).
uint64_t hash_bytes(const unsigned char* p, size_t n) noexcept {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
  return h ^ (h >> 29);
}

}  // namespace

bool read_str(uintptr_t s, char* out, size_t room, size_t* len, bool checked) noexcept {
  *len = 0;
  StrHead h;
  if (!read_str_head(s, &h, checked)) return false;
  if (!(h.state & kStrCompact)) {
    if (room) out[(*len)++] = '?';
    return true;
  }
  const unsigned kind = (h.state >> kStrKindShift) & 7;
  const bool ascii = h.state & kStrAscii;
  if (ascii && kind != 1) return false;
  const size_t chars =
      static_cast<size_t>(h.length) < kMaxChars ? static_cast<size_t>(h.length) : kMaxChars;
  unsigned char data[kMaxChars * 4];
  const uintptr_t at = s + (ascii ? g_raw.layout.ascii_size : g_raw.layout.compact_size);
  if (chars && !fetch(data, at, chars * kind, checked)) return false;
  for (size_t i = 0; i < chars; ++i) {
    uint32_t c = kind == 1   ? data[i]
                 : kind == 2 ? field<uint16_t>(data, static_cast<unsigned>(2 * i))
                             : field<uint32_t>(data, static_cast<unsigned>(4 * i));
    if (ascii && c >= 0x80) c = '?';
    const size_t w = put_utf8(out + *len, room - *len, c);
    if (w == 0) break;
    *len += w;
  }
  return true;
}

bool str_key(uintptr_t s, uint64_t* key, bool checked) noexcept {
  StrHead h;
  if (!read_str_head(s, &h, checked)) return false;
  if (h.hash != ~uint64_t{0}) {
    *key = h.hash;
    return true;
  }
  const size_t chars =
      static_cast<size_t>(h.length) < kMaxChars ? static_cast<size_t>(h.length) : kMaxChars;
  unsigned char text[kMaxChars * 4];
  if ((h.state & kStrCompact) && (h.state & kStrAscii)) {
    const uintptr_t data = s + g_raw.layout.ascii_size;
    if (!checked) {
      *key = hash_bytes(reinterpret_cast<const unsigned char*>(data), chars);
      return true;
    }
    if (chars && !fetch(text, data, chars, checked)) return false;
    *key = hash_bytes(text, chars);
    return true;
  }
  size_t n = 0;
  if (!read_str(s, reinterpret_cast<char*>(text), sizeof text, &n, checked)) return false;
  *key = hash_bytes(text, n) ^ 0x5bd1e995;  // apart from the ASCII keys
  return true;
}

}  // namespace cumemtrace::preload::pymem
