// Contract: turns raw return addresses of one process into frames, offline. It needs only the
// module map recorded while the process ran (path + load base per module, see
// preload/stacks/module_map.h) and the ELF files on disk, never /proc of the process, so it works
// after the target exited or was killed. Each distinct address is resolved once (cache); frames get
// the demangled function name, source file and line from DWARF where the module has it, else
// module path and "module+0xoffset". A return address is looked up at address - 1 so that the
// line is the call's, not the next statement's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

class Symbolizer {
 public:
  Symbolizer();
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  // `path` empty means the main program, which is found at `main_exe`.
  void add_module(uint64_t base, const std::string& path);
  void set_main_exe(const std::string& path) { main_exe_ = path; }

  const snap::Frame& resolve(uint64_t return_address);
  snap::Stack resolve_stack(const std::vector<uint64_t>& frames);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string main_exe_;
  std::unordered_map<uint64_t, snap::Frame> cache_;
};

}  // namespace cumemtrace::collect
