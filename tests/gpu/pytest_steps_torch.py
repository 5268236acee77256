"""The pytest plugin's growth-per-step limit on real PyTorch (tests/gpu/validate_pytest_steps.sh
runs `pytest --cumemtrace` on this file): test_leaks_per_step keeps 16 MiB a step (LEAK_LINE)
and must fail its 1 MiB limit naming that line; test_steady must pass the same limit."""
import pytest
import torch
import torch.nn as nn

kept = []


def train(steps, leak):
    model = nn.Linear(1024, 1024).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = model(torch.randn(64, 1024, device="cuda")).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if leak:
            kept.append(torch.empty(16 << 20, dtype=torch.uint8, device="cuda"))  # LEAK_LINE


@pytest.mark.limit_gpu_growth_per_step("1 MiB")
def test_leaks_per_step():
    train(8, True)


@pytest.mark.limit_gpu_growth_per_step("1 MiB")
def test_steady():
    train(8, False)
