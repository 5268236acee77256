"""Attaches cumemtrace's tracker to PyTorch's caching allocator (loaded by our sitecustomize).

Why this way (docs/pytorch.md): PyTorch's allocator trace trackers see every block event
(alloc, free_requested, free_completed, segment_*, oom) even with its own history off, but only
from C++: attachAllocatorTraceTracker is a virtual method of the allocator object, whose only
exported anchor is the data symbol c10::cuda::CUDACachingAllocator::allocator of libc10_cuda.so.
The method and the NativeCachingAllocator vtable are LOCAL symbols of that library's .symtab, read
here with a small ELF reader. Before anything is called we check: the torch version has a
TraceEntry layout we know, and the installed torch's own header (torch/include) declares
TraceEntry with the members and Action enum that layout reads, the backend is the native caching allocator (cudaMallocAsync: the
driver events already are the tensors), caching is on, the live allocator's vtable pointer is
NativeCachingAllocator's, and the method is one of that vtable's slots. Then the preload's
cumemtrace_torch_attach builds the std::function and calls it. This runs in Python right after
CUDA's lazy initialisation (torch.cuda._lazy_call), never inside a driver hook.

What was found is reported to the collector (cumemtrace_torch_info) for the snapshot's tool
section; a torch we cannot handle gives one `cumemtrace:` line and the driver-level view.
Once torch is imported the automatic phases (cumemtrace_phases) are installed too, whatever the
backend (CUMEMTRACE_TORCH=0 and CUMEMTRACE_PHASES=0 turn each off).
"""
import ctypes
import os
import re
import struct
import sys

import cumemtrace_phases

# torch "major.minor" -> the preload's TraceEntry layout number (preload/torch_tracker.cpp).
SUPPORTED = {"2.11": 1}

# What each layout number assumes of c10::CachingDeviceAllocator::TraceEntry, checked against the
# installed torch's own header (TRACE_ENTRY_HEADERS under <torch>/include) before attaching: its
# first data members, in order, as (type, name) with whitespace and "c10::" removed (the preload
# reads action_, device_, addr_, stream_ and size_ at the offsets these give on x86-64), and the
# Action enumerators it numbers (wire::TorchAction), in order, without explicit values.
LAYOUT_MEMBERS = {
    1: [("Action", "action_"), ("DeviceIndex", "device_"), ("size_t", "addr_"),
        ("std::shared_ptr<GatheredContext>", "context_"), ("void*", "stream_"),
        ("size_t", "size_")],
}
TRACE_ENTRY_ACTIONS = ["ALLOC", "FREE_REQUESTED", "FREE_COMPLETED", "SEGMENT_ALLOC",
                       "SEGMENT_FREE", "SEGMENT_MAP", "SEGMENT_UNMAP", "SNAPSHOT", "OOM"]
TRACE_ENTRY_HEADERS = ("c10/core/CachingDeviceAllocator.h", "c10/cuda/CUDACachingAllocator.h")

ALLOCATOR = b"_ZN3c104cuda20CUDACachingAllocator9allocatorE"
VTABLE = b"_ZTVN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE"
ATTACH = (
    b"_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator27attachAllocatorTrace"
    b"TrackerESt8functionIFvRKNS_22CachingDeviceAllocator10TraceEntryEEE"
)

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
# node's apply() (preload/autograd_node.h) instead of a walk through the op. Node::apply's slot in
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


def elf_symbols(path, names):
    """{name: (st_value, st_size)} of the wanted names in the ELF64 file's .symtab and .dynsym."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("%s is not a 64-bit little-endian ELF file" % path)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    found = {}
    for sh in sections:
        if sh[1] not in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
            continue
        strtab = sections[sh[6]]
        strings = data[strtab[4]:strtab[4] + strtab[5]]
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


def check_trace_entry_layout(include_dir, layout):
    """Raises ValueError saying why when the installed torch's TraceEntry is not what `layout`
    reads (preload/torch_tracker.cpp)."""
    for rel in TRACE_ENTRY_HEADERS:
        path = os.path.join(include_dir, rel)
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                found = trace_entry_declaration(f.read())
        except OSError:
            continue
        if found is None:
            continue
        members, actions = found
        want = LAYOUT_MEMBERS[layout]
        for i, expected in enumerate(want):
            got = members[i] if i < len(members) else None
            if got != expected:
                raise ValueError(
                    "TraceEntry in %s is not the layout cumemtrace reads: member %d is %s, "
                    "expected %s" % (path, i + 1, " ".join(got) if got else "missing",
                                     " ".join(expected)))
        if actions[:len(TRACE_ENTRY_ACTIONS)] != TRACE_ENTRY_ACTIONS or any(
                "=" in a for a in actions):
            raise ValueError("TraceEntry::Action in %s is not the enum cumemtrace numbers: %s"
                             % (path, ", ".join(actions) or "missing"))
        return
    raise ValueError("no TraceEntry declaration under %s (looked in %s)"
                     % (include_dir, ", ".join(TRACE_ENTRY_HEADERS)))


def _loaded_library(basename):
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and os.path.basename(parts[5].strip()) == basename:
                return parts[5].strip()
    return None


def _find_tracker_method():
    """(allocator object, method address), or raise ValueError saying why not."""
    path = _loaded_library("libc10_cuda.so")
    if path is None:
        raise ValueError("libc10_cuda.so is not loaded")
    syms = elf_symbols(path, [ALLOCATOR, VTABLE, ATTACH])
    for name in (ALLOCATOR, VTABLE, ATTACH):
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
    method = base + syms[ATTACH][0]
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
              "expandable_segments": "1" if _expandable_segments() else "0"}
    warn = None
    try:
        import torch

        version = str(torch.__version__)
        report["version"] = version
        try:
            report["backend"] = torch.cuda.memory.get_allocator_backend()
        except Exception:
            pass
        major_minor = ".".join(version.split("+")[0].split(".")[:2])
        layout = SUPPORTED.get(major_minor)
        if report["backend"] == "cudaMallocAsync":
            report["why"] = "backend cudaMallocAsync: every tensor is one driver allocation"
            _pool_allocator_stacks()
        elif os.environ.get("PYTORCH_NO_CUDA_MEMORY_CACHING", "") not in ("", "0"):
            report["why"] = "PYTORCH_NO_CUDA_MEMORY_CACHING: every tensor is one driver allocation"
        elif layout is None:
            report["why"] = "torch %s is not supported for block capture (supported: %s)" % (
                version, ", ".join(sorted(SUPPORTED)))
            warn = report["why"]
        else:
            check_trace_entry_layout(
                os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "include"), layout)
            obj, method = _find_tracker_method()
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


def _blocks_wanted():
    return os.environ.get("CUMEMTRACE_TORCH", "1") != "0"


def _phases_wanted():
    return os.environ.get("CUMEMTRACE_PHASES", "1") != "0"


def _on_torch_imported(torch):
    if _blocks_wanted():
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
