// The strict reader's half for PyTorch's own objects: the top level, segments, blocks, frames
// and trace entries (their keys: snapshot_read_handler.h). Their rules are PyTorch's: a block's
// state and an entry's action are names from a fixed list, an oom entry carries device_free
// where others carry addr, and a category PyTorch's profiler names is "unknown", never an error.
#include <fmt/format.h>

#include "snapshot/snapshot_read_handler.h"

namespace cumemtrace::snap::detail {

void Handler::root_field(const Level& l) {
  fail(static_cast<RootKey>(l.key) == RootKey::allocator_settings ||
               static_cast<RootKey>(l.key) == RootKey::cumemtrace
           ? "expected an object"
           : "expected an array");
}

bool Handler::root_start(const Level& l, bool object, std::string_view kn) {
  switch (static_cast<RootKey>(l.key)) {
    case RootKey::segments:
      need(object, false);
      push(C::kSegments, kn);
      return true;
    case RootKey::device_traces:
      need(object, false);
      snap_.device_traces.clear();
      push(C::kTraces, kn);
      return true;
    case RootKey::allocator_settings:
      need(object, true);
      push(C::kSettings, kn);
      return true;
    case RootKey::external_annotations:
      need(object, false);
      push(C::kObjects, kn, &annotation_kind(), &snap_.annotations);
      return true;
    case RootKey::cumemtrace:
      need(object, true);
      snap_.tool.emplace();
      push(C::kObject, kn, &tool_kind(), &*snap_.tool);
      return true;
  }
  return false;
}

void Handler::segment_field(const Level& l, const Val& v) {
  switch (static_cast<SegKey>(l.key)) {
    case SegKey::device:
      seg_.device = device(v);
      return;
    case SegKey::address:
      seg_.address = u64(v);
      return;
    case SegKey::total_size:
      seg_.total_size = u64(v);
      return;
    case SegKey::allocated_size:
      seg_.allocated_size = u64(v);
      return;
    case SegKey::active_size:
      seg_.active_size = u64(v);
      return;
    case SegKey::requested_size:
      seg_.requested_size = u64(v);
      return;
    case SegKey::stream:
      seg_.stream = u64(v);
      return;
    case SegKey::segment_type:
      seg_.segment_type = str(v);
      return;
    case SegKey::is_expandable:
      seg_.is_expandable = boolean_of(v);
      return;
    case SegKey::source:
      seg_.source = source_of(v);
      return;
    case SegKey::segment_pool_id:
    case SegKey::frames:
    case SegKey::blocks:
      fail("expected an array");
  }
}

void Handler::block_field(const Level& l, const Val& v) {
  switch (static_cast<BlockKey>(l.key)) {
    case BlockKey::address:
      block_.address = u64(v);
      return;
    case BlockKey::size:
      block_.size = u64(v);
      return;
    case BlockKey::requested_size:
      block_.requested_size = u64(v);
      return;
    case BlockKey::state:
      block_.state = str(v);
      if (block_.state != "active_allocated" && block_.state != "active_pending_free" &&
          block_.state != "inactive")
        fail("expected state active_allocated, active_pending_free or inactive");
      return;
    case BlockKey::frames:
      fail("expected an array");
  }
}

void Handler::frame_field(const Level& l, const Val& v) {
  switch (static_cast<FrameKey>(l.key)) {
    case FrameKey::filename:
      if (v.kind != Val::kString) fail("expected a string");
      frames_[nframes_].filename.assign(*v.s);
      return;
    case FrameKey::line:
      frames_[nframes_].line = i64(v);
      if (frames_[nframes_].line < 0) fail("expected a non-negative line number");
      return;
    case FrameKey::name:
      if (v.kind != Val::kString) fail("expected a string");
      frames_[nframes_].name.assign(*v.s);
      return;
    case FrameKey::module:
      if (v.kind != Val::kString || v.s->empty()) fail("expected a non-empty string");
      frames_[nframes_].module.assign(*v.s);
      return;
  }
}

void Handler::entry_field(const Level& l, const Val& v) {
  switch (static_cast<EntryKey>(l.key)) {
    case EntryKey::action: {
      if (v.kind != Val::kString) fail("expected a string");
      auto a = parse_action(*v.s);
      if (!a) fail(fmt::format("expected a known action, not \"{}\"", printable(*v.s)));
      entry_.action = *a;
      return;
    }
    case EntryKey::addr:
      entry_.addr = u64(v);
      return;
    case EntryKey::size:
      entry_.size = u64(v);
      return;
    case EntryKey::stream:
      entry_.stream = u64(v);
      return;
    case EntryKey::time_us:
      entry_.time_us = static_cast<int64_t>(u64(v));
      return;
    case EntryKey::tid:
      entry_.tid = tid(v);
      return;
    case EntryKey::device_free:
      entry_.device_free = u64(v);
      return;
    case EntryKey::stream_per_thread:
      entry_.stream_per_thread = boolean_of(v);
      return;
    case EntryKey::source:
      entry_.source = source_of(v);
      return;
    case EntryKey::async_pool:
      entry_.async_pool = boolean_of(v);
      return;
    case EntryKey::category:
      // PyTorch's profiler-path files name categories of their own (PARAMETER, ...): what is
      // not one of ours is unknown, never an error.
      if (v.kind != Val::kString) fail("expected a string");
      entry_.category = parse_category(*v.s).value_or(Category::kUnknown);
      return;
    case EntryKey::frames:
      fail("expected an array");
  }
}

void Handler::entry_end(const Level& l) {
  if (entry_.action == Action::kOom) {
    if (!(l.seen & bits(EntryKey::device_free)))
      fail("expected key \"device_free\" on an oom entry");
  } else if (!(l.seen & bits(EntryKey::addr))) {
    fail("expected key \"addr\"");
  }
  snap_.device_traces.back().push_back(entry_);
}

}  // namespace cumemtrace::snap::detail
