// Contract: a ring exactly as the preload lays it out (memfd, header, slots) with the preload's
// producer attached, for tests and benchmarks that drive producer and reader in one process.
// Throws std::runtime_error when the memfd cannot be made.
#pragma once

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <new>
#include <stdexcept>

#include "core/ring_producer.h"
#include "live/ring_reader.h"

namespace cumemtrace::testing {

struct MemfdRing {
  int fd = -1;
  void* map = nullptr;
  size_t bytes = 0;
  wire::RingHeader* hdr = nullptr;
  preload::RingProducer producer;

  explicit MemfdRing(uint64_t capacity, uint64_t max_wait_ns = 1'000'000'000) {
    bytes = wire::ring_bytes(capacity);
    fd = static_cast<int>(syscall(SYS_memfd_create, "test-ring", 0));
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      throw std::runtime_error("cannot create the test ring's memfd");
    }
    map = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) throw std::runtime_error("cannot map the test ring");
    hdr = new (map) wire::RingHeader{};
    hdr->magic = wire::kMagic;
    hdr->version = wire::kWireVersion;
    hdr->capacity = capacity;
    producer.attach(hdr,
                    reinterpret_cast<wire::Slot*>(static_cast<char*>(map) + wire::kHeaderBytes),
                    max_wait_ns);
  }
  ~MemfdRing() {
    munmap(map, bytes);
    if (fd >= 0) close(fd);
  }
  MemfdRing(const MemfdRing&) = delete;
  MemfdRing& operator=(const MemfdRing&) = delete;

  // The reader takes ownership of a duplicate, like the collector receiving it over a socket.
  collect::RingReader reader() { return collect::RingReader(dup(fd)); }
};

}  // namespace cumemtrace::testing
