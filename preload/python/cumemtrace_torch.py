"""Attaches cumemtrace's tracker to PyTorch's caching allocator (loaded by our sitecustomize).

Why this way (docs/pytorch.md): PyTorch's allocator trace trackers see every block event
(alloc, free_requested, free_completed, segment_*, oom) even with its own history off, but only
from C++: attachAllocatorTraceTracker is a virtual method of the allocator object, whose only
exported anchor is the data symbol c10::cuda::CUDACachingAllocator::allocator of libc10_cuda.so.
The method and the NativeCachingAllocator vtable are LOCAL symbols of that library's .symtab, read
here with a small ELF reader. Before anything is called we check: the torch version has a
TraceEntry layout in the table generated from the wheels of torch 2.4 on
(cumemtrace_torch_layouts, scripts/torch_layouts.py), and the installed torch's own header
(torch/include) declares TraceEntry with the members and Action enum that layout reads, the backend is the native caching allocator (cudaMallocAsync: the
driver events already are the tensors), caching is on, the live allocator's vtable pointer is
NativeCachingAllocator's, and the method is one of that vtable's slots. Then the preload's
cumemtrace_torch_attach builds the std::function and calls it. This runs in Python right after
CUDA's lazy initialisation (torch.cuda._lazy_call), never inside a driver hook.

What was found is reported to the collector (cumemtrace_torch_info) for the snapshot's tool
section; a torch we cannot handle gives one `cumemtrace:` line and the driver-level view.
Once torch is imported the automatic phases (cumemtrace_phases) are installed too, whatever the
backend (CUMEMTRACE_TORCH=0 and CUMEMTRACE_PHASES=0 turn each off), and torch.distributed's
init_process_group reports the process's rank (cumemtrace_ranks).
"""
import ctypes
import os
import re
import struct
import sys

import cumemtrace_phases
import cumemtrace_ranks
import cumemtrace_torch_layouts

# The Action enumerators the preload numbers (wire::TorchAction: ALLOC = 0 ... OOM = 8), and the
# headers under <torch>/include that have declared TraceEntry (scripts/torch_layouts.py looks
# there; each layout row names its own).
TRACE_ENTRY_ACTIONS = ["ALLOC", "FREE_REQUESTED", "FREE_COMPLETED", "SEGMENT_ALLOC",
                       "SEGMENT_FREE", "SEGMENT_MAP", "SEGMENT_UNMAP", "SNAPSHOT", "OOM"]
TRACE_ENTRY_HEADERS = ("c10/core/CachingDeviceAllocator.h", "c10/cuda/CUDACachingAllocator.h")

# libc10_cuda.so's allocator object (the only exported anchor) and NativeCachingAllocator's
# vtable, the same names in every release of the layout table; the attachAllocatorTraceTracker
# override's name is the row's ("attach").
ALLOCATOR = b"_ZN3c104cuda20CUDACachingAllocator9allocatorE"
VTABLE = b"_ZTVN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE"

# torch::autograd::Engine::evaluate_function, a dynamic symbol of libtorch_cpu.so (checked on torch
# 2.11; the mangled name has been the same since its parameters last changed, in 1.x). The walks
# of autograd's engine thread end at its frame: above it are the same six frames every time
# (thread_main, two thread_inits, libstdc++, libc's thread start), about a fifth of a backward
# allocation's walk. A torch without it keeps those frames; nothing else changes.
ENGINE_EVALUATE = (
    "_ZN5torch8autograd6Engine17evaluate_functionERSt10shared_ptrINS0_9GraphTaskEEPNS0_4NodeERNS0_"
    "11InputBufferERKS2_INS0_10ReadyQueueEE"
)

# torch::autograd::get_current_node(), a dynamic symbol of libtorch_cpu.so: the node autograd's
# engine is evaluating on the calling thread. The engine thread's allocations are told by that
# node's apply() (preload/stacks/autograd_node.h) instead of a walk through the op. Node::apply's slot in
# a node's vtable is found in a generated node's: the slot that holds its apply() (slot 12 of 13
# in torch 2.11). A torch without either keeps the walk; nothing else changes.
GET_CURRENT_NODE = "_ZN5torch8autograd16get_current_nodeEv"
NODE_VTABLE = "_ZTVN5torch8autograd9generated11MmBackward0E"
NODE_APPLY = b"_ZN5torch8autograd9generated11MmBackward05applyE"

