"""cuBLAS workspaces by their data pointers (preload/python/cumemtrace_workspaces.py): torch's own
workspace maps read in libtorch_cuda.so of the venv's real torch (a CUDA build; on the CPU the maps
are empty, and their empty shape is what is checked before any walk), the red-black tree reader on
a tree laid out here as libstdc++ lays out std::map<tuple<void*, void*>, DataPtr>, and the walks
the phases send (role 6) after each step and, for inference, after each root forward, and right
before torch clears them (CUDA graph trees' clear_cublass_cache around each recording)."""
import ctypes
import io
import struct

import pytest
import torch
import torch.nn as nn

import cumemtrace_phases
import cumemtrace_workspaces
from conftest import bwd, fwd, opt_step, zg

WORKSPACE = 6


def test_torchs_own_maps_are_read_and_empty_on_the_cpu():
    err = io.StringIO()
    ws = cumemtrace_workspaces.make(torch, err)
    assert err.getvalue() == ""
    assert ws is not None and len(ws._maps) == 2
    assert ws.pointers() == []


class Memory:
    """Nodes laid out as libstdc++'s: color, parent, left, right, then the value (key 16 bytes,
    DataPtr whose first word is the data pointer); the map's header node at +8."""

    def __init__(self):
        self.blocks = []

    def buf(self, n):
        b = ctypes.create_string_buffer(n)
        self.blocks.append(b)
        return ctypes.addressof(b)

    def node(self, data, left=0, right=0):
        at = self.buf(64)
        ctypes.memmove(at, struct.pack("<iiQQQQQQQ", 0, 0, 0, left, right, 1, 2, data, 0), 64)
        return at

    def header(self, root, leftmost, rightmost, count):
        at = self.buf(48)
        ctypes.memmove(at + 16, struct.pack("<QQQQ", root, leftmost, rightmost, count), 32)
        return at + 8


def read(address, n):
    return ctypes.string_at(address, n)


def test_a_tree_of_three_workspaces():
    m = Memory()
    a, c = m.node(0x7F0000000000), m.node(0x7F0002000000)
    b = m.node(0x7F0001000000, left=a, right=c)
    h = m.header(b, a, c, 3)
    assert sorted(cumemtrace_workspaces.read_tree(read, h, 3)) == [
        0x7F0000000000, 0x7F0001000000, 0x7F0002000000]


def test_a_tree_of_another_shape_is_refused():
    m = Memory()
    a = m.node(0x7F0000000000)
    b = m.node(0x7F0001000000, left=a)
    with pytest.raises(cumemtrace_workspaces.LayoutError, match="more nodes"):
        cumemtrace_workspaces.read_tree(read, m.header(b, a, b, 1), 1)
    with pytest.raises(cumemtrace_workspaces.LayoutError, match="2 nodes for a count of 3"):
        cumemtrace_workspaces.read_tree(read, m.header(b, a, b, 3), 3)
    with pytest.raises(cumemtrace_workspaces.LayoutError, match="empty map"):
        cumemtrace_workspaces.read_tree(read, m.header(0, 8, 8, 0), 0)
    with pytest.raises(cumemtrace_workspaces.LayoutError, match="not aligned"):
        cumemtrace_workspaces.read_tree(read, m.header(m.node(1, left=a + 4), a, a, 2), 2)


class FakeWorkspaces:
    """What torch's maps hold at each read: a list of pointer lists, the last repeated."""

    def __init__(self, *reads):
        self.reads = list(reads)

    def pointers(self):
        return self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]


def walks_of(rec, role):
    return [w for r, w in rec.walks() if r == role]


def test_the_phases_walk_them_at_each_step(phases):
    ph, rec, err = phases
    ph.set_workspaces(FakeWorkspaces([], [0x1000], [0x1000], [0x1000, 0x3000]))
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        opt.zero_grad()
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
    assert rec.marks()[:4] == zg() + fwd()
    # sent when they changed: the first step's empty read sends nothing
    assert walks_of(rec, WORKSPACE) == [[(0x1000, 0)], [(0x1000, 0), (0x3000, 0)]]
    assert err.getvalue() == ""


def test_inference_walks_them_after_each_forward(phases):
    ph, rec, err = phases
    ph.set_workspaces(FakeWorkspaces([0x2000]))
    model = nn.Linear(4, 4)
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(2, 4))
    assert rec.marks() == fwd() * 3
    assert walks_of(rec, WORKSPACE) == [[(0x2000, 0)]]
    assert [e[0] for e in rec.events][:3] == ["START", "OWNERS", "OWNERS"]  # params, input
    assert rec.events[3] == ("END", "auto:forward")
    assert rec.events[4] == ("OWNERS", WORKSPACE, [(0x2000, 0)])
    assert err.getvalue() == ""


class BrokenWorkspaces:
    def pointers(self):
        raise cumemtrace_workspaces.LayoutError("a map of 9999 nodes with root 0x1")


def test_a_map_gone_wrong_stops_only_its_walk(phases):
    ph, rec, err = phases
    ph.set_workspaces(BrokenWorkspaces())
    model = nn.Linear(4, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(2, 4)).sum().backward()
        opt.step()
    assert rec.marks() == (zg() + fwd() + bwd() + opt_step()) * 2  # the phases went on
    assert walks_of(rec, WORKSPACE) == []
    assert err.getvalue() == ("cumemtrace: cuBLAS workspaces no longer read (LayoutError: a map "
                              "of 9999 nodes with root 0x1); they keep the label of the phase "
                              "that made them\n")


def test_a_clear_walks_them_first(phases):
    """CUDA graph trees (torch.compile mode="reduce-overhead") clear torch's workspaces before and
    after each warm-up and recording: the workspace a recording made in the graph pool lives only
    between two clears, so it is walked right before each, through torch's own caller."""
    from torch._inductor import cudagraph_trees
    ph, rec, err = phases
    original = ph._wrapped_names[-1][2]
    ph.set_workspaces(FakeWorkspaces([0x5000], []))
    cudagraph_trees.clear_cublass_cache()  # a recording's workspace, about to be freed
    assert walks_of(rec, WORKSPACE) == [[(0x5000, 0)]]
    cudagraph_trees.clear_cublass_cache()  # cleared: none left, the empty list is sent
    assert walks_of(rec, WORKSPACE) == [[(0x5000, 0)], []]
    assert torch._C._cuda_clearCublasWorkspaces.__wrapped__ is original
    ph.uninstall()
    assert torch._C._cuda_clearCublasWorkspaces is original
    assert err.getvalue() == ""
