// Contract: the "by module" view of a PyTorch run: where PyTorch's tensor bytes go in the user's
// model's terms (its modules' fully qualified names), from what the snapshot carries, with no
// change to the script (preload/python/cumemtrace_modules.py, design.md §9):
//  - a tensor's module: a parameter, gradient or optimizer state tensor (categories.h) belongs to
//    the module that owns its parameter: the parameter's name from the tool section's
//    tensor_names (the latest table of its role made while it was alive with a data pointer
//    inside the tensor; a gradient made again where the walks saw one, which categories.h's rule
//    3 labels with no walk while it lives, takes the latest gradient table made before its
//    allocation that names its address), less its last component; a parameter of a root itself
//    belongs to no child and is shown under the root's class name when known, else "(root)". Any
//    other tensor belongs to the innermost module call on its allocation's stack
//    (snap::Frame::module): in backward, on autograd's engine thread (no Python of its own), the
//    module whose forward made the autograd node that allocated it (the preload puts that module
//    call's frame behind the node: preload/stacks/node_modules.h). A tensor with neither is "(no
//    module)", in backward its own row "(backward)": what a node made outside any module call (the
//    loss) or not filed (AccumulateGrad's temporaries, a torch whose node layout was refused).
//  - depth d (--module-depth, >= 1): a module's row is its name's first d components (a root's
//    class name is one component), so a row sums its whole subtree down from depth d.
//  - a tensor's bytes here are MemTracker's (torch.distributed._tools.mem_tracker): its request
//    rounded up to 512 B, PyTorch's minimum block, never its block's unsplit remainder (a 4 MiB
//    weight cut from a 20 MiB segment's last 5 MiB holds 5 MiB of memory_allocated(), but
//    named_parameters() and MemTracker say 4 MiB: the remainder is the allocator's, not the
//    module's).
//  - per row, on every device together (each device's peaks apart, the highest shown):
//    parameters, gradients, optimizer_state: the bytes of the tensors of those categories live
//    at the reference moment (the end of the last complete training step, the last auto:step
//    MARK; without steps the end of the trace), the gradients held outside PyTorch's blocks then
//    but inside its segments (a CUDA graph pool's replay outputs: categories.h
//    held_outside_blocks) included;
//    activations: the tensors of category activation (allocated in forward and alive when
//    backward starts: what the module saved for backward),
//    summed over the reference step (the last complete step, else the whole run);
//    forward_peak / backward_peak: the highest tensor bytes (the sum of the live tensors' bytes
//    above, cuBLAS workspaces left out) right after an allocation the row's subtree made in
//    forward / backward (its gradients in backward): the whole program's tensors at the row's
//    worst moment, as MemTracker's per-module "Peak-Forward" totals are. Every block counts, also
//    the buffers a kernel takes and gives back inside one op (a reduction's global buffer, a
//    contiguous copy of a strided gradient), which MemTracker (a dispatch mode: ops' outputs
//    only) cannot see: they are the module's op's memory at that moment. A row's backward peak is
//    taken at its own allocations only, so it ends with its module's last node (MemTracker keeps
//    a module whose forward got no grad-requiring input open to the end of backward: its
//    "Peak-Backward" is then that of every module after it). cuBLAS workspaces
//    (categories.h) are no module's: MemTracker does not see them (they are no tensors), and
//    counting them put every module's forward peak 65 MiB high on an H100 (32 MiB per thread
//    that ran cuBLAS, forward's and autograd's, and cuBLASLt's 1 MiB).
//  - rows ordered by the sum of the four byte columns, largest first.
// Available only for a snapshot whose stacks carry module names (any Frame::module) or tensor
// names; `why` says what is missing otherwise.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/analysed_snapshot.h"
#include "pytorch/categories.h"
#include "pytorch/phases.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

inline constexpr std::string_view kNoModule = "(no module)";
inline constexpr std::string_view kBackwardNoModule = "(backward)";
inline constexpr std::string_view kRootModule = "(root)";

struct ModuleRow {
  std::string module;  // the first `depth` components of the fully qualified name
  uint64_t parameters = 0;
  uint64_t gradients = 0;
  uint64_t optimizer_state = 0;
  uint64_t activations = 0;
  uint64_t forward_peak = 0;   // 0: the row made nothing in forward
  uint64_t backward_peak = 0;  // 0: the row made nothing in backward
  uint64_t total() const { return parameters + gradients + optimizer_state + activations; }
};

struct ModuleView {
  int depth = 2;
  std::string reference;  // "end of step N" (1-based) or "end of the trace"
  std::vector<ModuleRow> rows;
};

// The rule of a tensor's module (contract above), read by the module view, the ledger's lists by
// module (ledger.h) and check's --max-module-bytes: one place decides.
class TensorModules {
 public:
  explicit TensorModules(const snap::Snapshot& s);
  // The parameter name of a parameter, gradient or optimizer state tensor (its category, as
  // labelled); empty for other categories or when no name table names it.
  std::string_view parameter_of(const TensorLife& t) const;
  // The fully qualified module of a tensor allocated in `phase` (kNoModule, kBackwardNoModule
  // when it has none).
  std::string module_of(const TensorLife& t, Phase phase) const;

  // One role's name tables in ring order, their keys parsed.
  struct NameTable {
    int64_t time_us = 0;
    std::map<uint64_t, std::string> by_pointer;
  };

 private:
  const snap::Snapshot& s_;
  std::vector<NameTable> names_[3];  // parameter, gradient, optimizer state
  std::string root_;
};

// The module name at `depth` components (>= 1); names without '.' are their own.
std::string module_at_depth(std::string_view name, int depth);

// The module of a stack: the innermost frame's module, empty when none has one.
std::string_view stack_module(const snap::Snapshot& s, int32_t stack);

// Whether the snapshot carries module names at all.
bool has_module_names(const snap::Snapshot& s);

// The view at `depth`; nullopt (with *why set when given) when the snapshot has no module names.
std::optional<ModuleView> build_module_view(const AnalysedSnapshot& a, int depth,
                                            std::string* why = nullptr);

void print_module_view_text(const ModuleView& v, size_t top, std::ostream& out);
nlohmann::json module_view_json(const ModuleView& v, size_t top);

}  // namespace cumemtrace::analysis
