#!/usr/bin/env python3
"""The settings table (preload/core/settings_table.h, printed by `cumemtrace __settings`) against
everything else that names a CUMEMTRACE_* setting:
  - every CUMEMTRACE_* name read anywhere in the tree (C++ getenv, Python os.environ/os.getenv,
    shell scripts, CMake's $ENV{}) is a row of the table or one of BUILD_AND_TEST_ONLY below;
  - a name read by the Python side inside the target (preload/python) or by the Python package
    (python/cumemtrace) is a row that says so; the target's own list (SETTINGS in
    preload/python/cumemtrace_torch.py) is the table's rows read there, with their defaults;
  - README's tables of settings are scripts/settings_doc.py's rendering of the table, to the byte
    (every setting, the hand-off ones apart, with its flag, default and help).
Exit 0 when all agree, 1 with one line per difference."""
import argparse
import ast
import difflib
import os
import re
import subprocess
import sys

# Variables of the build, the tests, the benchmarks and the packaging scripts: never read by
# cumemtrace itself, so not settings. (Macro and CMake names such as CUMEMTRACE_EXPORT or
# CUMEMTRACE_HOOK_SOURCES are not variables: the scan below does not see them.)
BUILD_AND_TEST_ONLY = {
    "CUMEMTRACE_WERROR": "scripts/setup.sh, portable_build.sh: -DCUMEMTRACE_WERROR",
    "CUMEMTRACE_BUILD_TYPE": "scripts/setup.sh, test.sh: the build type",
    "CUMEMTRACE_SANITIZERS": "scripts/test.sh: 0 skips the sanitizer stages",
    "CUMEMTRACE_TORCH_VENV": "the real PyTorch the tests use",
    "CUMEMTRACE_FIXTURES_DIR": "the tests' recorded snapshots",
    "CUMEMTRACE_BENCH_EVENTS": "bench/: the size of a benchmark",
    "CUMEMTRACE_BENCH_ENTRIES": "bench/: the size of a benchmark",
    "CUMEMTRACE_CACHE": "scripts: where downloads are kept",
    "CUMEMTRACE_CHROMIUM": "tests/viz/browser_test.py: the browser",
    "CUMEMTRACE_CHROOTS": "scripts/python_chroots.sh: the Pythons' chroots",
    "CUMEMTRACE_DEBIAN_MIRROR": "scripts/python_chroots.sh",
    "CUMEMTRACE_JOBS": "scripts/portable_build.sh: parallel jobs",
    "CUMEMTRACE_PORTABLE_BUILD": "scripts/package.sh: the portable build's directory",
    "CUMEMTRACE_SKIP_CHROOT": "scripts/package.sh",
    "CUMEMTRACE_SHARED_GPU": "tests/gpu: the GPU is shared with other jobs",
    "CUMEMTRACE_WHEEL_CACHE": "scripts/torch_layouts.py: PyTorch wheels",
    "CUMEMTRACE_SYSROOT": "cmake/bullseye-sysroot.cmake",
    "CUMEMTRACE_CLANGXX": "tests/fuzz: the fuzzers' compiler",
}

CPP = (".c", ".cc", ".cpp", ".h", ".hpp", ".cu")
READS = {
    "cpp": re.compile(r'getenv\(\s*"(CUMEMTRACE_\w+)"'),
    "py": re.compile(r'''(?:environ|getenv|env)\s*(?:\.get\(|\.pop\(|\.setdefault\(|\[|\()\s*'''
                     r'''f?["'](CUMEMTRACE_\w+)|["'](CUMEMTRACE_\w+)["']\s+(?:not\s+)?in\s+'''
                     r'''(?:os\.)?environ'''),
    "sh": re.compile(r'\$\{?(CUMEMTRACE_\w+)'),
    "cmake": re.compile(r'\$ENV\{(CUMEMTRACE_\w+)\}'),
}
CONSTANT = re.compile(r'''^(\w+)\s*=\s*["'](CUMEMTRACE_\w+)["']''', re.M)


def language(path, text):
    if path.endswith(CPP):
        return "cpp"
    if path.endswith(".py"):
        return "py"
    if path.endswith(".sh") or re.match(r"#!.*\b(ba)?sh\b", text):
        return "sh"
    if path.endswith(("CMakeLists.txt", ".cmake", ".cmake.in")):
        return "cmake"
    return None


