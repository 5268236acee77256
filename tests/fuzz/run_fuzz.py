#!/usr/bin/env python3
"""Runs one libFuzzer target for a bounded time on a seed corpus (CTest label `fuzz`).
usage: run_fuzz.py FUZZER WORKDIR SECONDS [SEED_FILE_OR_DIR...]
Seeds: every file given (directories: their files); big JSON seeds also contribute a reduced
copy (first trace entries only) so the fuzzer mutates realistic inputs of a practical size.
Exit status: the fuzzer's (0 = no findings); crash reproducers land in WORKDIR/artifacts."""

import json
import os
import shutil
import subprocess
import sys


def main():
    fuzzer, work, seconds, *seeds = sys.argv[1:]
    corpus = os.path.join(work, "corpus")
    artifacts = os.path.join(work, "artifacts") + os.sep
    shutil.rmtree(corpus, ignore_errors=True)
    os.makedirs(corpus)
    os.makedirs(artifacts, exist_ok=True)
    files = []
    for s in seeds:
        if os.path.isdir(s):
            files += [os.path.join(s, f) for f in sorted(os.listdir(s))]
        elif os.path.exists(s):
            files.append(s)
        else:
            print(f"seed {s} is absent; continuing without it")
    for i, f in enumerate(files):
        shutil.copy(f, os.path.join(corpus, f"seed{i}-{os.path.basename(f)}"))
        if f.endswith(".json") and os.path.getsize(f) > 64 * 1024:
            try:
                d = json.load(open(f))
                d["device_traces"] = [t[:20] for t in d.get("device_traces", [])]
                d["segments"] = d.get("segments", [])[:2]
                with open(os.path.join(corpus, f"seed{i}-reduced.json"), "w") as out:
                    json.dump(d, out)
            except (ValueError, KeyError, TypeError, AttributeError):
                pass
    cmd = [fuzzer, corpus, f"-max_total_time={seconds}", "-max_len=262144", "-rss_limit_mb=4096",
           "-timeout=30", "-print_final_stats=1", f"-artifact_prefix={artifacts}"]
    print(" ".join(cmd), flush=True)
    return subprocess.run(cmd).returncode


if __name__ == "__main__":
    sys.exit(main())
