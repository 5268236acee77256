"""Module names for the "by module" view, with no change to the script and no module hook.

Each tensor made inside a module call carries that module: the preload reads the module object
(`self`) of every torch.nn.Module._wrapped_call_impl frame it meets in the allocating thread's
Python stack (preload/stacks/python_stack.h), once told that code object's address here
(cumemtrace_torch_module_code). This file gives the collector the names to join by address
(design.md §9): at most once per root and per step, always from the automatic phases' hooks
(cumemtrace_phases.py), never from an allocation hook:
  - the module table: every module of a root (named_modules()) by its object's address, with its
    fully qualified name; the root itself by its class name; wrapper prefixes (DDP's `module.`,
    torch.compile's `_orig_mod.`, FSDP1's `_fsdp_wrapped_module.`, checkpoint_wrapper's
    `_checkpoint_wrapped_module.`) stripped, so names are the user's model's. Sent when a root is
    found, and again at a step when a root's module count changed;
  - beside each ownership walk the phases send (parameters, gradients, optimizer state), the name
    of each tensor's parameter by its data pointer (a gradient and an optimizer state tensor are
    named after their parameter), so that the collector puts them on the parameter's module.
Why a global forward hook is not used instead: it turns off Module._call_impl's fast path for
every module call (docs/pytorch.md); the frames already hold the module.
What is missed, by design: modules called outside any root the phases found (no name: the tensor
goes to its innermost named module, or none); CPython 3.9/3.10 (frames keep locals elsewhere: no
module on frames); code compiled by torch.compile (no frames inside: the compiled root's name).
Backward: autograd's engine thread runs no Python, so its allocations have no module frame of
their own. The preload files, at each autograd node's creation, the innermost module call of the
creating thread (preload/stacks/node_modules.h), and gives an engine-thread allocation the module
of the node it evaluates. What that needs is checked here: the node's sequence number and
creating thread's id where torch 2.11's Node keeps them (node_layout, when the names start), then,
at the first step's end, when the preload records, a probe node made inside a probe module call
must come back filed with that module (node_route); otherwise one `cumemtrace:` line, filing off,
and those allocations stay in the "(backward)" row.
Errors: the caller (Phases) turns everything off with one `cumemtrace:` line.
"""
import ctypes
import os
import sys
import weakref

NAMES_MODULES = 0  # wire kNamesModules; the ownership roles are 1..3 (cumemtrace_phases)

# Prefixes wrappers put before the wrapped model's names (reference: pytorch-trainers.md §5).
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.",
                    "_checkpoint_wrapped_module.")
WRAPPER_NAMES = tuple(p[:-1] for p in WRAPPER_PREFIXES)

# One record's text at most (wire kMaxExtraSlots * kPayloadBytes).
RECORD_BYTES = 64 * 56
MAX_KEPT_LINES = 1 << 16  # lines_records' memo: cleared when full


def strip_wrappers(name):
    """The wrapped model's name of a module or parameter: wrapper components dropped wherever
    they occur (DDP(compile(model)) gives `module._orig_mod.h.0`)."""
    parts = [p for p in name.split(".") if p not in WRAPPER_NAMES] if name else []
    return ".".join(parts)


def module_names(root):
    """{id(module): name} for every module of `root`: the root by its class name (the wrapped
    model's class when the root is a wrapper), the others by their stripped fully qualified
    name. A module reachable by several names keeps the first (named_modules' own rule)."""
    names = {}
    inner = root
    for name, m in root.named_modules():
        fqn = strip_wrappers(name)
        if not fqn:
            inner = m  # the wrapped model (or the root itself)
        names.setdefault(id(m), fqn)
    label = type(getattr(inner, "_orig_mod", inner)).__name__
    return {k: (v if v else label) for k, v in names.items()}


def module_shape(root):
    """The ids of every module under `root`, depth first through each module's own `_modules`:
    what changes when a module is added, removed or replaced anywhere under it. Read at every
    step's end, so it skips named_modules()' generators and names (a third of the time)."""
    out, todo = [], [root]
    while todo:
        m = todo.pop()
        out.append(id(m))
        todo.extend(c for c in m._modules.values() if c is not None)
    return out


def parameter_names(roots):
    """{id(parameter): stripped fully qualified name} over the roots' named_parameters()."""
    names = {}
    for root in roots:
        for name, p in root.named_parameters(remove_duplicate=True):
            names.setdefault(id(p), strip_wrappers(name))
    return names


