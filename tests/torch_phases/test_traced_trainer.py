"""End-to-end: transformers' Trainer (tiny GPT-2, CPU) under `cumemtrace run` (the real preload,
our sitecustomize, the fake driver), unmarked: the user's innermost line is trainer.train(), so
the site of what the model's layers allocate is the model file's line (frames.h, rule 1's
framework site): GPT2Attention.forward / GPT2MLP.forward in modeling_gpt2.py. --model-code ','
turns that off: the trainer.train() line stays."""
import glob
import json
import os
import re
import subprocess
import sys

import pytest

from test_traced import CT, run

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "traced_trainer.py")


def line_of(tag):
    with open(SCRIPT) as f:
        return next(i for i, ln in enumerate(f, 1) if "# LINE " + tag in ln)


def top_sites(path, *options):
    p = subprocess.run([CT, "report", "--format", "json", "--library-code", "device_ops.py",
                        *options, path], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return {s["site"]: s["bytes"] for s in json.loads(p.stdout)["top_sites_by_bytes"]}


@pytest.mark.skipif(sys.version_info < (3, 11), reason="qualified frame names: CPython 3.11+")
def test_trainer_sites_are_the_model_files_lines(tmp_path):
    pytest.importorskip("transformers")
    p, _ = run(tmp_path, script=SCRIPT, PYTHONPATH=HERE)
    (path,) = glob.glob(str(tmp_path / "traces" / "*.json"))
    # 4 forwards (2 updates of 2 micro-steps), 4 Conv1D calls each (c_attn, attn's c_proj, c_fc,
    # mlp's c_proj): 16 x 64 KiB, by the model file's two forwards that call them.
    sites = top_sites(path)
    via = " via allocating.<locals>.forward_allocating (device_ops.py:27)"
    lines = {}
    for s, b in sites.items():
        key = re.sub(r"modeling_gpt2\.py:\d+\)", "modeling_gpt2.py:N)", s)
        lines[key] = lines.get(key, 0) + b
    assert lines == {"GPT2Attention.forward (modeling_gpt2.py:N)" + via: 8 * 64 << 10,
                     "GPT2MLP.forward (modeling_gpt2.py:N)" + via: 8 * 64 << 10}, sites
    # Two lines each: c_attn and c_proj, c_fc and c_proj.
    assert len(sites) == 4 and set(sites.values()) == {4 * 64 << 10}, sites
    # Turned off, the user's one line is the site.
    off = top_sites(path, "--model-code", ",")
    assert off == {"<module> (traced_trainer.py:%d)%s" % (line_of("trainer-train"), via):
                   16 * 64 << 10}, off
