#include "live/symbolizer.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>

#include <cstdlib>
#include <cstring>
#include <set>

#include <fmt/format.h>

namespace cumemtrace::collect {

namespace {

const Dwfl_Callbacks kOfflineCallbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = nullptr,
};

std::string demangle(const char* name) {
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || !out) return name;
  std::string s(out);
  std::free(out);
  return s;
}

std::string base_name(const char* path) {
  if (!path) return "??";
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

}  // namespace

struct Symbolizer::Impl {
  Dwfl* dwfl = nullptr;
  std::set<uint64_t> bases;  // modules reported (a base is reported once)
  bool dirty = false;        // modules added since the last dwfl_report_end
};

Symbolizer::Symbolizer() : impl_(std::make_unique<Impl>()) {
  impl_->dwfl = dwfl_begin(&kOfflineCallbacks);
}

Symbolizer::~Symbolizer() {
  if (impl_->dwfl) dwfl_end(impl_->dwfl);
}

void Symbolizer::add_module(uint64_t base, const std::string& path) {
  if (!impl_->dwfl || !impl_->bases.insert(base).second) return;
  const std::string file = path.empty() ? main_exe_ : path;
  if (file.empty() || file.rfind("linux-vdso", 0) == 0 || file.rfind("linux-gate", 0) == 0) return;
  if (!impl_->dirty) dwfl_report_begin_add(impl_->dwfl);
  // Reported by path with its load bias; a missing or unreadable file just leaves the addresses
  // inside it unresolved.
  dwfl_report_elf(impl_->dwfl, file.c_str(), file.c_str(), -1, base, false);
  impl_->dirty = true;
  cache_.clear();
}

const snap::Frame& Symbolizer::resolve(uint64_t ra) {
  if (auto it = cache_.find(ra); it != cache_.end()) return it->second;
  if (impl_->dirty) {
    dwfl_report_end(impl_->dwfl, nullptr, nullptr);
    impl_->dirty = false;
  }
  snap::Frame f;
  const uint64_t pc = ra > 0 ? ra - 1 : ra;
  Dwfl_Module* m = impl_->dwfl ? dwfl_addrmodule(impl_->dwfl, pc) : nullptr;
  if (!m) {
    f.name = fmt::format("0x{:x}", ra);
    f.filename = "??";
    return cache_.emplace(ra, std::move(f)).first->second;
  }
  Dwarf_Addr mod_base = 0;
  const char* mod_name =
      dwfl_module_info(m, nullptr, &mod_base, nullptr, nullptr, nullptr, nullptr, nullptr);
  const char* sym = dwfl_module_addrname(m, pc);
  std::string plain;
  if (sym) {  // "__libc_start_main@@GLIBC_2.34" -> "__libc_start_main"
    plain = sym;
    if (auto at = plain.find('@'); at != std::string::npos && at > 0) plain.resize(at);
    sym = plain.c_str();
  }
  f.name = sym ? demangle(sym) : fmt::format("{}+0x{:x}", base_name(mod_name), pc - mod_base);
  if (Dwfl_Line* line = dwfl_module_getsrc(m, pc)) {
    int lineno = 0;
    const char* file = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr);
    if (file) {
      f.filename = file;
      f.line = lineno;
    }
  }
  if (f.filename.empty()) f.filename = mod_name ? mod_name : "??";
  return cache_.emplace(ra, std::move(f)).first->second;
}

snap::Stack Symbolizer::resolve_stack(const std::vector<uint64_t>& frames) {
  snap::Stack out;
  out.reserve(frames.size());
  for (uint64_t ra : frames) out.push_back(resolve(ra));
  return out;
}

}  // namespace cumemtrace::collect
