"""End-to-end: module calls of a real-PyTorch model under `cumemtrace run` (the real preload
reading the frames of torch.nn.Module._wrapped_call_impl without the GIL, our sitecustomize's
module names, the fake driver): each allocation's frames carry the modules it was made in."""
import os
import sys

import pytest

from test_traced import our_lines, run

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traced_modules.py")
MiB = 1 << 20


def frames_of(snap, size):
    (seg,) = [s for s in snap["segments"] if s["total_size"] == size]
    return seg["frames"]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="module frames: CPython 3.11+")
def test_allocations_carry_their_modules(tmp_path):
    p, snap = run(tmp_path, script=SCRIPT)
    assert our_lines(p) == []
    # Innermost first: every module call on the stack, by its name (the wrapper is the model's).
    modules = {size: [f["module"] for f in frames_of(snap, size * MiB) if "module" in f]
               for size in (1, 2, 3, 4, 5)}
    assert modules == {1: ["blocks.0", "Net", "Net"], 2: ["blocks.1", "Net", "Net"],
                       3: ["head", "Net", "Net"], 4: [], 5: ["Net", "Net"]}
    # The module rides on torch's own frame, whose line stays its own.
    (call,) = [f for f in frames_of(snap, 1 * MiB) if f.get("module") == "blocks.0"]
    assert call["name"] == "Module._wrapped_call_impl"
    assert call["filename"].endswith("torch/nn/modules/module.py")
    assert call["line"] > 0


@pytest.mark.skipif(sys.version_info < (3, 11), reason="module frames: CPython 3.11+")
def test_autograd_nodes_are_filed_with_their_module(tmp_path):
    # Every node of a real model's graph (preload/stacks/node_modules.h): the module the preload
    # filed it with is the innermost module call whose sequence-number interval holds its number
    # (PyTorch's own numbering, through hooks of the script): the transpose made before a Linear's
    # first allocation, the in-place ReLU and the view at a block's end, the residual add in the
    # parent; the loss's nodes are no module's.
    import json
    script = os.path.join(os.path.dirname(SCRIPT), "traced_node_modules.py")
    p, _ = run(tmp_path, script=script)
    # The script allocates no device memory (the nodes are the subject): only that is said.
    assert [ln for ln in our_lines(p) if not ln.startswith("cumemtrace: no CUDA allocation")] == []
    (line,) = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    nodes = json.loads(line)["nodes"]
    assert len(nodes) == 19, nodes
    assert [n for n in nodes if n[1] != n[2]] == []
    assert {tuple(n) for n in nodes if n[1] is None} == {("MeanBackward0", None, None),
                                                         ("PowBackward0", None, None)}
    assert ["ViewBackward0", "blocks.1", "blocks.1"] in nodes
    assert ["ReluBackward0", "blocks.0.act", "blocks.0.act"] in nodes
