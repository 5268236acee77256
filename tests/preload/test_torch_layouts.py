"""The TraceEntry layout table of torch 2.4 to 2.15 (preload/hooks/torch_layouts.h for the tracker,
preload/python/cumemtrace_torch_layouts.py for the attach), without network: both files are what
scripts/torch_layouts.py renders from the committed rows, the rows of 2.4.0, 2.11.0 and 2.15.0
are what the wheels said, the attach picks rows by version and refuses a header or build that
disagrees (checked against the real 2.11 wheel's header in the venv of scripts/setup.sh, whose
absence fails), and the generator's header probe measures offsets with g++. The check against
the wheels themselves is `scripts/torch_layouts.py --check` (docs/testing.md)."""
import glob
import os
import re
import subprocess
import sys
import types

import pytest

SOURCE = os.environ.get("CT_SOURCE", os.path.join(os.path.dirname(__file__), "../.."))
sys.path.insert(0, os.path.join(SOURCE, "preload", "python"))
sys.path.insert(0, os.path.join(SOURCE, "scripts"))
import cumemtrace_torch  # noqa: E402
import cumemtrace_torch_layouts as table  # noqa: E402
import torch_layouts  # noqa: E402

VENV = os.environ.get("CUMEMTRACE_TORCH_VENV",
                      os.path.expanduser("~/.cache/cumemtrace/torch-2.11"))
WIRE_ACTIONS = ["ALLOC", "FREE_REQUESTED", "FREE_COMPLETED", "SEGMENT_ALLOC", "SEGMENT_FREE",
                "SEGMENT_MAP", "SEGMENT_UNMAP", "SNAPSHOT", "OOM"]
MEMBERS_2_4 = [["Action", "action_"], ["DeviceIndex", "device_"], ["size_t", "addr_"],
               ["std::shared_ptr<GatheredContext>", "context_"], ["cudaStream_t", "stream_"],
               ["size_t", "size_"]]
MEMBERS_2_11 = MEMBERS_2_4[:4] + [["void*", "stream_"], ["size_t", "size_"]]
ATTACH_PREFIX = ("_ZN3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocator27attach"
                 "AllocatorTraceTrackerESt8functionIFvRK")


def cpp_rows():
    """{layout number: (action, device, addr, stream, size), ...} and the releases
    named in each row's comment, parsed from the committed preload/hooks/torch_layouts.h."""
    with open(torch_layouts.CPP_OUT) as f:
        text = f.read()
    rows, names = {}, {}
    for m in re.finditer(r"\{([\d, ]+)\},\s*// (\d+): torch ([\d., ]+)\n", text):
        rows[int(m.group(2))] = tuple(int(x) for x in m.group(1).split(","))
        names[int(m.group(2))] = m.group(3).split(", ")
    return rows, names


def test_committed_files_are_the_rendering_of_the_committed_rows():
    p = subprocess.run([sys.executable, os.path.join(SOURCE, "scripts", "torch_layouts.py"),
                        "--offline"], capture_output=True, text=True)
    assert (p.returncode, p.stdout, p.stderr) == (0, "", "")


def test_rendering_does_not_depend_on_the_order_the_generator_found_things_in():
    rows = [dict(reversed(list(r.items())), offsets=dict(reversed(list(r["offsets"].items()))))
            for r in table.LAYOUTS]
    with open(torch_layouts.PY_OUT) as f:
        assert torch_layouts.render_py(rows, table.RELEASES) == f.read()


@pytest.mark.parametrize("target,old,new", [
    ("CPP_OUT", "{0, 4, 8, 32, 40},  // 3:", "{0, 4, 8, 24, 40},  // 3:"),
    ("PY_OUT", '"2.13.0": 3,', '"2.13.0": 4,'),
])
def test_offline_check_fails_on_a_hand_edit(tmp_path, monkeypatch, capsys, target, old, new):
    with open(getattr(torch_layouts, target)) as f:
        text = f.read()
    assert text.count(old) == 1
    edited = tmp_path / "edited"
    edited.write_text(text.replace(old, new))
    monkeypatch.setattr(torch_layouts, target, str(edited))
    monkeypatch.setattr(sys, "argv", ["torch_layouts.py", "--offline"])
    assert torch_layouts.main() == 1
    diff = capsys.readouterr().out
    assert ("\n-    " + new) in diff and ("\n+    " + old) in diff


