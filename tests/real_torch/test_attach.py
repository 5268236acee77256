"""The attach path (preload/python/cumemtrace_torch.py) against the installed torch 2.11 wheel,
where tests/e2e/test_torch_blocks.py uses the fake torch: the real TraceEntry header changed, the
real libc10_cuda.so's symbols (against nm), vtable and live allocator object, the real allocator
backends chosen by PYTORCH_CUDA_ALLOC_CONF, and the whole path under `cumemtrace run` up to the
one line it prints where CUDA is not available (no GPU here). The real header as a whole against
its row: tests/preload/test_torch_layouts.py."""
import ctypes
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

import cumemtrace_torch
import cumemtrace_torch_layouts
from conftest import HERE, run, our_lines

INCLUDE = os.path.join(os.path.dirname(torch.__file__), "include")
HEADER = os.path.join(INCLUDE, "c10", "core", "CachingDeviceAllocator.h")
LIBC10_CUDA = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10_cuda.so")
NATIVE = "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::"
LAYOUT = cumemtrace_torch.layout_for(torch.__version__)  # the installed wheel's row


@pytest.mark.parametrize("old, new, why", [
    ("  Action action_;\n  c10::DeviceIndex device_;",
     "  c10::DeviceIndex device_;\n  Action action_;",
     "member 1 is DeviceIndex device_, expected Action action_"),
    ("    SEGMENT_MAP, //", "    SEGMENT_MAP = 5, //", "TraceEntry::Action in %s is not the enum "
     "cumemtrace numbers: ALLOC, FREE_REQUESTED, FREE_COMPLETED, SEGMENT_ALLOC, SEGMENT_FREE, "
     "SEGMENT_MAP = 5, SEGMENT_UNMAP, SNAPSHOT, OOM")])
def test_the_wheels_header_changed_is_refused(tmp_path, old, new, why):
    """The real header with one change (copied: the wheel is not touched) fails the check."""
    include = tmp_path / "include"
    shutil.copytree(os.path.join(INCLUDE, "c10", "core"), include / "c10" / "core")
    header = include / "c10" / "core" / "CachingDeviceAllocator.h"
    text = header.read_text()
    assert text.count(old) == 1
    header.write_text(text.replace(old, new))
    with pytest.raises(ValueError) as e:
        cumemtrace_torch.check_trace_entry_layout(str(include), LAYOUT)
    if "%s" in why:
        assert str(e.value) == why % header
    else:
        assert str(e.value) == ("TraceEntry in %s is not the layout cumemtrace reads: " % header
                                + why)


def nm(path, names):
    """{demangled name: value} by binutils' nm, the reference for our ELF reader."""
    out = subprocess.run(["nm", "-C", path], capture_output=True, text=True, check=True).stdout
    got = {}
    for line in out.splitlines():
        value, _kind, name = line.split(" ", 2)
        if name in names:
            got[name] = int(value, 16)
    return got


def test_the_tracker_method_found_in_the_real_libc10_cuda():
    """Our ELF reader's symbols are nm's; the live allocator (torch is imported here, native
    backend) is a NativeCachingAllocator whose vtable holds attachAllocatorTraceTracker."""
    attach = (NATIVE + "attachAllocatorTraceTracker(std::function<void (c10::"
              "CachingDeviceAllocator::TraceEntry const&)>)")
    vtable = "vtable for " + NATIVE[:-2]
    allocator = "c10::cuda::CUDACachingAllocator::allocator"
    ref = nm(LIBC10_CUDA, {attach, vtable, allocator})
    mangled = cumemtrace_torch_layouts.LAYOUTS[LAYOUT - 1]["attach"].encode()
    ours = cumemtrace_torch.elf_symbols(LIBC10_CUDA, [mangled, cumemtrace_torch.VTABLE,
                                                      cumemtrace_torch.ALLOCATOR])
    assert {k: v[0] for k, v in ours.items()} == {mangled: ref[attach],
                                                  cumemtrace_torch.VTABLE: ref[vtable],
                                                  cumemtrace_torch.ALLOCATOR: ref[allocator]}
    obj, method = cumemtrace_torch._find_tracker_method(LAYOUT)
    anchor = ctypes.addressof(ctypes.c_void_p.in_dll(ctypes.CDLL(LIBC10_CUDA),
                                                     cumemtrace_torch.ALLOCATOR.decode()))
    base = anchor - ref[allocator]
    assert method == base + ref[attach]
    assert obj == ctypes.c_void_p.from_address(anchor).value


def attach_run(tmp_path, **extra):
    p, snaps = run(tmp_path, [sys.executable, os.path.join(HERE, "attach_program.py")], **extra)
    assert p.returncode == 0, p.stderr
    assert len(snaps) == 1, (list(snaps), p.stderr)
    seen = json.loads(p.stdout)
    # The sitecustomize's watcher saw the real `import torch`: attach waits in torch's lazy
    # calls, init_process_group is wrapped; CUDA never came up, so torch never called attach.
    assert (seen["version"], seen["available"], seen["queued"], seen["ranks_wrapped"],
            seen["attached_by_torch"]) == (torch.__version__, False, 1, True, False), seen
    return p, list(snaps.values())[0]["cumemtrace"]["pytorch"], seen


def test_attach_ends_where_cuda_is_not_available(tmp_path):
    """Version, header and libc10_cuda.so's symbols and vtable pass; the allocator has no
    device, so nothing is attached: one line, the driver view (not "blocks" with no tracker)."""
    p, info, seen = attach_run(tmp_path, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    why = "CUDA is not available: PyTorch's allocator has no device"
    assert our_lines(p) == ["cumemtrace: PyTorch blocks not captured (%s); tracing continues at "
                            "driver level" % why], p.stderr
    # The settings as the program started (issue 55: what-if replays the recorded settings).
    assert [c["alloc_conf"] for c in info.pop("alloc_confs")] == ["expandable_segments:True"]
    assert info == {"version": "2.11.0+cu130", "backend": "native", "expandable_segments": True,
                    "capture": "driver", "why": why}
    assert seen["tracker_method"] == "found"


@pytest.mark.parametrize("var, value, backend, why", [
    ("PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync", "cudaMallocAsync",
     "backend cudaMallocAsync: every tensor is one driver allocation"),
    ("PYTORCH_NO_CUDA_MEMORY_CACHING", "1", "native",
     "PYTORCH_NO_CUDA_MEMORY_CACHING: every tensor is one driver allocation")])
def test_allocators_without_blocks_are_the_driver_view_silently(tmp_path, var, value, backend,
                                                                 why):
    """The backend as the real torch reads PYTORCH_CUDA_ALLOC_CONF: under cudaMallocAsync the
    live allocator is not NativeCachingAllocator (the vtable check says so); no line."""
    p, info, seen = attach_run(tmp_path, **{var: value})
    assert our_lines(p) == [], p.stderr
    confs = [c["alloc_conf"] for c in info.pop("alloc_confs", [])]
    # No PYTORCH_CUDA_ALLOC_CONF: the empty setting, as PyTorch reads it.
    assert confs == ([value] if var == "PYTORCH_CUDA_ALLOC_CONF" else [""]), confs
    assert info == {"version": "2.11.0+cu130", "backend": backend, "expandable_segments": False,
                    "capture": "driver", "why": why}
    assert seen["tracker_method"] == ("found" if backend == "native" else
                                      "the CUDA allocator is not PyTorch's NativeCachingAllocator")
