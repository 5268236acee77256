#!/usr/bin/env python3
"""Generates the TraceEntry layout table of every torch release cumemtrace captures blocks on,
from the real wheels (docs/pytorch.md "Supported versions").

    scripts/torch_layouts.py            regenerate preload/hooks/torch_layouts.h and
                                        preload/python/cumemtrace_torch_layouts.py
    scripts/torch_layouts.py --check    regenerate in memory; exit 1 with a diff when the
                                        committed files differ from what the wheels say
    scripts/torch_layouts.py --offline  no network: render both files from the committed Python
                                        table and exit 1 with a diff when either differs (CTest)

For each release in RELEASES the cp311 manylinux x86-64 wheel is read with HTTP range requests
(only the zip's directory and the members below: about 10 MB of a 0.5-0.9 GB wheel), cached in
~/.cache/cumemtrace/wheels/torch-VERSION (CUMEMTRACE_WHEEL_CACHE), never in the repository:
  - torch/include/c10/** and torch/include/torch/headeronly/**: the header that declares
    TraceEntry is found and parsed with the parser the capture itself uses at attach time
    (cumemtrace_torch.trace_entry_declaration: one parser), its enclosing namespace read from the
    braces around it; then a probe is compiled with g++ against those headers (and CUDA's
    cuda_runtime_api.h, CUDA_HOME or /usr/local/cuda) that prints every member's offset and size
    and every Action's value: the offsets come from the compiler, not from a guess;
  - torch/lib/libc10_cuda.so: the allocator object, NativeCachingAllocator's vtable and its
    attachAllocatorTraceTracker override (their mangled names and binding) and the string ABI
    (std::__cxx11 in its symbols).
Releases whose rows are equal share a row. Nothing here runs in CI but --offline.
"""
import argparse
import difflib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "preload", "python"))
import cumemtrace_torch  # noqa: E402  (the attach-time parser and ELF reader: one truth)

RELEASES = ["2.4.0", "2.4.1", "2.5.0", "2.5.1", "2.6.0", "2.7.0", "2.7.1", "2.8.0", "2.9.0",
            "2.9.1", "2.10.0", "2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1",
            "2.15.0"]
CPP_OUT = os.path.join(ROOT, "preload", "hooks", "torch_layouts.h")
PY_OUT = os.path.join(ROOT, "preload", "python", "cumemtrace_torch_layouts.py")
INDEX = "https://pypi.org/simple/torch/"
MEMBERS = re.compile(r"torch/include/(c10|torch/headeronly)/.*\.h|torch/lib/libc10_cuda\.so")
# The fields the preload reads (preload/hooks/torch_tracker.cpp), in wire order, and the Action names
# it numbers as wire::TorchAction (ALLOC = 0 ... OOM = 8).
READ = ("action_", "device_", "addr_", "stream_", "size_")
ACTIONS = cumemtrace_torch.TRACE_ENTRY_ACTIONS
# The allocator object and NativeCachingAllocator's vtable have had one mangled name in every
# release: the attach looks them up by these names (a release without them fails here); the
# attachAllocatorTraceTracker override's name, which names TraceEntry's namespace, is per row.
ALLOCATOR = cumemtrace_torch.ALLOCATOR
VTABLE = cumemtrace_torch.VTABLE
ATTACH = b"NativeCachingAllocator27attachAllocatorTraceTracker"


