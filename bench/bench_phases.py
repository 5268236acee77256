"""What the automatic phases (preload/python/cumemtrace_phases.py) cost a PyTorch step, on the CPU.

  ~/.cache/cumemtrace/torch-2.11/bin/python bench/bench_phases.py [ROUNDS] [STEPS]

A small model with 150 parameters (37 blocks of Linear 64x64 + LayerNorm, a last Linear, Adam, an
MSELoss module), trained in one process with the phases on and off alternately, ROUNDS rounds of STEPS
steps each (the first step of every round, discovery with its global hooks, is not timed). The
sink does nothing, so this is the hooks' Python cost (the preload's record is one ring write per
mark; see the recording rows). Also times one ownership walk of the 150 parameters with grads and
Adam state (the tensors are CPU tensors: the walk is run with the "cpu" device filter).
With the module names (cumemtrace_modules.py: the module table at discovery, a count of each root's
modules and the names beside each walk sent, every step) on too, alternately: "modules on".
Times are CPU times (time.process_time: this process, one torch thread), so that a loaded host
changes them less than wall times. Prints medians in ms per step and the difference with its
spread over rounds, and the hooks of one step called directly (the step's noise left out).
"""
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "preload",
                                "python"))
import cumemtrace_modules  # noqa: E402
import cumemtrace_phases  # noqa: E402


class NullSink:
    def push(self, name):
        pass

    def pop(self):
        pass

    def mark(self, name):
        pass

    def backward_caller(self, skip):
        pass

    def owners(self, role, flat):
        pass

    def module_code(self, address):
        pass

    def names(self, what, pairs):
        pass


def model():
    torch.manual_seed(0)
    layers = []
    for _ in range(37):
        layers += [nn.Linear(64, 64), nn.LayerNorm(64), nn.GELU()]
    return nn.Sequential(*layers, nn.Linear(64, 64))


def steps(net, loss_fn, opt, x, y, n):
    t = time.process_time()
    for _ in range(n):
        opt.zero_grad()
        loss_fn(net(x), y).backward()
        opt.step()
    return (time.process_time() - t) / n * 1e3


def hook_calls(ph, net, loss_fn, opt, n):
    """CPU ms per step of what the hooks run in a steady-state step, called without the model:
    the step's own noise is not in it."""
    t = time.process_time()
    for _ in range(n):
        for root in (net, loss_fn):
            ph._pre_hook(root, ())
            ph._post_hook(root, (), None)
        ph._backward_end(ph._backward_begin())
        ph._optimizer_pre_hook(opt, (), {})
        ph._optimizer_post_hook(opt, (), {})
    return (time.process_time() - t) / n * 1e3


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    torch.set_num_threads(1)
    net, loss_fn = model(), nn.MSELoss()
    assert len(list(net.parameters())) == 150
    opt = torch.optim.Adam(net.parameters())
    x, y = torch.randn(16, 64), torch.randn(16, 64)
    steps(net, loss_fn, opt, x, y, 5)  # warm up: Adam's state exists from here on
    on, off, hooks, named, named_hooks = [], [], [], [], []
    for _ in range(rounds):
        off.append(steps(net, loss_fn, opt, x, y, n))
        ph = cumemtrace_phases.Phases(torch, NullSink(), "cpu",
                                      modules=cumemtrace_modules.Modules(torch, NullSink()))
        ph.install()
        steps(net, loss_fn, opt, x, y, 1)
        named.append(steps(net, loss_fn, opt, x, y, n))
        named_hooks.append(hook_calls(ph, net, loss_fn, opt, 50))
        ph.uninstall()
        ph = cumemtrace_phases.Phases(torch, NullSink(), "cpu")
        ph.install()
        steps(net, loss_fn, opt, x, y, 1)  # discovery (global hooks) ends in this step
        on.append(steps(net, loss_fn, opt, x, y, n))
        hooks.append(hook_calls(ph, net, loss_fn, opt, 50))
        walk = []
        for _ in range(50):
            t = time.process_time()
            ph._walk((cumemtrace_phases.ROLE_PARAMETER, cumemtrace_phases.ROLE_GRADIENT,
                      cumemtrace_phases.ROLE_OPTIMIZER_STATE))
            walk.append((time.process_time() - t) * 1e3)
        ph.uninstall()
    diffs = [a - b for a, b in zip(on, off)]
    m_off, m_on = statistics.median(off), statistics.median(on)
    print("step, phases off: %.3f ms (median of %d rounds of %d steps)" % (m_off, rounds, n))
    print("step, phases on:  %.3f ms" % m_on)
    print("on - off: median %+.3f ms (%+.2f%%), quartiles %+.3f .. %+.3f ms" % (
        statistics.median(diffs), 100 * statistics.median(diffs) / m_off,
        *statistics.quantiles(diffs, n=4)[0::2]))
    print("the hooks of one step called directly (2 roots' forwards, backward, the step with its "
          "walk): %.3f ms (median)" % statistics.median(hooks))
    d_named = [a - b for a, b in zip(named, on)]
    print("step, phases + module names on: %.3f ms; minus phases alone: median %+.3f ms (%+.2f%%), "
          "quartiles %+.3f .. %+.3f ms" % (
              statistics.median(named), statistics.median(d_named),
              100 * statistics.median(d_named) / m_off, *statistics.quantiles(d_named, n=4)[0::2]))
    print("the hooks of one step called directly, with module names: %.3f ms (median)"
          % statistics.median(named_hooks))
    print("ownership walk, 150 parameters + grads + 300 Adam state tensors: %.3f ms (median)"
          % statistics.median(walk))


if __name__ == "__main__":
    main()
