// Contract: the strict reader's JSON scanner (internal to collector/snapshot/). It accepts exactly
// RFC 8259 JSON as nlohmann::json does and drives the same SAX calls, but scans spans in place;
// errors are ReadError lines "NAME:offset N: invalid JSON (WHAT)". Before an array it asks the
// handler whether a "frames" list comes (frames_next) and offers its raw text (reuse_frames), so
// a stack seen before is not parsed again.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "snapshot/read_error.h"

namespace cumemtrace::snap::detail {

// A JSON scanner that drives the same SAX handler as nlohmann::json::sax_parse, several times
// faster: nlohmann's lexer reads through an input adapter one character at a time and appends
// each to a token string, which made a 1 M-event snapshot take ~10 s to read. This one scans
// spans in place. It accepts exactly RFC 8259 JSON as nlohmann does (UTF-8 validated, surrogate
// pairs checked, leading BOM skipped, nothing after the value); read_snapshot_reference keeps
// the nlohmann path so tests and the fuzzer compare the two.
template <typename Sax>
class Scanner {
 public:
  Scanner(std::string_view text, const std::string& name, Sax& sax, const char** pos)
      : begin_(text.data()),
        p_(text.data()),
        end_(text.data() + text.size()),
        name_(name),
        sax_(sax),
        pos_(pos) {}

  void run() {
    if (end_ - p_ >= 3 && static_cast<unsigned char>(p_[0]) == 0xEF &&
        static_cast<unsigned char>(p_[1]) == 0xBB && static_cast<unsigned char>(p_[2]) == 0xBF)
      p_ += 3;
    std::string stack;  // '{' or '[' per open container
    skip_ws();
    for (;;) {
      // A value starts here.
      if (p_ == end_) fail("expected a value, found the end of the input");
      switch (*p_) {
        case '{':
          ++p_;
          sync();
          sax_.start_object(std::size_t(-1));
          stack.push_back('{');
          skip_ws();
          if (p_ < end_ && *p_ == '}') {
            ++p_;
            sync();
            sax_.end_object();
            stack.pop_back();
          } else {
            read_key();
            continue;
          }
          break;
        case '[':
          if (sax_.frames_next()) {
            if (const char* close = matching_bracket(p_)) {
              if (sax_.reuse_frames(std::string_view(p_, static_cast<size_t>(close + 1 - p_)))) {
                p_ = close + 1;
                sync();
                break;
              }
            }
          }
          ++p_;
          sync();
          sax_.start_array(std::size_t(-1));
          stack.push_back('[');
          skip_ws();
          if (p_ < end_ && *p_ == ']') {
            ++p_;
            sync();
            sax_.end_array();
            stack.pop_back();
          } else {
            continue;
          }
          break;
        case '"':
          read_string();
          sax_.string(buf_);
          break;
        case 't':
          literal("true");
          sax_.boolean(true);
          break;
        case 'f':
          literal("false");
          sax_.boolean(false);
          break;
        case 'n':
          literal("null");
          sax_.null();
          break;
        default:
          number();
          break;
      }
      // After a value: close containers or move to the next element.
      for (;;) {
        skip_ws();
        if (stack.empty()) {
          if (p_ != end_) fail("expected the end of the input after the top-level value");
          return;
        }
        if (p_ == end_) fail("unexpected end of the input");
        const char c = *p_;
        if (c == ',') {
          ++p_;
          skip_ws();
          if (stack.back() == '{') read_key();
          break;
        }
        if (c == (stack.back() == '{' ? '}' : ']')) {
          ++p_;
          sync();
          if (stack.back() == '{') {
            sax_.end_object();
          } else {
            sax_.end_array();
          }
          stack.pop_back();
          continue;
        }
        fail(stack.back() == '{' ? "expected ',' or '}' after an object member"
                                 : "expected ',' or ']' after an array element");
      }
    }
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    throw ReadError(fmt::format("{}:offset {}: invalid JSON ({})", name_, p_ - begin_, what));
  }
  void sync() { *pos_ = p_; }

  // The bracket closing the container opened at q, skipping strings; nullptr when the text ends
  // first or brackets do not pair up (then the normal parse reports the error).
  const char* matching_bracket(const char* q) const {
    std::string kinds;
    for (; q < end_; ++q) {
      const char c = *q;
      if (c == '"') {
        // memchr to the next quote; a quote preceded by an odd run of backslashes is escaped.
        const char* open = q;
        for (;;) {
          q = static_cast<const char*>(std::memchr(q + 1, '"', static_cast<size_t>(end_ - q - 1)));
          if (q == nullptr) return nullptr;
          size_t backslashes = 0;
          for (const char* b = q - 1; b > open && *b == '\\'; --b) ++backslashes;
          if (backslashes % 2 == 0) break;
        }
      } else if (c == '[' || c == '{') {
        kinds.push_back(c == '[' ? ']' : '}');
      } else if (c == ']' || c == '}') {
        if (kinds.empty() || kinds.back() != c) return nullptr;
        kinds.pop_back();
        if (kinds.empty()) return q;
      }
    }
    return nullptr;
  }

  void skip_ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  void read_key() {
    if (p_ == end_ || *p_ != '"') fail("expected a string as object key");
    read_string();
    sax_.key(buf_);
    skip_ws();
    if (p_ == end_ || *p_ != ':') fail("expected ':' after an object key");
    ++p_;
    skip_ws();
  }