class RangeFile(io.RawIOBase):
    """A seekable read-only view of a remote file through HTTP range requests, in 1 MiB blocks
    (zip members are read in order, so neighbouring headers share blocks)."""
    BLOCK = 1 << 20

    def __init__(self, url, size):
        super().__init__()
        self.url, self.size, self.pos, self.blocks, self.fetched = url, size, 0, {}, 0

    def seekable(self):
        return True

    def readable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=0):
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def _block(self, n):
        if n not in self.blocks:
            lo = n * self.BLOCK
            hi = min(self.size, lo + self.BLOCK) - 1
            req = urllib.request.Request(self.url, headers={"Range": "bytes=%d-%d" % (lo, hi)})
            with urllib.request.urlopen(req, timeout=120) as r:
                if r.status != 206:
                    raise OSError("%s: no range support (HTTP %d)" % (self.url, r.status))
                self.blocks[n] = r.read()
            self.fetched += len(self.blocks[n])
        return self.blocks[n]

    def readinto(self, buf):
        n = 0
        while n < len(buf) and self.pos < self.size:
            block = self._block(self.pos // self.BLOCK)
            at = self.pos % self.BLOCK
            chunk = block[at:at + len(buf) - n]
            buf[n:n + len(chunk)] = chunk
            n += len(chunk)
            self.pos += len(chunk)
        return n


def wheel_files():
    """{version: (url, size, sha256)} of the cp311 manylinux x86-64 wheels on PyPI; the highest
    build tag where a release has several (what pip installs)."""
    req = urllib.request.Request(INDEX, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        index = json.load(r)
    found = {}
    for f in index["files"]:
        m = re.match(r"torch-([\d.]+)(?:-(\d+))?-cp311-cp311-manylinux[\w.]*x86_64\.whl$",
                     f["filename"])
        if m and m.group(1) in RELEASES:
            build = int(m.group(2) or 0)
            if m.group(1) not in found or found[m.group(1)][0] < build:
                found[m.group(1)] = (build, f["url"], f["size"], f["hashes"]["sha256"])
    missing = [v for v in RELEASES if v not in found]
    if missing:
        raise SystemExit("torch_layouts: no cp311 x86-64 wheel on PyPI for " + ", ".join(missing))
    return {v: found[v][1:] for v in RELEASES}


def cached_wheel(version, url, size, sha256, cache):
    """The folder holding the members this script reads of `version`'s wheel, fetched once."""
    folder = os.path.join(cache, "torch-" + version)
    stamp = os.path.join(folder, "wheel.sha256")
    if os.path.exists(stamp) and open(stamp).read().strip() == sha256:
        return folder
    remote = RangeFile(url, size)
    with zipfile.ZipFile(io.BufferedReader(remote, 1 << 20)) as z:
        for info in z.infolist():
            if MEMBERS.fullmatch(info.filename):
                z.extract(info, folder)
    with open(stamp, "w") as f:
        f.write(sha256 + "\n")
    print("torch_layouts: %s: read %.1f MB of the %.0f MB wheel" %
          (version, remote.fetched / 1e6, size / 1e6), file=sys.stderr)
    return folder


def namespace_at(text, position):
    """The C++ namespace enclosing `position` of `text` (comments removed), "a::b" form."""
    stack = []
    for m in re.finditer(r"\bnamespace\s+([\w:]+)\s*\{|\{|\}", text[:position]):
        if m.group(0) == "}":
            stack.pop()
        else:
            stack.append(m.group(1))
    return "::".join(s for s in stack if s)


def find_declaration(include):
    """(header relative to include/, namespace, members, actions) of TraceEntry."""
    for rel in cumemtrace_torch.TRACE_ENTRY_HEADERS:
        path = os.path.join(include, rel)
        if not os.path.exists(path):
            continue
        text = open(path, encoding="utf-8").read()
        found = cumemtrace_torch.trace_entry_declaration(text)
        if found is None:
            continue
        bare = re.sub(r"//[^\n]*", " ", re.sub(r"/\*.*?\*/", " ", text, flags=re.S))
        at = re.search(r"\bstruct\s+TraceEntry\s*\{", bare).start()
        return rel, namespace_at(bare, at), found[0], found[1]
    raise SystemExit("torch_layouts: no TraceEntry under %s (looked in %s)" %
                     (include, ", ".join(cumemtrace_torch.TRACE_ENTRY_HEADERS)))


def probe(include, header, namespace, members, actions, cxx11_abi):
    """{member: (offset, size)} and {action: value} as g++ lays them out on x86-64."""
    lines = ["#include <%s>" % header, "#include <cstddef>", "#include <cstdio>",
             "using TE = %s::TraceEntry;" % namespace, "int main() {"]
    lines += ['  std::printf("m %s %%zu %%zu\\n", offsetof(TE, %s), sizeof(TE::%s));' % (n, n, n)
              for _, n in members]
    lines += ['  std::printf("a %s %%d\\n", static_cast<int>(TE::%s));' % (a, a) for a in actions]
    lines.append("}")
    cuda = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "probe.cpp"), os.path.join(tmp, "probe")
        with open(src, "w") as f:
            f.write("\n".join(lines) + "\n")
        cmd = ["g++", "-std=c++17", "-w", "-I", include, "-I", cuda,
               "-D_GLIBCXX_USE_CXX11_ABI=%d" % cxx11_abi, src, "-o", exe]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit("torch_layouts: the probe does not build against %s:\n%s" %
                             (include, p.stderr[-3000:]))
        out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    layout, values = {}, {}
    for line in out.splitlines():
        kind, name, *nums = line.split()
        if kind == "m":
            layout[name] = (int(nums[0]), int(nums[1]))
        else:
            values[name] = int(nums[0])
    return layout, values


def library_facts(path):
    """The mangled names the attach looks up in libc10_cuda.so, and its string ABI."""
    syms = cumemtrace_torch.elf_symbols(path, [ALLOCATOR, VTABLE])
    for name in (ALLOCATOR, VTABLE):
        if name not in syms:
            raise SystemExit("torch_layouts: %s has no %s" % (path, name.decode()))
    attach = sorted(n.decode() for n in cumemtrace_torch.elf_symbol_names(path, ATTACH))
    if len(attach) != 1:
        raise SystemExit("torch_layouts: %s has %d attachAllocatorTraceTracker overrides: %s"
                         % (path, len(attach), attach))
    cxx11 = bool(cumemtrace_torch.elf_symbol_names(path, b"__cxx11"))
    return {"attach": attach[0], "cxx11_abi": int(cxx11)}


def row_of(folder):
    """What the capture needs of one release (see the generated module's docstring)."""
    include = os.path.join(folder, "torch", "include")
    facts = library_facts(os.path.join(folder, "torch", "lib", "libc10_cuda.so"))
    header, namespace, members, actions = find_declaration(include)
    layout, values = probe(include, header, namespace, members, actions, facts["cxx11_abi"])
    names = [n for _, n in members]
    if any(n not in names for n in READ):
        raise SystemExit("torch_layouts: %s: TraceEntry lacks one of %s" % (header, READ))
    if actions[:len(ACTIONS)] != ACTIONS or [values[a] for a in ACTIONS] != list(range(9)):
        raise SystemExit("torch_layouts: %s: Action is not ALLOC=0 ... OOM=8: %s" %
                         (header, values))
    sizes = {n: layout[n][1] for n in READ}
    if sizes["action_"] != 4 or sizes["device_"] != 1 or any(
            sizes[n] != 8 for n in ("addr_", "stream_", "size_")):
        raise SystemExit("torch_layouts: %s: field sizes the preload cannot read: %s" %
                         (header, sizes))
    last = max(names.index(n) for n in READ)
    row = {"header": header, "namespace": namespace,
           "members": [list(m) for m in members[:last + 1]],
           "actions": actions,
           "offsets": {n.rstrip("_"): layout[n][0] for n in READ}}
    row.update(facts)
    return row


def table_from_wheels(cache):
    files = wheel_files()
    rows, releases = [], {}
    for version in RELEASES:
        row = row_of(cached_wheel(version, *files[version], cache))
        if row not in rows:
            rows.append(row)
        releases[version] = rows.index(row) + 1
    return rows, releases


def render_py(rows, releases):
    out = ['"""GENERATED by scripts/torch_layouts.py from the torch wheels: do not edit.',
           "",
           "The TraceEntry layouts cumemtrace's PyTorch block capture reads, one row per distinct",
           "layout (LAYOUTS[n - 1] is the preload's layout n, preload/hooks/torch_layouts.h), and the",
           "releases they were read from (RELEASES: version -> layout number). A row: the header",
           "(under <torch>/include) and namespace that declare TraceEntry; its data members up to",
           "the last one read, as (type, name) with whitespace and 'c10::' removed, and its Action",
           "enumerators, both checked against the installed torch's header at attach time; the",
           "byte offsets of the fields read on x86-64 (from g++ against",
           "the wheel's headers); the mangled name of NativeCachingAllocator's",
           "attachAllocatorTraceTracker in libc10_cuda.so (the allocator object and the vtable",
           "have one name in every release: cumemtrace_torch.ALLOCATOR and VTABLE); the wheel's",
           "_GLIBCXX_USE_CXX11_ABI.",
           '"""', "", "LAYOUTS = ["]
    for row in rows:
        out.append("    {")
        out += ["        %s: %s," % (json.dumps(k), json.dumps(row[k], sort_keys=True))
                for k in sorted(row)]
        out.append("    },")
    out += ["]", "", "RELEASES = {"]
    out += ['    "%s": %d,' % (v, n) for v, n in releases.items()]
    out += ["}", ""]
    return "\n".join(out)


def render_cpp(rows, releases):
    out = ["// GENERATED by scripts/torch_layouts.py from the torch wheels: do not edit.",
           "//",
           "// The byte offsets of the PyTorch TraceEntry fields the tracker reads",
           "// (preload/hooks/torch_tracker.cpp), one row per distinct layout of torch 2.4 and later on",
           "// x86-64; row n - 1 is layout n, the number the Python side passes to",
           "// cumemtrace_torch_attach after checking the row against the installed torch's header",
           "// (preload/python/cumemtrace_torch_layouts.py holds the same rows, with what that check",
           "// and the attach look up). action_ is a 4-byte enum numbered as wire::TorchAction,",
           "// device_ a 1-byte c10::DeviceIndex, addr_, stream_ and size_ 8 bytes each.",
           "#pragma once",
           "",
           "#include <cstdint>",
           "",
           "namespace cumemtrace::preload {",
           "",
           "struct TorchEntryLayout {",
           "  uint8_t action, device, addr, stream, size;",
           "};",
           "",
           "constexpr TorchEntryLayout kTorchLayouts[] = {"]
    for n, row in enumerate(rows, 1):
        o = row["offsets"]
        versions = ", ".join(v for v, k in releases.items() if k == n)
        out.append("    {%d, %d, %d, %d, %d},  // %d: torch %s" % (
            o["action"], o["device"], o["addr"], o["stream"], o["size"], n, versions))
    out += ["};", "", "}  // namespace cumemtrace::preload", ""]
    return "\n".join(out)


def compare(path, text):
    """True when the committed file at `path` is `text`; prints a diff otherwise."""
    try:
        old = open(path, encoding="utf-8").read()
    except OSError:
        old = ""
    if old == text:
        return True
    sys.stdout.writelines(difflib.unified_diff(old.splitlines(True), text.splitlines(True),
                                               path, "generated"))
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--offline", action="store_true")
    args = ap.parse_args()
    if args.offline:
        import cumemtrace_torch_layouts as committed
        rows, releases = committed.LAYOUTS, committed.RELEASES
    else:
        cache = os.environ.get("CUMEMTRACE_WHEEL_CACHE",
                               os.path.expanduser("~/.cache/cumemtrace/wheels"))
        rows, releases = table_from_wheels(cache)
    outputs = {CPP_OUT: render_cpp(rows, releases), PY_OUT: render_py(rows, releases)}
    if args.check or args.offline:
        same = [compare(path, text) for path, text in outputs.items()]
        return 0 if all(same) else 1
    for path, text in outputs.items():
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    print("torch_layouts: %d releases, %d layouts" % (len(releases), len(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
