// PyTorch's caching allocator: its entries, its segments tiled with blocks, adoption, totals.
#include <catch2/catch.hpp>

#include "live/torch_allocator.h"
#include "record_builder.h"

using namespace cumemtrace;
using snap::Action;
using test::record;
using test::torch_record;
using wire::Api;
using wire::Kind;
using wire::TorchAction;

namespace {

constexpr uint64_t MiB = 1 << 20;

struct Torch {
  collect::DeviceLedger ledger;
  collect::TraceLog trace{0, ledger};
  collect::DeviceAllocations memory{trace, ledger};
  collect::TorchAllocator torch{trace, memory};

  bool block(TorchAction a, uint64_t addr, uint64_t size, int32_t stack = -1) {
    return torch.on_block(torch_record(a, addr, size), 1, stack);
  }
  snap::Snapshot snapshot() const {
    snap::Snapshot s;
    trace.write(s);
    memory.write_segments(s);
    torch.write_segments(s);
    return s;
  }
};

}  // namespace

TEST_CASE("torch: a segment over the driver's allocation adopts it; one segment, PyTorch's") {
  Torch t;
  t.memory.on_alloc(record(Kind::kAlloc, Api::kMemAlloc, 0x1000000, 20 * MiB), 1, -1);
  t.block(TorchAction::kSegmentAlloc, 0x1000000, 20 * MiB, 5);
  t.block(TorchAction::kAlloc, 0x1000000, 3 * MiB, 6);
  const auto s = t.snapshot();
  REQUIRE(s.device_traces[0].size() == 2);  // the driver's two entries adopted
  CHECK(s.device_traces[0][0].action == Action::kSegmentAlloc);
  CHECK(s.device_traces[0][0].source == snap::Source::kPytorch);
  REQUIRE(s.segments.size() == 1);
  const auto& seg = s.segments[0];
  CHECK(seg.source == snap::Source::kPytorch);
  CHECK(seg.segment_type == "large");
  CHECK(seg.stack == 5);
  // 3 MiB rounded to 512 B; 17 MiB remain (> 1 MiB): split off inactive.
  REQUIRE(seg.blocks.size() == 2);
  CHECK(seg.blocks[0].size == 3 * MiB);
  CHECK(seg.blocks[0].state == "active_allocated");
  CHECK(seg.blocks[1].size == 17 * MiB);
  CHECK(seg.blocks[1].state == "inactive");
  CHECK(seg.allocated_size == 3 * MiB);
  CHECK(t.ledger.devices()[0].live == 20 * MiB);  // the driver's bytes stay the device's
}

TEST_CASE("torch: the large pool keeps a remainder of at most 1 MiB in the block") {
  Torch t;
  t.block(TorchAction::kSegmentAlloc, 0x1000000, 4 * MiB);
  t.block(TorchAction::kAlloc, 0x1000000, 3 * MiB + 100);
  const auto s = t.snapshot();
  REQUIRE(s.segments.size() == 1);
  REQUIRE(s.segments[0].blocks.size() == 1);
  CHECK(s.segments[0].blocks[0].size == 4 * MiB);
  CHECK(s.segments[0].blocks[0].requested_size == 3 * MiB + 100);
  // memory_allocated() counts the block, remainder included (the interval log's allocated bytes).
  CHECK(t.torch.allocated() == 4 * MiB);
}

TEST_CASE("torch: allocated bytes are blocks: split, unsplit, small and without a segment") {
  Torch t;
  t.block(TorchAction::kSegmentAlloc, 0x1000000, 20 * MiB);
  t.block(TorchAction::kAlloc, 0x1000000, 3 * MiB + 1);  // split: 3 MiB + 512 B
  t.block(TorchAction::kSegmentAlloc, 0x4000000, 2 * MiB);
  t.block(TorchAction::kAlloc, 0x4000000, 100);   // small pool: 512 B
  t.block(TorchAction::kAlloc, 0x9000000, 1000);  // no segment seen: rounded, 1024 B
  CHECK(t.torch.allocated() == 3 * MiB + 512 + 512 + 1024);
  t.block(TorchAction::kFreeRequested, 0x1000000, 3 * MiB + 1);
  CHECK(t.torch.allocated() == 512 + 1024);
}

TEST_CASE("torch: a completed free without a stack takes its request's") {
  Torch t;
  t.block(TorchAction::kSegmentAlloc, 0x1000000, 2 * MiB);
  t.block(TorchAction::kAlloc, 0x1000000, 512, 1);
  t.block(TorchAction::kFreeRequested, 0x1000000, 512, 2);
  CHECK(t.torch.allocated() == 0);  // pending free: not allocated
  CHECK(t.snapshot().segments[0].blocks[0].state == "active_pending_free");
  t.block(TorchAction::kFreeCompleted, 0x1000000, 512, -1);
  const auto s = t.snapshot();
  CHECK(s.device_traces[0].back().action == Action::kFreeCompleted);
  CHECK(s.device_traces[0].back().stack == 2);
  CHECK(s.segments[0].segment_type == "small");  // a 2 MiB segment is the small pool's
}

