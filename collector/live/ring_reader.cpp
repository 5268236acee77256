#include "live/ring_reader.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace cumemtrace::collect {

RingReader::RingReader(int memfd) {
  struct stat st {};
  if (fstat(memfd, &st) != 0) {
    ::close(memfd);
    throw CorruptRing(fmt::format("cannot stat the ring: {}", strerror(errno)));
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size < wire::kHeaderBytes) {
    ::close(memfd);
    throw CorruptRing(fmt::format("ring too small ({} bytes)", size));
  }
  void* map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  ::close(memfd);
  if (map == MAP_FAILED) throw CorruptRing(fmt::format("cannot map the ring: {}", strerror(errno)));
  bytes_ = size;
  inode_ = st.st_ino;
  header_ = static_cast<wire::RingHeader*>(map);
  const uint64_t cap = header_->capacity;
  std::string why;
  if (header_->magic != wire::kMagic) {
    why = "bad magic";
  } else if (header_->version != wire::kWireVersion) {
    why = fmt::format("ring format version {} (this collector reads {})", header_->version,
                      wire::kWireVersion);
  } else if (cap < wire::kMinCapacity || cap > wire::kMaxCapacity || (cap & (cap - 1)) != 0) {
    why = fmt::format("bad capacity {}", cap);
  } else if (wire::ring_bytes(cap) != size) {
    why = fmt::format("ring size {} does not match capacity {}", size, cap);
  }
  if (why.empty()) {
    try {
      clock_.emplace(*header_);
    } catch (const CorruptRing& e) {
      why = e.what();
    }
  }
  if (!why.empty()) {
    munmap(map, size);
    header_ = nullptr;
    throw CorruptRing(why);
  }
  slots_ = reinterpret_cast<wire::Slot*>(static_cast<char*>(map) + wire::kHeaderBytes);
  mask_ = cap - 1;
  tail_ = header_->tail.load(std::memory_order_acquire);
}

RingReader::~RingReader() {
  if (header_) munmap(header_, bytes_);
}

void RingReader::mark_collector(int pid, wire::CollectorState state) {
  header_->collector_pid.store(pid, std::memory_order_relaxed);
  header_->collector_state.store(state, std::memory_order_release);
}

uint64_t RingReader::dropped() const {
  return header_->dropped.load(std::memory_order_acquire);
}

uint64_t RingReader::unpublished_slots() const {
  const uint64_t head = header_->head.load(std::memory_order_acquire);
  return head > tail_ ? head - tail_ : 0;
}

size_t RingReader::drain(const std::function<void(const Record&)>& fn, size_t max_records) {
  size_t n = 0;
  uint64_t t = tail_;
  clock_->refresh();
  while (n < max_records) {
    wire::Slot& s = slots_[t & mask_];
    if (s.seq.load(std::memory_order_acquire) != t + 1) break;
    Record& r = scratch_;
    r.ticket = t;
    std::memcpy(&r.ev, s.payload, sizeof r.ev);
    const uint32_t extra = r.ev.extra_slots;
    if (extra > wire::kMaxExtraSlots) {
      throw CorruptRing(fmt::format("record {} claims {} continuation slots", t, extra));
    }
    bool complete = true;
    for (uint32_t i = 0; i < extra; ++i) {
      if (slots_[(t + 1 + i) & mask_].seq.load(std::memory_order_acquire) != t + 2 + i) {
        complete = false;
        break;
      }
    }
    if (!complete) break;  // the producer is still writing its continuation slots
    r.frames.clear();
    r.pyframes.clear();
    r.text.clear();
    const size_t capacity_bytes = size_t{extra} * wire::kPayloadBytes;
    if (r.ev.flags & wire::kFlagStringRecord) {
      if (r.ev.size > capacity_bytes) {
        throw CorruptRing(
            fmt::format("record {} string of {} bytes in {} slots", t, r.ev.size, extra));
      }
      // An ownership walk's payload is whole (data pointer, bytes) pairs.
      if (r.ev.kind == wire::Kind::kTorchOwners && r.ev.size % (2 * sizeof(uint64_t)) != 0) {
        throw CorruptRing(
            fmt::format("record {} ownership walk of {} bytes, not whole pairs", t, r.ev.size));
      }
      r.text.resize(r.ev.size);
      for (size_t off = 0; off < r.ev.size; off += wire::kPayloadBytes) {
        const size_t len = std::min(wire::kPayloadBytes, static_cast<size_t>(r.ev.size - off));
        std::memcpy(r.text.data() + off,
                    slots_[(t + 1 + off / wire::kPayloadBytes) & mask_].payload, len);
      }
    } else if (r.ev.kind == wire::Kind::kTorchOwners) {
      throw CorruptRing(fmt::format("record {} ownership walk without its byte payload", t));
    } else {
      const size_t nf = r.ev.nframes;
      const size_t npy = r.ev.npyframes;
      if ((nf + 2 * npy) * sizeof(uint64_t) > capacity_bytes || nf > wire::kMaxStackDepth ||
          npy > wire::kMaxPythonFrames) {
        throw CorruptRing(fmt::format("record {} has {}+{} frames in {} slots", t, nf, npy, extra));
      }
      auto word = [&](size_t i) {
        uint64_t v;
        std::memcpy(&v,
                    slots_[(t + 1 + i / wire::kFramesPerSlot) & mask_].payload +
                        (i % wire::kFramesPerSlot) * sizeof(uint64_t),
                    sizeof v);
        return v;
      };
      r.frames.resize(nf);
      for (size_t i = 0; i < nf; ++i) r.frames[i] = word(i);
      r.pyframes.resize(2 * npy);
      for (size_t i = 0; i < 2 * npy; ++i) r.pyframes[i] = word(nf + i);
    }
    r.ev.time_ns = clock_->to_monotonic_ns(r.ev.time_ns);
    fn(r);
    t += 1 + extra;
    ++n;
    // Free slots in batches so that waiting producers see space soon.
    if ((n & 255) == 0) header_->tail.store(t, std::memory_order_release);
  }
  tail_ = t;
  header_->tail.store(t, std::memory_order_release);
  return n;
}

}  // namespace cumemtrace::collect