def lines_records(pairs, lines=None):
    """The (address, name) pairs as texts of whole "<hex> <name>\\n" lines, each at most one
    record long (a longer line is cut: names are never that long). `lines`, a dict, keeps each
    pair's line for the next call (the gradients' tables are sent again at most steps, mostly
    over the same pairs)."""
    out, cur, size = [], [], 0
    for pair in pairs:
        line = lines.get(pair) if lines is not None else None
        if line is None:
            line = ("%x %s\n" % pair).encode("utf-8", "replace")[:RECORD_BYTES]
            if lines is not None:
                if len(lines) >= MAX_KEPT_LINES:
                    lines.clear()
                lines[pair] = line
        if size + len(line) > RECORD_BYTES and cur:
            out.append(b"".join(cur))
            cur, size = [], 0
        cur.append(line)
        size += len(line)
    out.append(b"".join(cur))
    return out


# torch::autograd::Node (torch/csrc/autograd/function.h, torch 2.11): its vtable pointer, the
# weak_ptr of enable_shared_from_this, then sequence_nr_, topological_nr_, has_parent_ (padded)
# and thread_id_: byte offsets on x86-64 with libstdc++.
NODE_SEQUENCE_OFFSET = 24
NODE_THREAD_OFFSET = 48
# A C++ node's Python object (THPCppFunction): PyObject_HEAD, then its std::shared_ptr<Node>.
CPP_FUNCTION_NODE_OFFSET = 16
CPP_FUNCTION_SIZE = 32
CURRENT_THREAD_ID = "_ZN2at14RecordFunction15currentThreadIdEv"


def node_address(grad_fn):
    """The torch::autograd::Node* behind a C++ node's Python object (a generated node such as
    MulBackward0), or None when the object is not laid out as THPCppFunction."""
    if type(grad_fn).__basicsize__ != CPP_FUNCTION_SIZE:
        return None
    return ctypes.c_void_p.from_address(id(grad_fn) + CPP_FUNCTION_NODE_OFFSET).value or None


def node_layout(torch, sink):
    """Checks torch's Node layout on two live nodes and tells the preload (sink.node_layout).
    Returns None when told, else why not."""
    lib = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "lib",
                                   "libtorch_cpu.so"))
    thread_id = getattr(lib, CURRENT_THREAD_ID)
    thread_id.restype = ctypes.c_uint64
    with torch.enable_grad():
        x = torch.ones(1, requires_grad=True)
        nodes = [(x * 2).grad_fn, (x + 1).grad_fn]
    me = thread_id()
    for n in nodes:
        at = node_address(n)
        if at is None:
            return "%s is not a C++ node object of the known size" % type(n).__name__
        seq = ctypes.c_uint64.from_address(at + NODE_SEQUENCE_OFFSET).value
        tid = ctypes.c_uint64.from_address(at + NODE_THREAD_OFFSET).value
        if seq != n._sequence_nr() or tid != me:
            return "torch's autograd Node is not laid out as in torch 2.11"
    if nodes[0]._sequence_nr() == nodes[1]._sequence_nr():
        return "two nodes share a sequence number"
    rc = sink.node_layout(NODE_SEQUENCE_OFFSET, NODE_THREAD_OFFSET,
                          ctypes.cast(thread_id, ctypes.c_void_p).value)
    if rc != 0:
        return "the preload refused the node layout (%d)" % rc
    return None


def node_route(torch, sink):
    """Checks the whole route once the preload records (a session runs: at the first step's end):
    a node made in a probe module call must come back filed with that module; otherwise filing is
    turned off. Returns None when it is, else why not."""

    class _Probe(torch.nn.Module):
        def forward(self, t):
            return t * 2

    probe = _Probe()
    with torch.enable_grad():
        y = probe(torch.ones(1, requires_grad=True))
    word = sink.node_module(node_address(y.grad_fn))
    if word >> 62 != 2 or word & ((1 << 47) - 1) != id(probe):
        sink.node_layout(-1, -1, None)  # off: no walk at each node for nothing
        return "a node made in a module call was not filed with it (is " \
               "at::sequence_number::get_and_increment reached through the preload?)"
    return None


class PreloadNames:
    """Sends through libcumemtrace.so's exported functions (include/cumemtrace.h), GIL held."""

    def __init__(self):
        lib = ctypes.PyDLL(None)
        self._code = lib.cumemtrace_torch_module_code
        self._code.argtypes, self._code.restype = [ctypes.c_void_p], ctypes.c_int
        self._names = lib.cumemtrace_torch_names
        self._names.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint64]
        self._names.restype = ctypes.c_int
        self._lines = {}  # lines_records' memo

    def module_code(self, address):
        self._code(address)

    def node_layout(self, sequence_offset, thread_offset, current_thread_id):
        lib = ctypes.PyDLL(None)
        fn = lib.cumemtrace_torch_node_layout
        fn.argtypes, fn.restype = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p], ctypes.c_int
        return fn(sequence_offset, thread_offset, current_thread_id)

    def node_module(self, node):
        fn = ctypes.PyDLL(None).cumemtrace_torch_node_module
        fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_uint64
        return fn(node)

    def names(self, what, pairs):
        for i, text in enumerate(lines_records(pairs, self._lines)):
            self._names(what, 1 if i == 0 else 0, text, len(text))