TEST_CASE("torch: mapped pieces form one expandable segment until an unmap cuts them") {
  Torch t;
  t.block(TorchAction::kSegmentMap, 0x4000000, 20 * MiB);
  t.block(TorchAction::kSegmentMap, 0x4000000 + 20 * MiB, 20 * MiB);
  auto s = t.snapshot();
  REQUIRE(s.segments.size() == 1);
  CHECK(s.segments[0].total_size == 40 * MiB);
  CHECK(s.segments[0].is_expandable);
  t.block(TorchAction::kSegmentUnmap, 0x4000000 + 10 * MiB, 4 * MiB);
  s = t.snapshot();
  REQUIRE(s.segments.size() == 2);
  CHECK(s.segments[0].total_size == 10 * MiB);
  CHECK(s.segments[1].address == 0x4000000 + 14 * MiB);
  CHECK(s.segments[1].total_size == 26 * MiB);
  std::vector<uint64_t> reserved(1, 0);
  t.torch.add_reserved(reserved);
  CHECK(reserved[0] == 36 * MiB);
}

TEST_CASE("torch: PyTorch's OOM is an entry with the device's free bytes and asks a snapshot") {
  Torch t;
  CHECK_FALSE(t.block(TorchAction::kAlloc, 0x1000, 512));
  CHECK(t.block(TorchAction::kOom, 777, 30 * MiB));
  const auto s = t.snapshot();  // a copy: a reference into the temporary would dangle
  const auto& e = s.device_traces[0].back();
  CHECK(e.action == Action::kOom);
  CHECK(e.addr == 0);
  CHECK(e.device_free == 777);
  CHECK(e.size == 30 * MiB);
}

TEST_CASE("torch: info keeps known capture modes only") {
  Torch t;
  t.torch.on_info("version=2.11.0\ncapture=blocks\nexpandable_segments=1\nnoise", 0);
  REQUIRE(t.torch.info());
  CHECK(t.torch.info()->version == "2.11.0");
  CHECK(t.torch.block_capture());
  CHECK(t.torch.info()->expandable_segments);
  t.torch.on_info("capture=everything", 0);
  CHECK(t.torch.info()->capture == "off");
  CHECK_FALSE(t.torch.block_capture());
}

TEST_CASE("torch: the allocator's settings are recorded with their times and tile the blocks") {
  Torch t;
  // A fraction set before the capture's report (kept), the report with the configuration the
  // program started with, a change of settings, a private pool.
  t.torch.on_info(
      "event=memory_fraction\ndevice=0\nfraction=0.25\nallowed_bytes=2147483648\n"
      "device_total=8589934592",
      10);
  t.torch.on_info(
      "version=2.11.0\nbackend=native\ncapture=blocks\nexpandable_segments=0\n"
      "alloc_conf=roundup_power2_divisions:4",
      20);
  t.torch.on_info("event=alloc_conf\nalloc_conf=max_split_size_mb:128", 30);
  t.torch.on_info("event=private_pool\nkind=cuda_graph", 40);
  t.torch.on_info("event=private_pool\nkind=anything", 50);  // unknown kinds are not kept
  const auto& info = t.torch.info();
  REQUIRE(info);
  REQUIRE(info->alloc_confs.size() == 2);
  CHECK(info->alloc_confs[0].time_us == 20);
  CHECK(info->alloc_confs[0].alloc_conf == "roundup_power2_divisions:4");
  CHECK(info->alloc_confs[1].time_us == 30);
  CHECK(info->alloc_confs[1].alloc_conf == "max_split_size_mb:128");
  REQUIRE(info->memory_fractions.size() == 1);
  const auto& f = info->memory_fractions[0];
  CHECK(f.time_us == 10);
  CHECK(f.fraction == "0.25");
  CHECK(f.allowed_bytes == 2147483648);
  CHECK(f.device_total == 8589934592);
  REQUIRE(info->private_pools.size() == 1);
  CHECK(info->private_pools[0].kind == "cuda_graph");
}

TEST_CASE("torch: blocks are tiled by the recorded configuration's rounding") {
  Torch t;
  t.torch.on_info("version=2.11.0\ncapture=blocks\nalloc_conf=roundup_power2_divisions:4", 0);
  t.block(TorchAction::kSegmentAlloc, 0x1000000, 20 * MiB, 5);
  // 5 MiB + 100 B lies in [4, 8) MiB, cut in 4 divisions of 1 MiB: its block is 6 MiB (the
  // default's would be 5 MiB + 512 B).
  t.block(TorchAction::kAlloc, 0x1000000, 5 * MiB + 100, 6);
  const auto s = t.snapshot();
  REQUIRE(s.segments.size() == 1);
  REQUIRE(s.segments[0].blocks.size() == 2);
  CHECK(s.segments[0].blocks[0].size == 6 * MiB);
  CHECK(s.segments[0].blocks[0].requested_size == 5 * MiB + 100);
  CHECK(s.segments[0].blocks[1].size == 14 * MiB);
}
