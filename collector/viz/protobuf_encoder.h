// Contract: the part of protobuf's wire format (protobuf.dev/programming-guides/encoding) that the
// pprof writer needs, written by hand so the collector links no protobuf library: varint fields
// (wire type 0: uint64, int64 as two's complement, bool), length-delimited fields (wire type 2:
// strings, bytes, nested messages) and packed repeated varints (proto3's default for repeated
// scalars). A message is built bottom-up: fill the inner ProtoMessage, then add it to its parent
// with message(). Fields are written in the order added; proto3 readers accept any order.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cumemtrace::viz {

class ProtoMessage {
 public:
  // A varint field; nothing is written for 0 (proto3's default value, which readers assume).
  void uint(uint32_t field, uint64_t v) {
    if (v == 0) return;
    key(field, 0);
    varint(v);
  }
  void int64(uint32_t field, int64_t v) { uint(field, static_cast<uint64_t>(v)); }
  void boolean(uint32_t field, bool v) { uint(field, v ? 1 : 0); }
  // A length-delimited field, written even when empty (a repeated string's "" is an element).
  void bytes(uint32_t field, std::string_view b) {
    key(field, 2);
    varint(b.size());
    buf_.append(b);
  }
  void message(uint32_t field, const ProtoMessage& m) { bytes(field, m.buf_); }
  // A packed repeated varint field; nothing for an empty list.
  void packed(uint32_t field, const std::vector<uint64_t>& vs) {
    if (vs.empty()) return;
    ProtoMessage body;
    for (uint64_t v : vs) body.varint(v);
    bytes(field, body.buf_);
  }
  const std::string& data() const { return buf_; }

 private:
  void key(uint32_t field, uint32_t wire_type) { varint(uint64_t{field} << 3 | wire_type); }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      buf_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    buf_.push_back(static_cast<char>(v));
  }
  std::string buf_;
};

}  // namespace cumemtrace::viz