_installed = False
_attached = False


def _preload():
    """The preloaded libcumemtrace.so's entry points, or None when not traced."""
    try:
        lib = ctypes.CDLL(None)
        attach = lib.cumemtrace_torch_attach
        info = lib.cumemtrace_torch_info
    except (AttributeError, OSError):
        return None
    attach.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    attach.restype = ctypes.c_int
    info.argtypes = [ctypes.c_char_p]
    info.restype = None
    return attach, info


def _tell_preload(entry_point, library, address_in):
    """Calls the preload's `entry_point` with the address that `address_in` finds in the loaded
    `library` (given its CDLL); nothing when either is missing; never raises."""
    try:
        fn = getattr(ctypes.CDLL(None), entry_point)
        fn.argtypes = [ctypes.c_void_p]
        fn.restype = ctypes.c_int
        path = _loaded_library(library)
        if path is None:
            return
        address = address_in(ctypes.CDLL(path))
        if address:
            fn(address)
    except (AttributeError, OSError, ValueError):
        pass


def _stop_walks_at_engine():
    """Ends the autograd engine thread's stack walks at Engine::evaluate_function, if this torch
    has it."""
    _tell_preload("cumemtrace_torch_stop_walks_in", "libtorch_cpu.so",
                  lambda lib: ctypes.cast(getattr(lib, ENGINE_EVALUATE), ctypes.c_void_p).value)


class _DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p),
                ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]


class _Elf64Sym(ctypes.Structure):
    _fields_ = [("name", ctypes.c_uint32), ("info", ctypes.c_ubyte), ("other", ctypes.c_ubyte),
                ("shndx", ctypes.c_uint16), ("value", ctypes.c_uint64), ("size", ctypes.c_uint64)]


def _symbol_at(dladdr1, address):
    """(name, start, size) of the dynamic symbol that holds `address`, or None."""
    info, entry = _DlInfo(), ctypes.c_void_p()
    if not dladdr1(address, ctypes.byref(info), ctypes.byref(entry), 1) or not entry.value:
        return None  # 1: RTLD_DL_SYMENT
    if not info.sname:
        return None
    return info.sname, info.saddr, ctypes.cast(entry, ctypes.POINTER(_Elf64Sym)).contents.size


def node_apply_slot(vtable, dladdr1):
    """The index of Node::apply among the function pointers of the live vtable at `vtable` (the
    address of a generated node's vtable symbol: offset to top, type info, then the slots), or
    None when no slot holds that node's apply()."""
    sym = _symbol_at(dladdr1, vtable)
    if sym is None or sym[1] != vtable:
        return None
    for slot in range((sym[2] - 16) // 8):
        fn = ctypes.c_void_p.from_address(vtable + 16 + 8 * slot).value
        at = _symbol_at(dladdr1, fn) if fn else None
        if at is not None and at[1] == fn and at[0].startswith(NODE_APPLY):
            return slot
    return None


def _autograd_node_frames():
    """Tells the preload how to read the autograd node the engine thread evaluates, if this torch
    has what that takes."""
    try:
        set_nodes = ctypes.CDLL(None).cumemtrace_torch_autograd_nodes
        set_nodes.argtypes = [ctypes.c_void_p, ctypes.c_int]
        set_nodes.restype = ctypes.c_int
        dladdr1 = ctypes.CDLL(None).dladdr1
        dladdr1.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo),
                            ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        dladdr1.restype = ctypes.c_int
        path = _loaded_library("libtorch_cpu.so")
        if path is None:
            return
        lib = ctypes.CDLL(path)
        get = ctypes.cast(getattr(lib, GET_CURRENT_NODE), ctypes.c_void_p).value
        slot = node_apply_slot(ctypes.addressof(ctypes.c_void_p.in_dll(lib, NODE_VTABLE)), dladdr1)
        if get and slot is not None:
            set_nodes(get, slot)
    except (AttributeError, OSError, ValueError):
        pass


