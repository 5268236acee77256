#include "live/stack_table.h"

#include "live/ownership_walks.h"

#include <algorithm>

#include <fmt/format.h>

namespace cumemtrace::collect {

StackTable::StackId StackTable::intern(const Record& r) {
  if (r.frames.empty() && r.pyframes.empty()) return -1;
  // Python code addresses become the announcement that applies now.
  std::vector<uint64_t> python = r.pyframes;
  std::vector<uint32_t> modules;  // left empty unless some frame is a module call
  for (size_t i = 0; i + 1 < python.size(); i += 2) {
    auto it = py_code_latest_.find(python[i]);
    python[i] = it != py_code_latest_.end() ? it->second : kNoPyCode;
    const uint64_t w = python[i + 1];
    if ((w & wire::kPyModuleTagMask) != wire::kPyModuleTag) continue;
    // A module call's frame: its line, and the module its address names now (if any).
    python[i + 1] = w >> wire::kPyModuleLineShift & wire::kPyModuleLineMax;
    auto m = module_latest_.find(w & wire::kPyModulePointerMask);
    if (m == module_latest_.end()) continue;
    modules.resize(python.size() / 2);
    modules[i / 2] = m->second + 1;
  }
  std::string key(reinterpret_cast<const char*>(r.frames.data()),
                  r.frames.size() * sizeof(uint64_t));
  key.push_back('|');
  key.append(reinterpret_cast<const char*>(python.data()), python.size() * sizeof(uint64_t));
  key.push_back('|');
  key.append(reinterpret_cast<const char*>(modules.data()), modules.size() * sizeof(uint32_t));
  auto [it, inserted] = index_.try_emplace(std::move(key), static_cast<StackId>(stacks_.size()));
  if (inserted) stacks_.push_back(RawStack{r.frames, std::move(python), std::move(modules)});
  return it->second;
}

void StackTable::announce_module_names(const std::string& text, bool first) {
  if (first) module_latest_.clear();
  for_each_name_line(text, [&](uint64_t address, std::string_view name) {
    // A name announced before keeps its index, so that equal stacks stay one stack.
    auto known = std::find(module_names_.begin(), module_names_.end(), name);
    const auto index = static_cast<uint32_t>(known - module_names_.begin());
    if (known == module_names_.end()) module_names_.emplace_back(name);
    module_latest_[address] = index;
  });
}

void StackTable::announce_code(uint64_t code, const std::string& text) {
  const auto nul = text.find('\0');
  std::string file = text.substr(0, nul);
  std::string name = nul == std::string::npos ? "" : text.substr(nul + 1);
  if (auto end = name.find('\0'); end != std::string::npos) name.resize(end);
  // A repeated announcement of the same names keeps its index, so that equal stacks stay one
  // stack; other names for a known address start a new one.
  auto [it, inserted] = py_code_latest_.try_emplace(code, py_code_.size());
  if (!inserted && py_code_[it->second].first == file && py_code_[it->second].second == name) {
    return;
  }
  it->second = py_code_.size();
  py_code_.emplace_back(std::move(file), std::move(name));
}

// The symbolizer's rule (live/symbolizer.h) without its ELF files: a return address is looked up
// at address - 1, in the module of the highest base at or below it, the first announced there.
bool StackTable::passes_through(StackId id, std::string_view name) const {
  if (id < 0 || static_cast<size_t>(id) >= stacks_.size()) return false;
  for (const uint64_t ret : stacks_[static_cast<size_t>(id)].native) {
    const uint64_t pc = ret - 1;
    const std::pair<uint64_t, std::string>* module = nullptr;
    for (const auto& m : modules_) {
      if (m.first <= pc && (!module || m.first > module->first)) module = &m;
    }
    if (!module) continue;
    const std::string_view path = module->second;
    const size_t slash = path.rfind('/');
    if (path.substr(slash == std::string_view::npos ? 0 : slash + 1).starts_with(name)) {
      return true;
    }
  }
  return false;
}

// Native frames with the Python frames placed where the interpreter runs them: before the
// innermost evaluation-loop frame (without CPython's private structures the split of Python
// frames among several nested evaluation loops is unknown, so they go together), or after the
// native frames when the native stack did not reach the interpreter.
snap::Stack StackTable::render(size_t id, Symbolizer* sym) const {
  const RawStack& raw = stacks_[id];
  snap::Stack native;
  if (sym) {
    native = sym->resolve_stack(raw.native);
  } else {
    for (uint64_t ra : raw.native) {
      snap::Frame f;
      f.name = fmt::format("0x{:x}", ra);
      f.filename = "??";
      native.push_back(std::move(f));
    }
  }
  if (raw.python.empty()) return native;
  snap::Stack py;
  for (size_t i = 0; i + 1 < raw.python.size(); i += 2) {
    const uint64_t code = raw.python[i];
    const bool known = code < py_code_.size();
    snap::Frame f;
    f.filename = known ? py_code_[code].first : "<python>";
    f.name = known ? py_code_[code].second : "<unknown>";
    f.line = static_cast<int64_t>(raw.python[i + 1]);
    const size_t k = i / 2;
    if (k < raw.modules.size() && raw.modules[k]) f.module = module_names_[raw.modules[k] - 1];
    py.push_back(std::move(f));
  }
  auto at = std::find_if(native.begin(), native.end(), [](const snap::Frame& f) {
    return f.name.find("PyEval_EvalFrame") != std::string::npos;
  });
  native.insert(at, py.begin(), py.end());
  return native;
}

void StackTable::write(snap::Snapshot& s, const std::string& main_exe, Symbolizer* sym) const {
  if (sym) {
    sym->set_main_exe(main_exe);
    for (const auto& [base, path] : modules_) sym->add_module(base, path);
  }
  s.stacks.reserve(stacks_.size());
  for (size_t i = 0; i < stacks_.size(); ++i) s.stacks.push_back(render(i, sym));
}

}  // namespace cumemtrace::collect
