"""Unmarked training scripts for the real-GPU check of the automatic phases and categories, and
PyTorch's own account of each phase to compare them with.

Usage: user_terms.py MODEL STEPS TRUTH.json [--memtracker]
MODEL: mlp (Adam), gpt (AdamW under bf16 autocast), resnet (torchvision ResNet-18, SGD with
momentum), leak (the mlp, keeping every step's output: the loop grows by one output a step),
ckpt (an MLP whose blocks run under activation checkpointing), compile (the mlp under
torch.compile).

The loop never calls cumemtrace: the phases must be found with no change to the script. What it
writes to TRUTH.json is PyTorch's own account, read by the loop itself at the moments the
automatic phases are expected to begin and end (torch.cuda.memory_allocated() and
memory_reserved() just before and after the model's call, loss.backward() and opt.step()), the
bytes of model.parameters() and of the optimizer's state tensors, and the size of one kept output
(leak). Nothing between a reading and the hooked call allocates, so cumemtrace's ledger must show
the same numbers (tests/gpu/validate_user_terms.py compares them).
--memtracker runs the same loop under PyTorch's MemTracker (torch.distributed._tools) instead
and writes its peak snapshot by category: the anchor the activations are compared with.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train import Gpt  # noqa: E402

WIDTH, BATCH = 4096, 1024


def mlp(layers=4):
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(WIDTH, WIDTH), nn.ReLU()]
    return nn.Sequential(*mods)


class Checkpointed(nn.Module):
    def __init__(self, blocks=4):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU())
            for _ in range(blocks))

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False)
        return x


def build(name):
    """(model, optimizer, batch(i) -> input, loss(output, input) -> scalar, autocast dtype or None)"""
    if name == "gpt":
        model = Gpt().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)

        def batch(i):
            return torch.randint(0, Gpt.VOCAB, (16, 257), device="cuda")

        def loss(out, idx):
            return nn.functional.cross_entropy(out.float().view(-1, Gpt.VOCAB),
                                               idx[:, 1:].reshape(-1))
        return model, opt, batch, loss, torch.bfloat16, lambda idx: idx[:, :-1]
    if name == "resnet":
        import torchvision
        model = torchvision.models.resnet18(num_classes=10).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def batch(i):
            return torch.randn(64, 3, 224, 224, device="cuda")

        def loss(out, x):
            return out.square().mean()
        return model, opt, batch, loss, None, lambda x: x
    model = (Checkpointed() if name == "ckpt" else mlp()).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    if name == "compile":
        model = torch.compile(model)

    def batch(i):
        return torch.randn(BATCH, WIDTH, device="cuda")

    def loss(out, x):
        return out.square().mean()
    return model, opt, batch, loss, None, lambda x: x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=("mlp", "gpt", "resnet", "leak", "ckpt", "compile"))
    ap.add_argument("steps", type=int)
    ap.add_argument("truth")
    ap.add_argument("--memtracker", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    model, opt, batch, loss_fn, amp, model_input = build(args.model)
    readings, kept = [], []
    result_batch = [None]

    def read(what, step):
        readings.append({"at": what, "step": step,
                         "allocated": torch.cuda.memory_allocated(),
                         "reserved": torch.cuda.memory_reserved()})

    def one_step(i):
        x = batch(i)
        # The batch's own bytes (its storage rounded up to 512 B, as MemTracker and the
        # ledger's tensor bytes count it): what cumemtrace must call "input".
        result_batch[0] = (x.untyped_storage().nbytes() + 511) // 512 * 512
        opt.zero_grad(set_to_none=True)
        inp = model_input(x)
        read("forward_start", i)
        if amp is not None:
            with torch.autocast("cuda", dtype=amp):
                out = model(inp)
        else:
            out = model(inp)
        read("forward_end", i)
        loss = loss_fn(out, x)
        read("backward_start", i)
        loss.backward()
        read("backward_end", i)
        read("optimizer_start", i)
        opt.step()
        read("optimizer_end", i)
        if args.model == "leak":
            kept.append(out.detach())  # the leak: every step's output stays alive

    if args.memtracker:
        from torch.distributed._tools.mem_tracker import MemTracker
        mt = MemTracker()
        mt.track_external(model, opt)
        from torch.distributed._tools.mem_tracker import _ModState
        pre_bw = {}
        with mt:
            for i in range(args.steps):
                one_step(i)
                # The root's state when its backward began (MemTracker's Pre-Backward snapshot):
                # the moment cumemtrace's "activation" is defined at (alive when backward starts).
                snaps = mt.memory_tracking[model].snapshots.get(_ModState.PRE_BW) or [{}]
                pre_bw = snaps[-1]
                mt.reset_mod_stats()  # its module stats allow one call a module; peaks stay
        peak = mt.get_tracker_snapshot("peak")

        def named(snap):
            return {str(dev): {str(k): v for k, v in cats.items()} for dev, cats in snap.items()}
        result = {"memtracker_peak": named(peak), "memtracker_pre_backward": named(pre_bw)}
    else:
        for i in range(args.steps):
            one_step(i)
        torch.cuda.synchronize()
        state = {t.data_ptr(): t.numel() * t.element_size()
                 for s in opt.state.values() for t in s.values()
                 if torch.is_tensor(t) and t.is_cuda}
        params = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
        # Each tensor rounded up to 512 B, PyTorch's smallest block, as MemTracker counts a CUDA
        # tensor and as the ledger's "tensors" count (categories.h tensor_bytes): ResNet's
        # 256 B BatchNorm vectors are 512 B there.
        def rounded(d):
            return sum((b + 511) // 512 * 512 for b in d.values())
        result = {"readings": readings,
                  "parameter_bytes": sum(params.values()),
                  "optimizer_state_bytes": sum(state.values()),
                  "parameter_tensor_bytes": rounded(params),
                  "optimizer_state_tensor_bytes": rounded(state),
                  "kept_output_bytes": kept[0].numel() * kept[0].element_size() if kept else 0,
                  "max_allocated": torch.cuda.max_memory_allocated(),
                  "max_reserved": torch.cuda.max_memory_reserved()}
    result["batch_tensor_bytes"] = result_batch[0]
    result["model"] = args.model
    result["steps"] = args.steps
    with open(args.truth, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