def _pool_allocator_stacks():
    """Under backend:cudaMallocAsync: names PyTorch's allocator module (libc10_cuda.so) to the
    preload, whose walks of pool allocations with Python frames then end at its frame, as a
    block event's walk does at the caching allocator."""
    _tell_preload("cumemtrace_torch_pool_allocator_in", "libc10_cuda.so",
                  lambda lib: ctypes.addressof(ctypes.c_void_p.in_dll(lib, ALLOCATOR.decode())))


def _symbol_tables(path):
    """(file bytes, [(symbol table section, its string table bytes)]) of an ELF64 file's .symtab
    and .dynsym."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("%s is not a 64-bit little-endian ELF file" % path)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    tables = []
    for sh in sections:
        if sh[1] in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
            strtab = sections[sh[6]]
            tables.append((sh, data[strtab[4]:strtab[4] + strtab[5]]))
    return data, tables


def elf_symbol_names(path, part):
    """The names of the defined symbols of the ELF64 file that contain the bytes `part`
    (scripts/torch_layouts.py finds the mangled names it records with it)."""
    data, tables = _symbol_tables(path)
    names = set()
    for sh, strings in tables:
        for st_name, _info, _other, shndx, _v, _s in struct.iter_unpack("<IBBHQQ",
                                                                        data[sh[4]:sh[4] + sh[5]]):
            if shndx != 0 and strings.find(part, st_name, strings.find(b"\0", st_name)) >= 0:
                names.add(strings[st_name:strings.find(b"\0", st_name)])
    return names


def elf_symbols(path, names):
    """{name: (st_value, st_size)} of the wanted names in the ELF64 file's .symtab and .dynsym."""
    data, tables = _symbol_tables(path)
    found = {}
    for sh, strings in tables:
        offsets = {}
        for name in names:
            at = strings.find(b"\0" + name + b"\0")
            if at >= 0:
                offsets[at + 1] = name
        if not offsets:
            continue
        symbols = data[sh[4]:sh[4] + sh[5]]
        for st_name, _info, _other, shndx, value, size in struct.iter_unpack("<IBBHQQ", symbols):
            if st_name in offsets and shndx != 0:
                found[offsets[st_name]] = (value, size)
    return found


def _struct_body(text, name):
    """The text between the braces of `struct name {...}` (comments already removed), or None."""
    m = re.search(r"\bstruct\s+(?:\w+\s+)?%s\s*(?::[^{;]*)?\{" % re.escape(name), text)
    if not m:
        return None
    depth, i = 1, m.end()
    while depth and i < len(text):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        i += 1
    return text[m.end():i - 1] if depth == 0 else None


