// Contract: the stacks of one traced process, interned as the records come (native return
// addresses and Python (code object, line) pairs; an empty record is no stack, -1), and the
// announcements they are named with: Python code objects (kPyCode) and loaded modules (kModule).
// An address may be announced again for another code object (the preload holds no reference),
// which then applies to later records only: stacks are interned with announcement indexes, so
// their names are fixed at record time. write() renders every stack, native frames resolved by
// the symbolizer given (or "0x..." in "??" without one) and the Python frames placed where the
// interpreter runs them (see render()).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "live/ring_reader.h"
#include "live/symbolizer.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

class StackTable {
 public:
  using StackId = int32_t;

  StackId intern(const Record& r);
  // kPyCode's text: "filename\0name"; aux is the code object's address.
  void announce_code(uint64_t code, const std::string& text);
  void announce_module(uint64_t base, const std::string& path) {
    modules_.emplace_back(base, path);
  }
  // kTorchNames' module table (lines "<hex module address> <name>"): the names that module calls'
  // frames (wire::kPyModuleTag) get from now on; `first` starts a new table (the Python side
  // sends all of its names each time), whose names replace the earlier ones.
  void announce_module_names(const std::string& text, bool first);

  snap::Stack render(size_t id, Symbolizer* sym) const;
  // Whether a native frame of stack id lies in a module whose file name (without its folder)
  // starts with `name`: the module announced at the highest base at or below the frame, as the
  // preload announces each frame's module before the record that holds it. False for -1.
  bool passes_through(StackId id, std::string_view name) const;
  // Every stack into s.stacks, in id order; the symbolizer learns the modules first.
  void write(snap::Snapshot& s, const std::string& main_exe, Symbolizer* sym) const;

 private:
  struct RawStack {
    std::vector<uint64_t> native;
    std::vector<uint64_t> python;   // (index into py_code_ or kNoPyCode, line) pairs
    std::vector<uint32_t> modules;  // per Python frame: index into module_names_ + 1, 0: none
  };
  static constexpr uint64_t kNoPyCode = ~uint64_t{0};
  std::vector<RawStack> stacks_;
  std::unordered_map<std::string, StackId> index_;  // frames as interned -> id
  // Python code objects as announced (file, function), in announcement order, and the latest
  // announcement of each code object address.
  std::vector<std::pair<std::string, std::string>> py_code_;
  std::unordered_map<uint64_t, uint64_t> py_code_latest_;
  std::vector<std::pair<uint64_t, std::string>> modules_;
  // Module names as announced, and the latest name index of each module object address.
  std::vector<std::string> module_names_;
  std::unordered_map<uint64_t, uint32_t> module_latest_;
};

}  // namespace cumemtrace::collect