  void literal(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word)
      fail("expected a value");
    p_ += word.size();
    sync();
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  unsigned read_u4() {
    if (end_ - p_ < 4) fail("expected four hex digits after \\u");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = hex(p_[i]);
      if (h < 0) fail("expected four hex digits after \\u");
      v = v * 16 + static_cast<unsigned>(h);
    }
    p_ += 4;
    return v;
  }
  void put_utf8(unsigned cp) {
    if (cp < 0x80) {
      buf_.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      buf_.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      buf_.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      buf_.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      buf_.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      buf_.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      buf_.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      buf_.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      buf_.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      buf_.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  // Validates one UTF-8 sequence starting at p_ (RFC 3629: no overlongs, no surrogates, at most
  // U+10FFFF) and advances past it.
  void utf8_sequence() {
    const auto* u = reinterpret_cast<const unsigned char*>(p_);
    const auto left = end_ - p_;
    auto cont = [&](int i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
      return i < left && u[i] >= lo && u[i] <= hi;
    };
    int n = 0;
    if (u[0] >= 0xC2 && u[0] <= 0xDF) {
      n = cont(1) ? 2 : 0;
    } else if (u[0] == 0xE0) {
      n = cont(1, 0xA0) && cont(2) ? 3 : 0;
    } else if ((u[0] >= 0xE1 && u[0] <= 0xEC) || u[0] == 0xEE || u[0] == 0xEF) {
      n = cont(1) && cont(2) ? 3 : 0;
    } else if (u[0] == 0xED) {
      n = cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
    } else if (u[0] == 0xF0) {
      n = cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
    } else if (u[0] >= 0xF1 && u[0] <= 0xF3) {
      n = cont(1) && cont(2) && cont(3) ? 4 : 0;
    } else if (u[0] == 0xF4) {
      n = cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
    }
    if (n == 0) fail("invalid UTF-8 in a string");
    p_ += n;
  }

  // Reads a string starting at the opening quote into buf_.
  void read_string() {
    ++p_;
    buf_.clear();
    for (;;) {
      const char* run = p_;
      // Eight bytes at a time while none is a quote, a backslash, a control or a non-ASCII byte.
      while (end_ - p_ >= 8) {
        uint64_t x;
        std::memcpy(&x, p_, 8);
        constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
        const uint64_t q = x ^ (kOnes * '"'), b = x ^ (kOnes * '\\');
        const uint64_t special =
            ((q - kOnes) & ~q) | ((b - kOnes) & ~b) | ((x - kOnes * 0x20) & ~x) | x;
        if (special & kHigh) break;
        p_ += 8;
      }
      while (p_ < end_) {
        const auto c = static_cast<unsigned char>(*p_);
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
        ++p_;
      }
      buf_.append(run, static_cast<size_t>(p_ - run));
      if (p_ == end_) fail("unterminated string");
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        sync();
        return;
      }
      if (c < 0x20) fail("control character in a string (must be escaped)");
      if (c >= 0x80) {
        const char* start = p_;
        utf8_sequence();
        buf_.append(start, static_cast<size_t>(p_ - start));
        continue;
      }
      // Backslash escape.
      ++p_;
      if (p_ == end_) fail("unterminated string");
      const char e = *p_++;
      switch (e) {
        case '"':
          buf_.push_back('"');
          break;
        case '\\':
          buf_.push_back('\\');
          break;
        case '/':
          buf_.push_back('/');
          break;
        case 'b':
          buf_.push_back('\b');
          break;
        case 'f':
          buf_.push_back('\f');
          break;
        case 'n':
          buf_.push_back('\n');
          break;
        case 'r':
          buf_.push_back('\r');
          break;
        case 't':
          buf_.push_back('\t');
          break;
        case 'u': {
          unsigned cp = read_u4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u')
              fail("expected a low surrogate \\uDC00-\\uDFFF after a high surrogate");
            p_ += 2;
            const unsigned lo = read_u4();
            if (lo < 0xDC00 || lo > 0xDFFF)
              fail("expected a low surrogate \\uDC00-\\uDFFF after a high surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("a low surrogate must follow a high surrogate");
          }
          put_utf8(cp);
          break;
        }
        default:
          --p_;
          fail("invalid escape in a string");
      }
    }
  }

  void number() {
    const char* start = p_;
    bool negative = false;
    if (p_ < end_ && *p_ == '-') {
      negative = true;
      ++p_;
    }
    if (p_ == end_ || !(*p_ >= '0' && *p_ <= '9')) fail("expected a value");
    bool integral = true;
    uint64_t v = 0;
    bool overflow = false;
    if (*p_ == '0') {
      ++p_;
    } else {
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
        const auto d = static_cast<uint64_t>(*p_ - '0');
        if (v > (UINT64_MAX - d) / 10) overflow = true;
        v = v * 10 + d;
        ++p_;
      }
    }
    if (p_ < end_ && *p_ == '.') {
      integral = false;
      ++p_;
      if (p_ == end_ || !(*p_ >= '0' && *p_ <= '9')) fail("expected a digit after '.'");
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      integral = false;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !(*p_ >= '0' && *p_ <= '9')) fail("expected a digit in the exponent");
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    sync();
    if (integral && !overflow) {
      if (!negative) {
        sax_.number_unsigned(v);
        return;
      }
      if (v <= static_cast<uint64_t>(INT64_MAX) + 1) {
        sax_.number_integer(v == static_cast<uint64_t>(INT64_MAX) + 1 ? INT64_MIN
                                                                      : -static_cast<int64_t>(v));
        return;
      }
    }
    // Like nlohmann: what no 64-bit integer holds is a floating-point number.
    buf_.assign(start, static_cast<size_t>(p_ - start));
    sax_.number_float(std::strtod(buf_.c_str(), nullptr), buf_);
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  const std::string& name_;
  Sax& sax_;
  const char** pos_;
  std::string buf_;
};

}  // namespace cumemtrace::snap::detail
