// Marks in the event model: how MARK/START/END records become external_annotations (names of
// pops and of start/end ranges resolved in the collector, devices from the marking thread), and
// snapshot requests, and the rank torch.distributed reports.
#include <catch2/catch.hpp>

#include "live/trace_model.h"

using namespace cumemtrace;
using wire::Kind;
using wire::MarkStage;

namespace {

constexpr uint64_t kStartRealtimeNs = 1'700'000'000'000'000'000ull;
constexpr uint64_t kStartMonotonicNs = 1'000'000'000ull;

struct Feeder {
  collect::TraceModel model{kStartRealtimeNs, kStartMonotonicNs, 0};
  collect::Symbolizer sym;
  uint64_t clock = kStartMonotonicNs;

  void mark(MarkStage stage, const std::string& name, uint32_t tid = 1, uint64_t range = 0) {
    collect::Record r;
    r.ev.kind = Kind::kMark;
    r.ev.aux = static_cast<uint64_t>(stage) | range << 8;
    r.ev.tid = tid;
    r.ev.device = -1;
    r.ev.flags = wire::kFlagStringRecord;
    r.ev.time_ns = clock += 1000;
    r.text = name;
    model.add(r);
  }
  void alloc(uint64_t addr, int device, uint32_t tid) {
    collect::Record r;
    r.ev.kind = Kind::kAlloc;
    r.ev.addr = addr;
    r.ev.size = 64;
    r.ev.device = static_cast<int16_t>(device);
    r.ev.tid = tid;
    r.ev.time_ns = clock += 1000;
    model.add(r);
  }
  std::vector<snap::Annotation> annotations() {
    return model.build(collect::ProcessInfo{7, 1, "/bin/app", {}, {}, "h"}, sym).annotations;
  }
};

using Row = std::tuple<std::string, std::string, int>;

std::vector<Row> rows(const std::vector<snap::Annotation>& as) {
  std::vector<Row> out;
  for (const auto& a : as) out.emplace_back(a.name, a.stage, a.device);
  return out;
}

}  // namespace

TEST_CASE("pops take the name of the thread's innermost push, per thread") {
  Feeder f;
  f.mark(MarkStage::kStart, "epoch", 1);
  f.mark(MarkStage::kStart, "other thread", 2);
  f.mark(MarkStage::kStart, "step", 1);
  f.mark(MarkStage::kEnd, "", 1);
  f.mark(MarkStage::kEnd, "", 2);
  f.mark(MarkStage::kEnd, "", 1);
  f.mark(MarkStage::kEnd, "", 1);  // one pop too many: dropped, not an unnamed END
  f.mark(MarkStage::kMark, "done", 3);
  REQUIRE(rows(f.annotations()) == std::vector<Row>{{"epoch", "START", 0},
                                                    {"other thread", "START", 0},
                                                    {"step", "START", 0},
                                                    {"step", "END", 0},
                                                    {"other thread", "END", 0},
                                                    {"epoch", "END", 0},
                                                    {"done", "MARK", 0}});
}

TEST_CASE("start/end ranges match by id across threads; an unknown id is dropped") {
  Feeder f;
  f.mark(MarkStage::kStart, "load", 1, 5);
  f.mark(MarkStage::kStart, "save", 1, 6);
  f.mark(MarkStage::kEnd, "", 2, 5);
  f.mark(MarkStage::kEnd, "", 2, 5);  // ended already
  f.mark(MarkStage::kEnd, "", 3, 99);
  f.mark(MarkStage::kEnd, "", 1, 6);
  REQUIRE(rows(f.annotations()) ==
          std::vector<Row>{
              {"load", "START", 0}, {"save", "START", 0}, {"load", "END", 0}, {"save", "END", 0}});
}

TEST_CASE("annotations carry the trace clock and the marking thread's latest device") {
  Feeder f;
  f.mark(MarkStage::kMark, "before", 1);
  f.alloc(0x1000, 2, 1);
  f.alloc(0x2000, 1, 9);
  f.mark(MarkStage::kMark, "after", 1);
  f.mark(MarkStage::kMark, "thread 9", 9);
  f.alloc(0x3000, 3, 1);
  f.mark(MarkStage::kMark, "moved", 1);
  const auto as = f.annotations();
  REQUIRE(rows(as) == std::vector<Row>{{"before", "MARK", 0},
                                       {"after", "MARK", 2},
                                       {"thread 9", "MARK", 1},
                                       {"moved", "MARK", 3}});
  // The first mark is 1 µs after the ring started: epoch microseconds of the same clock.
  REQUIRE(as[0].time_us == static_cast<int64_t>(kStartRealtimeNs / 1000) + 1);
  REQUIRE(as[3].time_us == as[0].time_us + 6);
}

TEST_CASE("a snapshot record is taken once, with its tag, and is no trace event") {
  Feeder f;
  collect::Record r;
  r.ev.kind = Kind::kSnapshot;
  r.ev.flags = wire::kFlagStringRecord;
  r.ev.time_ns = f.clock += 1000;
  r.text = "after load";
  f.model.add(r);
  REQUIRE(f.model.take_snapshot_request() == std::optional<std::string>("after load"));
  REQUIRE_FALSE(f.model.take_snapshot_request());
  REQUIRE(f.model.events_total() == 0);
}

TEST_CASE("a rank record adds torch.distributed's keys to the launcher's, never replaces theirs") {
  Feeder f;
  collect::Record r;
  r.ev.kind = Kind::kRankInfo;
  r.ev.flags = wire::kFlagStringRecord;
  r.ev.time_ns = f.clock += 1000;
  r.text = "torch.distributed.rank=3\ntorch.distributed.world_size=4\nRANK=9\nno equals sign";
  f.model.add(r);
  const collect::ProcessInfo info{7, 1, "/bin/app", {}, {{"RANK", "1"}, {"LOCAL_RANK", "1"}}, "h"};
  const auto tool = *f.model.build(info, f.sym).tool;
  REQUIRE(tool.rank == std::map<std::string, std::string>{{"LOCAL_RANK", "1"},
                                                          {"RANK", "1"},
                                                          {"torch.distributed.rank", "3"},
                                                          {"torch.distributed.world_size", "4"}});
  REQUIRE(f.model.events_total() == 0);
}