def test_every_release_has_a_row_and_cpp_and_python_rows_agree():
    assert list(table.RELEASES) == torch_layouts.RELEASES == [
        "2.4.0", "2.4.1", "2.5.0", "2.5.1", "2.6.0", "2.7.0", "2.7.1", "2.8.0", "2.9.0",
        "2.9.1", "2.10.0", "2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0"]
    rows, names = cpp_rows()
    assert sorted(rows) == list(range(1, len(table.LAYOUTS) + 1)) == sorted(
        set(table.RELEASES.values()))
    for n, row in enumerate(table.LAYOUTS, 1):
        o = row["offsets"]
        assert rows[n] == (o["action"], o["device"], o["addr"], o["stream"], o["size"])
        assert names[n] == [v for v, k in table.RELEASES.items() if k == n]
    assert len({str(sorted(r.items())) for r in table.LAYOUTS}) == len(table.LAYOUTS)


def row(version):
    return table.LAYOUTS[table.RELEASES[version] - 1]


def test_row_of_2_4_0():
    r = row("2.4.0")
    assert cpp_rows()[0][table.RELEASES["2.4.0"]] == (0, 4, 8, 32, 40)
    assert (r["header"], r["namespace"], r["cxx11_abi"]) == (
        "c10/cuda/CUDACachingAllocator.h", "c10::cuda::CUDACachingAllocator", 0)
    assert r["members"] == MEMBERS_2_4 and r["actions"] == WIRE_ACTIONS
    assert r["attach"] == ATTACH_PREFIX + "NS1_10TraceEntryEEE"


def test_row_of_2_11_0():
    r = row("2.11.0")
    assert cpp_rows()[0][table.RELEASES["2.11.0"]] == (0, 4, 8, 32, 40)
    assert (r["header"], r["namespace"], r["cxx11_abi"]) == (
        "c10/core/CachingDeviceAllocator.h", "c10::CachingDeviceAllocator", 1)
    assert r["members"] == MEMBERS_2_11 and r["actions"] == WIRE_ACTIONS
    assert r["attach"] == ATTACH_PREFIX + "NS_22CachingDeviceAllocator10TraceEntryEEE"


def test_row_of_2_15_0():
    r = row("2.15.0")
    assert cpp_rows()[0][table.RELEASES["2.15.0"]] == (0, 4, 8, 32, 40)
    assert (r["header"], r["namespace"], r["cxx11_abi"]) == (
        "c10/core/CachingDeviceAllocator.h", "c10::CachingDeviceAllocator", 1)
    assert r["members"] == MEMBERS_2_11 and r["actions"] == WIRE_ACTIONS + ["ANNOTATE"]
    assert r["attach"] == ATTACH_PREFIX + "NS_22CachingDeviceAllocator10TraceEntryEEE"


@pytest.mark.parametrize("version,release", [
    ("2.4.0", "2.4.0"), ("2.6.0", "2.6.0"), ("2.7.0", "2.7.0"), ("2.11.0+cu130", "2.11.0"),
    ("2.13.0", "2.13.0"), ("2.14.0", "2.14.0"), ("2.15.0+cpu", "2.15.0"),
    # Unlisted patch releases: the row of the minor's newest listed patch.
    ("2.12.2", "2.12.1"), ("2.6.3", "2.6.0"), ("2.11.0a0+git1234", "2.11.0"),
])
def test_layout_for_known_releases(version, release):
    assert cumemtrace_torch.layout_for(version) == table.RELEASES[release]


@pytest.mark.parametrize("version", ["2.3.1", "9.9", "9.9.0", "2.16.0", "2.16.0a0", "", "2"])
def test_layout_for_unknown_versions(version):
    assert cumemtrace_torch.layout_for(version) is None


def test_unknown_version_says_what_would_be_needed():
    assert cumemtrace_torch.unknown_version("2.3.1") == (
        "torch 2.3.1 has no TraceEntry layout in this cumemtrace (it knows 2.4.0 to 2.15.0); it "
        "needs that wheel's row: scripts/torch_layouts.py with the release added, then a rebuild")


def wheel_include():
    found = glob.glob(os.path.join(VENV, "lib", "python3*", "site-packages", "torch", "include"))
    assert found, "no torch in %s (scripts/setup.sh installs it)" % VENV
    return found[0]


def test_real_2_11_library_has_the_symbols_the_attach_looks_up():
    lib = os.path.join(os.path.dirname(wheel_include()), "lib", "libc10_cuda.so")
    names = [cumemtrace_torch.ALLOCATOR, cumemtrace_torch.VTABLE, row("2.11.0")["attach"].encode()]
    assert sorted(cumemtrace_torch.elf_symbols(lib, names)) == sorted(names)
    assert row("2.4.0")["attach"].encode() not in cumemtrace_torch.elf_symbols(
        lib, [row("2.4.0")["attach"].encode()])