def names_read(source):
    """{name: [files]} for every CUMEMTRACE_* variable read in the tree's files (tracked or new)."""
    git = subprocess.run(["git", "-C", source, "ls-files", "--cached", "--others",
                          "--exclude-standard"], capture_output=True, text=True)
    if git.returncode == 0:
        files = git.stdout.split("\n")
    else:  # not a checkout (a source archive): every file but build trees and hidden ones
        files = []
        for d, dirs, names in os.walk(source):
            dirs[:] = [x for x in dirs if not x.startswith((".", "build"))]
            files += [os.path.relpath(os.path.join(d, f), source) for f in names]
    found = {}
    for rel in filter(None, files):
        path = os.path.join(source, rel)
        if not os.path.isfile(path):
            continue
        with open(path, errors="replace") as f:
            text = f.read()
        lang = language(rel, text)
        if not lang:
            continue
        for m in READS[lang].finditer(text):
            found.setdefault(next(g for g in m.groups() if g), []).append(rel)
        if lang == "py":  # a name kept in a constant: _REEXEC_ENV = "CUMEMTRACE_..."
            for m in CONSTANT.finditer(text):
                if re.search(rf"(?:environ|getenv)\s*(?:\.get\(|\[|\()\s*{m.group(1)}\b", text):
                    found.setdefault(m.group(2), []).append(rel)
    return found


def table(cumemtrace):
    rows = {}
    out = subprocess.run([cumemtrace, "__settings"], capture_output=True, text=True, check=True)
    for line in out.stdout.splitlines():
        var, kind, default, flag, readers, expected, _value, _help = line.split("\t")
        rows[var] = dict(kind=kind, default=default, flags=flag.split(",") if flag else [],
                         readers=readers.split(","), expected=expected)
    return rows


def check_reads(rows, found, problems):
    for name, files in sorted(found.items()):
        if name not in rows and name not in BUILD_AND_TEST_ONLY:
            problems.append(f"{name} is read ({', '.join(sorted(set(files)))}) but is neither a "
                            "row of preload/core/settings_table.h nor a build/test-only variable")
            continue
        for prefix, reader in (("preload/python/", "python-in-target"),
                               ("python/cumemtrace/", "python-package")):
            if any(f.startswith(prefix) for f in files) and reader not in rows[name]["readers"]:
                problems.append(f"{name} is read in {prefix} but its row does not say {reader}")


def check_python_side(source, rows, problems):
    path = os.path.join(source, "preload/python/cumemtrace_torch.py")
    with open(path) as f:
        module = ast.parse(f.read())
    listed = next(ast.literal_eval(n.value) for n in module.body if isinstance(n, ast.Assign)
                  and any(getattr(t, "id", "") == "SETTINGS" for t in n.targets))
    want = {v: r["default"] for v, r in rows.items() if "python-in-target" in r["readers"]}
    if listed != want:
        problems.append(f"preload/python/cumemtrace_torch.py SETTINGS {listed} != the table's "
                        f"rows read by python-in-target {want}")
    problems.extend(f"{v} is read by the Python side but is not a switch" for v in want
                    if rows[v]["kind"] != "switch")


def check_readme(cumemtrace, source, problems):
    """README's settings tables are scripts/settings_doc.py's rendering of the table, to the
    byte: every setting (the hand-off ones in a table of their own), its flag, default and help."""
    sys.path.insert(0, os.path.join(source, "scripts"))
    import settings_doc
    want = settings_doc.block(settings_doc.rows(cumemtrace))
    _, readme, generated = settings_doc.readme_with(source, want)
    if readme != generated:
        got = readme[readme.find(settings_doc.BEGIN):readme.find(settings_doc.END)]
        diff = [f"README: {line}" for line in difflib.unified_diff(
            got.splitlines(), want.splitlines(), "README.md", "settings_table.h", lineterm="")]
        problems.append("README's settings tables differ from preload/core/settings_table.h "
                        "(run scripts/settings_doc.py --cumemtrace build/bin/cumemtrace --write):\n"
                        + "\n".join(diff[:40]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cumemtrace", required=True)
    ap.add_argument("--source", required=True)
    a = ap.parse_args()
    rows = table(a.cumemtrace)
    problems = []
    check_reads(rows, names_read(a.source), problems)
    check_python_side(a.source, rows, problems)
    check_readme(a.cumemtrace, a.source, problems)
    for p in problems:
        print(p)
    print(f"{len(rows)} settings, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
