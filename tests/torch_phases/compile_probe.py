"""torch.compile with and without the automatic phases, in a process of its own (Dynamo's state
and counters are per process). Usage: compile_probe.py wrapper|inplace_block on|off
  wrapper        torch.compile(model): the OptimizedModule is the root
  inplace_block  model.block.compile(): a submodule compiled in place under an eager root
Prints one JSON line: Dynamo's graph-break and frame counters and the marks the phases sent."""
import io
import json
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.environ["CT_SOURCE"], "preload", "python"))
import cumemtrace_phases  # noqa: E402

mode, hooks = sys.argv[1], sys.argv[2]


class Sink:
    def __init__(self):
        self.marks = []

    def push(self, name):
        self.marks.append("START " + name.decode())
        self.stack = getattr(self, "stack", []) + [name.decode()]

    def pop(self):
        self.marks.append("END " + self.stack.pop())

    def mark(self, name):
        self.marks.append("MARK " + name.decode())

    def backward_caller(self, skip):
        pass

    def owners(self, role, flat):
        pass


sink, err = Sink(), io.StringIO()
if hooks == "on":
    cumemtrace_phases.Phases(torch, sink, "cpu", err).install()


class Block(nn.Module):  # user code: Dynamo compiles a module's frame only outside torch's files
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(32, 64), nn.Linear(64, 32)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 32)
        self.block = Block()
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.block(self.a(x)).relu())


torch.manual_seed(0)
net = Net()
if mode == "wrapper":
    model = torch.compile(net, backend="aot_eager")  # AOTAutograd runs autograd.grad at compile
else:
    net.block.compile(backend="aot_eager")
    model = net
opt = torch.optim.AdamW(net.parameters())
x, y = torch.randn(8, 16), torch.randn(8, 4)
for _ in range(3):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()

from torch._dynamo.utils import counters  # noqa: E402

print(json.dumps({"graph_breaks": dict(counters["graph_break"]), "frames": dict(counters["frames"]),
                  "marks": sink.marks, "errors": err.getvalue()}))