def trace_entry_declaration(header_text):
    """(data members as [(type, name)], Action enumerators) of TraceEntry in a header's text, or
    None when the header does not define it. Types have whitespace and "c10::" removed."""
    text = re.sub(r"/\*.*?\*/", " ", header_text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    body = _struct_body(text, "TraceEntry")
    if body is None:
        return None
    enum = re.search(r"\benum\s+(?:class\s+)?Action\b[^{;]*\{([^}]*)\}", body)
    actions = [a.strip() for a in enum.group(1).split(",") if a.strip()] if enum else []
    # Nested braces (enum bodies, function bodies, brace initialisers) end a statement.
    top, depth = [], 0
    for c in body:
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                top.append(";")
        elif depth == 0:
            top.append(c)
    members = []
    for stmt in "".join(top).split(";"):
        stmt = re.sub(r"\b(public|private|protected)\s*:", " ", stmt).strip()
        if not stmt or "(" in stmt or re.match(
                r"(enum|using|typedef|static|friend|struct|union|class|template|constexpr)\b",
                stmt):
            continue
        m = re.match(r"^(.*?[\w>*&\s])\s*\b([A-Za-z_]\w*)\s*(?:=.*)?$", stmt, re.S)
        if m:
            members.append((re.sub(r"\s+", "", m.group(1)).replace("c10::", ""), m.group(2)))
    return members, actions


def layout_for(version):
    """The layout number (1-based, preload/hooks/torch_layouts.h) for torch `version`, or None: the
    release's own row, else, for a patch release the table does not list, the row of its minor's
    newest listed patch (attach checks every row against the installed header anyway)."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if not m:
        return None
    releases = cumemtrace_torch_layouts.RELEASES
    if "%s.%s.%s" % m.groups() in releases:
        return releases["%s.%s.%s" % m.groups()]
    patches = [v for v in releases if v.split(".")[:2] == [m.group(1), m.group(2)]]
    if not patches:
        return None
    return releases[max(patches, key=lambda v: int(v.split(".")[2]))]


def unknown_version(version):
    """Why torch `version` has no layout, and what would give it one."""
    releases = list(cumemtrace_torch_layouts.RELEASES)
    return ("torch %s has no TraceEntry layout in this cumemtrace (it knows %s to %s); it needs "
            "that wheel's row: scripts/torch_layouts.py with the release added, then a rebuild"
            % (version, releases[0], releases[-1]))


def check_trace_entry_layout(include_dir, layout):
    """Raises ValueError saying why when the installed torch's TraceEntry is not what `layout`
    reads (cumemtrace_torch_layouts.LAYOUTS[layout - 1]): the row's header must declare it with
    the row's members, in order and with the same types, and the row's Action enumerators."""
    row = cumemtrace_torch_layouts.LAYOUTS[layout - 1]
    path = os.path.join(include_dir, row["header"])
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            found = trace_entry_declaration(f.read())
    except OSError:
        found = None
    if found is None:
        raise ValueError("no TraceEntry declaration under %s (looked in %s)"
                         % (include_dir, row["header"]))
    members, actions = found
    for i, expected in enumerate(tuple(m) for m in row["members"]):
        got = members[i] if i < len(members) else None
        if got != expected:
            raise ValueError(
                "TraceEntry in %s is not the layout cumemtrace reads: member %d is %s, "
                "expected %s" % (path, i + 1, " ".join(got) if got else "missing",
                                 " ".join(expected)))
    if actions != row["actions"]:
        raise ValueError("TraceEntry::Action in %s is not the enum cumemtrace numbers: %s"
                         % (path, ", ".join(actions) or "missing"))


def check_string_abi(torch, layout):
    """Raises ValueError when torch says it was built with another _GLIBCXX_USE_CXX11_ABI than the
    wheels of `layout`'s releases (a source build of a listed version): the row describes another
    build. (The fields read come before TraceEntry's std::string members, but the row is only
    trusted for the build it was read from.)"""
    abi = getattr(getattr(torch, "_C", None), "_GLIBCXX_USE_CXX11_ABI", None)
    want = cumemtrace_torch_layouts.LAYOUTS[layout - 1]["cxx11_abi"]
    if abi is not None and int(abi) != want:
        raise ValueError("torch %s was built with _GLIBCXX_USE_CXX11_ABI=%d, its wheels with %d"
                         % (torch.__version__, int(abi), want))


def _loaded_library(basename):
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and os.path.basename(parts[5].strip()) == basename:
                return parts[5].strip()
    return None


def _find_tracker_method(layout):
    """(allocator object, method address), or raise ValueError saying why not."""
    path = _loaded_library("libc10_cuda.so")
    if path is None:
        raise ValueError("libc10_cuda.so is not loaded")
    attach = cumemtrace_torch_layouts.LAYOUTS[layout - 1]["attach"].encode()
    syms = elf_symbols(path, [ALLOCATOR, VTABLE, attach])
    for name in (ALLOCATOR, VTABLE, attach):
        if name not in syms:
            raise ValueError("%s has no symbol %s (stripped?)" % (path, name.decode()))
    anchor = ctypes.addressof(ctypes.c_void_p.in_dll(ctypes.CDLL(path), ALLOCATOR.decode()))
    base = anchor - syms[ALLOCATOR][0]
    obj = ctypes.c_void_p.from_address(anchor).value
    if not obj:
        raise ValueError("PyTorch's CUDA allocator is not initialised")
    vtable, vtable_size = syms[VTABLE]
    vptr = ctypes.c_void_p.from_address(obj).value
    if vptr != base + vtable + 16:
        raise ValueError("the CUDA allocator is not PyTorch's NativeCachingAllocator")
    method = base + syms[attach][0]
    slots = (vtable_size - 16) // 8
    if method not in [ctypes.c_void_p.from_address(vptr + 8 * i).value for i in range(slots)]:
        raise ValueError("attachAllocatorTraceTracker is not a slot of the allocator's vtable")
    return obj, method


def _expandable_segments():
    for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        conf = os.environ.get(var, "").replace(" ", "").lower()
        if "expandable_segments:true" in conf:
            return True
    return False


def _alloc_conf():
    """The allocator configuration the program started with, as PyTorch reads it (from 2.9
    PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF); one line."""
    for var in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        if os.environ.get(var):
            return os.environ[var].replace("\n", " ")
    return ""


def _tell_settings(fields):
    """One change of the allocator's settings to the collector (kTorchInfo with event=...)."""
    entry = _preload()
    if entry is None:
        return
    text = "\n".join("%s=%s" % (k, str(v).replace("\n", " ")) for k, v in fields.items())
    entry[1](text.encode("utf-8", "replace"))


def _tell_fraction(torch, fraction, device):
    """The memory fraction now in force on `device` and what it allows: PyTorch's own limit,
    int(fraction * the device's total memory)."""
    index = torch.cuda._utils._get_device_index(device, optional=True)
    total = torch.cuda.mem_get_info(index)[1]
    _tell_settings({"event": "memory_fraction", "device": index, "fraction": repr(float(fraction)),
                    "allowed_bytes": int(float(fraction) * total), "device_total": total})


def _watch_settings(torch):
    """Records the settings a program changes while it runs: set_per_process_memory_fraction and
    _set_allocator_settings, wrapped where the program finds them; the original runs first, its
    result and exceptions unchanged, and a failure to record is never the program's."""
    memory = torch.cuda.memory

    def wrap(name, tell):
        original = getattr(memory, name, None)
        if original is None or getattr(original, "_cumemtrace", False):
            return

        def wrapper(*args, **kwargs):
            result = original(*args, **kwargs)
            try:
                tell(*args, **kwargs)
            except Exception:
                pass
            return result

        wrapper._cumemtrace = True
        wrapper.__doc__, wrapper.__name__ = original.__doc__, original.__name__
        setattr(memory, name, wrapper)
        if getattr(torch.cuda, name, None) is original:
            setattr(torch.cuda, name, wrapper)

    wrap("set_per_process_memory_fraction",
         lambda fraction, device=None: _tell_fraction(torch, fraction, device))
    wrap("_set_allocator_settings",
         lambda env: _tell_settings({"event": "alloc_conf", "alloc_conf": env}))
    # Private pools: what the allocator serves while a CUDA graph is captured or a MemPool is
    # current is kept apart from its default pools (the replay says so rather than guess).
    wrap("use_mem_pool", lambda *a, **k: _tell_settings({"event": "private_pool",
                                                         "kind": "mempool"}))
    graph = getattr(getattr(torch.cuda, "graphs", None), "CUDAGraph", None)
    begin = getattr(graph, "capture_begin", None)
    if begin is not None and not getattr(begin, "_cumemtrace", False):
        def capture_begin(self, *args, **kwargs):
            try:
                _tell_settings({"event": "private_pool", "kind": "cuda_graph"})
            except Exception:
                pass
            return begin(self, *args, **kwargs)

        capture_begin._cumemtrace = True
        graph.capture_begin = capture_begin


def _fraction_in_force(torch):
    """A memory fraction set before the capture attached (torch imported before cumemtrace could
    watch it): read back where this torch can (get_per_process_memory_fraction)."""
    get = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if get is None:
        return
    device = torch.cuda.current_device()
    fraction = get(device)
    if fraction < 1.0:
        _tell_fraction(torch, fraction, device)


def attach():
    """Runs after CUDA's lazy initialisation; never raises."""
    global _attached
    if _attached:
        return
    entry = _preload()
    if entry is None:
        return
    _attached = True
    attach_fn, info_fn = entry
    _stop_walks_at_engine()  # whatever the backend: driver events on that thread walk too
    _autograd_node_frames()
    report = {"version": "", "backend": "native", "capture": "driver", "why": "",
              "expandable_segments": "1" if _expandable_segments() else "0",
              "alloc_conf": _alloc_conf()}
    warn = None
    try:
        import torch

        version = str(torch.__version__)
        report["version"] = version
        try:
            report["backend"] = torch.cuda.memory.get_allocator_backend()
        except Exception:
            pass
        layout = layout_for(version)
        if report["backend"] == "cudaMallocAsync":
            report["why"] = "backend cudaMallocAsync: every tensor is one driver allocation"
            _pool_allocator_stacks()
        elif os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") not in ("", "0"):
            report["why"] = "PYTORCH_NO_CUDA_MEMORY_CACHING: every tensor is one driver allocation"
        elif layout is None:
            report["why"] = unknown_version(version)
            warn = report["why"]
        else:
            check_trace_entry_layout(
                os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "include"), layout)
            check_string_abi(torch, layout)
            obj, method = _find_tracker_method(layout)
            # The method hands the tracker to each device's allocator that exists: with none
            # (CUDA not initialised) it returns having attached nothing. Not is_initialized():
            # real torch sets that only after running its lazy calls, this one among them.
            if torch.cuda.device_count() == 0:
                raise ValueError("CUDA is not available: PyTorch's allocator has no device")
            rc = attach_fn(obj, method, layout)
            if rc == 0:
                report["capture"] = "blocks"
            else:
                report["why"] = "attaching the allocator tracker failed (%d)" % rc
                warn = report["why"]
    except Exception as e:
        report["why"] = str(e) or type(e).__name__
        warn = report["why"]
    if warn:
        sys.stderr.write("cumemtrace: PyTorch blocks not captured (%s); tracing continues at "
                         "driver level\n" % warn)
    text = "\n".join("%s=%s" % (k, str(v).replace("\n", " ")) for k, v in report.items())
    info_fn(text.encode("utf-8", "replace"))
    try:
        import torch

        _fraction_in_force(torch)
    except Exception:
        pass