class Modules:
    """The names side of the phases: `sink` has module_code(address) and names(what, pairs)."""

    def __init__(self, torch, sink):
        self._tensor = torch.Tensor
        self._plain = (torch.Tensor, torch.nn.Parameter)  # keyed by their own data_ptr()
        self._sink = sink
        self._shapes = {}  # id(root) -> its module_shape when its table was sent
        self._table = {}  # id(module) -> name, over every root sent
        self._roots = weakref.WeakSet()  # every root named, for parameter names
        self._param_names = None  # id(parameter) -> name; None: to rebuild
        self._sent_roles = {}  # role -> the pairs last sent
        self._node_check = None  # called once, at the first step's end (make)
        code = torch.nn.Module._wrapped_call_impl.__code__
        # `self` must be the frame's first local and no cell (a cell would hold it indirectly).
        if code.co_varnames[:1] != ("self",) or "self" in code.co_cellvars:
            raise RuntimeError("Module._wrapped_call_impl's first local is not `self`")
        self._sink.module_code(id(code))

    def on_root(self, root):
        """A root was found (its forward is starting): its modules' names."""
        self._roots.add(root)
        self._send_table(root, module_shape(root))

    def on_step(self):
        """At a step's end: a root whose modules changed (one added, removed or replaced anywhere
        under it) is named again; at the first, the node route is checked (node_route)."""
        if self._node_check is not None:
            check, self._node_check = self._node_check, None
            check()
        for root in list(self._roots):
            shape = module_shape(root)
            if self._shapes.get(id(root)) != shape:
                self._send_table(root, shape)

    def _send_table(self, root, shape):
        self._shapes[id(root)] = shape
        self._table.update(module_names(root))
        self._param_names = None
        self._sink.names(NAMES_MODULES, sorted(self._table.items()))

    def on_owners(self, role, found, params, optimizers, local_tensors=lambda t: None):
        """The phases sent `found` ({data pointer: bytes}) for `role` (1 parameters, 2 gradients,
        3 optimizer state) over `params` and `optimizers`: each pointer gets the name of its
        parameter (a pointer of no named parameter gets none). A tensor subclass is named by the
        tensors the walk keyed it by: `local_tensors` is the walk's own rule
        (Phases._local_tensors: a DTensor's local shard; its own data_ptr() is 0), None for a
        tensor keyed as it is. Other roles (inputs, unsharded parameters) are not named."""
        if role not in (1, 2, 3):
            return
        names = self._param_names
        if names is None or any(id(p) not in names for p in params):
            names = self._param_names = parameter_names(list(self._roots))
        if role == 1:
            owned = ((p, (p,)) for p in params)
        elif role == 2:
            owned = ((p, (p.grad,)) for p in params if p.grad is not None)
        else:
            tensor = self._tensor
            owned = ((p, [v for v in st.values() if isinstance(v, tensor)])
                     for opt in optimizers for p, st in opt.state.items())
        pairs = {}
        plain = self._plain

        def name_all(tensors, name):
            for t in tensors:
                inner = None if type(t) in plain else local_tensors(t)
                if inner is not None:
                    name_all(inner, name)
                    continue
                try:
                    ptr = t.data_ptr()
                except RuntimeError:  # a layout without one block, as the walk skips it
                    continue
                if ptr in found and ptr not in pairs:
                    pairs[ptr] = name

        for p, tensors in owned:
            name = names.get(id(p))
            if name is not None:
                name_all(tensors, name)
        pairs = tuple(sorted(pairs.items()))
        if self._sent_roles.get(role) == pairs:
            return
        self._sent_roles[role] = pairs
        self._sink.names(role, pairs)


def make(torch, err=None):
    """Modules with the preload's sink, or None (one `cumemtrace:` line) when it cannot be."""
    try:
        sink = PreloadNames()
        modules = Modules(torch, sink)
    except (AttributeError, RuntimeError, OSError) as e:
        (err or sys.stderr).write("cumemtrace: no module names (%s: %s)\n" % (type(e).__name__, e))
        return None
    if sys.version_info < (3, 11):
        return modules  # no module on frames (above): nothing to file nodes with
    err = err or sys.stderr

    def checked(step):
        try:
            why = step(torch, sink)
        except (AttributeError, RuntimeError, OSError, ValueError) as e:
            why = "%s: %s" % (type(e).__name__, e)
        if why:
            try:
                sink.node_layout(-1, -1, None)  # off, in case it was told before the error
            except (AttributeError, OSError):
                pass
            err.write("cumemtrace: backward allocations without their module (%s)\n" % why)
        return why

    if not checked(node_layout):
        modules._node_check = lambda: checked(node_route)
    return modules