def refusal(include, version):
    with pytest.raises(ValueError) as e:
        cumemtrace_torch.check_trace_entry_layout(include, table.RELEASES[version])
    return str(e.value)


def test_real_2_11_header_passes_its_row_and_refuses_the_others():
    include = wheel_include()
    cumemtrace_torch.check_trace_entry_layout(include, table.RELEASES["2.11.0"])
    assert refusal(include, "2.4.0") == refusal(include, "2.7.0") == (
        "no TraceEntry declaration under %s (looked in c10/cuda/CUDACachingAllocator.h)"
        % include)
    assert refusal(include, "2.15.0") == (
        "TraceEntry::Action in %s is not the enum cumemtrace numbers: %s"
        % (os.path.join(include, "c10/core/CachingDeviceAllocator.h"), ", ".join(WIRE_ACTIONS)))


HEADER_2_4 = """#pragma once
#include <memory>
typedef struct CUstream_st* cudaStream_t;
namespace c10 {
typedef signed char DeviceIndex;
namespace cuda {
namespace CUDACachingAllocator {
struct GatheredContext;
struct TraceEntry {
  enum Action {
    ALLOC, FREE_REQUESTED, FREE_COMPLETED, SEGMENT_ALLOC, SEGMENT_FREE, SEGMENT_MAP,
    SEGMENT_UNMAP, SNAPSHOT, OOM%s
  };
  TraceEntry(Action action, size_t addr) : action_(action), addr_(addr) {}
  Action action_;
  %s device_;
  size_t addr_; // for OOM, the free bytes
  std::shared_ptr<GatheredContext> context_;
  cudaStream_t stream_;
  size_t size_;
  long long time_;
};
} // namespace CUDACachingAllocator
} // namespace cuda
} // namespace c10
"""


def header_tree(tmp_path, device_type="c10::DeviceIndex", extra_action=""):
    include = tmp_path / "include"
    path = include / "c10" / "cuda" / "CUDACachingAllocator.h"
    path.parent.mkdir(parents=True)
    path.write_text(HEADER_2_4 % (extra_action, device_type))
    return str(include)


def test_a_header_whose_member_type_differs_is_refused(tmp_path):
    include = header_tree(tmp_path, device_type="int")
    assert refusal(include, "2.4.0") == (
        "TraceEntry in %s is not the layout cumemtrace reads: member 2 is int device_, expected "
        "DeviceIndex device_" % os.path.join(include, "c10/cuda/CUDACachingAllocator.h"))


def test_a_header_with_an_action_the_row_lacks_is_refused(tmp_path):
    include = header_tree(tmp_path, extra_action=", ANNOTATE")
    assert refusal(include, "2.4.0").endswith("is not the enum cumemtrace numbers: " +
                                               ", ".join(WIRE_ACTIONS + ["ANNOTATE"]))


def test_a_build_with_another_string_abi_is_refused():
    def torch(abi):
        return types.SimpleNamespace(__version__="2.4.0",
                                     _C=types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=abi))

    cumemtrace_torch.check_string_abi(torch(False), table.RELEASES["2.4.0"])
    cumemtrace_torch.check_string_abi(torch(True), table.RELEASES["2.11.0"])
    with pytest.raises(ValueError) as e:
        cumemtrace_torch.check_string_abi(torch(True), table.RELEASES["2.4.0"])
    assert str(e.value) == "torch 2.4.0 was built with _GLIBCXX_USE_CXX11_ABI=1, its wheels with 0"


@pytest.mark.parametrize("device_type,offsets", [
    ("c10::DeviceIndex", {"action_": 0, "device_": 4, "addr_": 8, "stream_": 32, "size_": 40}),
    # A 4-byte device_ still fits before addr_; an 8-byte one moves everything after it.
    ("int", {"action_": 0, "device_": 4, "addr_": 8, "stream_": 32, "size_": 40}),
    ("long", {"action_": 0, "device_": 8, "addr_": 16, "stream_": 40, "size_": 48}),
])
def test_generator_reads_namespace_members_and_offsets_from_a_header(tmp_path, device_type,
                                                                     offsets):
    include = header_tree(tmp_path, device_type=device_type)
    header, namespace, members, actions = torch_layouts.find_declaration(include)
    assert (header, namespace) == ("c10/cuda/CUDACachingAllocator.h",
                                   "c10::cuda::CUDACachingAllocator")
    assert members[1] == (device_type.replace("c10::", ""), "device_")
    layout, values = torch_layouts.probe(include, header, namespace, members, actions, 1)
    assert {n: layout[n][0] for n in offsets} == offsets
    assert values == {a: i for i, a in enumerate(WIRE_ACTIONS)}