# The CUMEMTRACE_* settings read here, by the one rule of the settings table
# (preload/core/settings_table.h; scripts/settings_check.py holds this list to its rows read by
# python-in-target): an unset or empty variable is the default; a switch is 0 or 1; any other
# value gets one `cumemtrace:` line naming the variable, the value and what was expected, and that
# feature off. variable -> its default; every one a switch.
SETTINGS = {
    "CUMEMTRACE_TORCH": "1",   # capture PyTorch's caching-allocator blocks
    "CUMEMTRACE_PHASES": "1",  # automatic phases and ownership walks
}
_said_bad = set()  # the variables already said to be bad: one line each per process


def _switch_on(name):
    """True when the switch `name` is on; a bad value: one line (once) and False."""
    value = os.environ.get(name) or SETTINGS[name]
    if value in ("0", "1"):
        return value == "1"
    if name not in _said_bad:
        _said_bad.add(name)
        try:  # runs inside the program's `import torch` too: never raise into it
            sys.stderr.write("cumemtrace: invalid %s (expected 0 or 1): %s; that feature is off\n"
                             % (name, value))
        except Exception:
            pass
    return False


def _blocks_wanted():
    return _switch_on("CUMEMTRACE_TORCH")


def _phases_wanted():
    return _switch_on("CUMEMTRACE_PHASES")


def _on_torch_imported(torch):
    cumemtrace_ranks.install(torch)  # whatever else is on: file names carry the rank
    if _blocks_wanted():
        try:
            _watch_settings(torch)
        except Exception:
            pass
        try:
            torch.cuda._lazy_call(attach)
        except Exception as e:
            sys.stderr.write("cumemtrace: PyTorch blocks not captured (%s); tracing continues at "
                             "driver level\n" % (str(e) or type(e).__name__))
    if _phases_wanted():  # whatever the backend: phases are useful at driver level too
        cumemtrace_phases.install(torch)


class _TorchImportWatcher:
    """A meta-path finder that lets `torch` import normally, then runs _on_torch_imported."""

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        import importlib.util

        sys.meta_path.remove(self)  # one torch import; the lookup below must not find us again
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _on_torch_imported(module)

        spec.loader.exec_module = exec_module
        return spec


def install():
    global _installed
    if _installed or not (_blocks_wanted() or _phases_wanted()) or _preload() is None:
        return
    _installed = True
    if "torch" in sys.modules:
        _on_torch_imported(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _TorchImportWatcher())
