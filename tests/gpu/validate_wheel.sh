#!/usr/bin/env bash
# GPU check of the pip wheel (issue 17), for a host with an NVIDIA GPU and PyTorch and no
# network: the wheel goes into a fresh venv (--system-site-packages, so that torch is visible)
# with `pip install --no-index`, then
#   1. `cumemtrace run python train.py` traces a small PyTorch training script that uses the
#      Python API (ranges per step, a snapshot on demand): one snapshot per process, the ranges
#      in it, report/check read it;
#   2. `pytest --cumemtrace` on a file with a test that leaks a CUDA tensor and one that does not
#      fails exactly the leaking test, naming the Python line of the leak.
# Usage: tests/gpu/validate_wheel.sh WHEEL [WORKDIR]   (prints PASS/FAIL per step; exit 1 on FAIL)
set -uo pipefail
WHEEL=$(realpath "${1:?usage: tests/gpu/validate_wheel.sh WHEEL [WORKDIR]}")
WORK=${2:-$(mktemp -d /tmp/cumemtrace-wheel-gpu.XXXXXX)}
PY=${PYTHON:-python3}
mkdir -p "$WORK" && cd "$WORK" || exit 2
fail=0
verdict() {
  if [ "$1" = 0 ]; then printf '| %-62s | PASS |\n' "$2"; else printf '| %-62s | FAIL |\n' "$2"; fail=1; fi
}

rm -rf venv out
"$PY" -m venv --system-site-packages venv && venv/bin/pip install -q --no-index "$WHEEL"
# Where PYTHON is itself a venv (as on GPU images that ship torch in one), --system-site-packages
# reaches the base interpreter, not that venv: make its packages (torch, pytest) visible too.
host_site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
venv_site=$(venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
[ "$host_site" != "$venv_site" ] && echo "$host_site" > "$venv_site/_host_packages.pth"
verdict $? "pip install --no-index $(basename "$WHEEL") into a venv ($("$PY" --version))"
V=$WORK/venv/bin

cat >train.py <<'PYEOF'
import torch
import cumemtrace

assert cumemtrace.is_traced()
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(5):
    with cumemtrace.range(f"step {step}"):
        x = torch.randn(256, 1024, device="cuda")
        loss = model(x).logsumexp(1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
torch.cuda.synchronize()
path = cumemtrace.snapshot("after-training")
assert path, "no snapshot path"
snap = cumemtrace.load(path)
# The script's own ranges (the automatic phases' auto:* marks are PyTorch's, interleaved).
names = [a["name"] for a in snap.data["external_annotations"]
         if a["stage"] == "START" and not a["name"].startswith("auto:")]
assert names == [f"step {i}" for i in range(5)], names
peak = max(d["peak_bytes"] for d in snap.report()["devices"])
print(f"train.py: snapshot {path}, peak {peak} bytes, loss {loss.item():.3f}")
PYEOF
"$V/cumemtrace" run -o out -- "$V/python" train.py >train.log 2>&1
rc=$?
cat train.log
n=$(ls out/python*.json 2>/dev/null | grep -vc after-training)
[ $rc = 0 ] && [ "$n" = 1 ] && grep -q "train.py: snapshot" train.log
verdict $? "cumemtrace run python train.py (exit $rc, $n exit snapshot, API ranges + snapshot)"
"$V/cumemtrace" report out/*.after-training.json >report.txt 2>&1
verdict $? "cumemtrace report on the on-demand snapshot"

cat >test_gpu_leak.py <<'PYEOF'
import pytest
import torch

kept = []
torch.zeros(1, device="cuda")  # context and first allocation outside the tests


@pytest.mark.limit_gpu_leaks("0 B")
def test_leaks_a_tensor():
    kept.append(torch.ones(1 << 20, device="cuda"))  # THE_LEAK


@pytest.mark.limit_gpu_leaks("0 B")
@pytest.mark.limit_gpu_memory("64 MiB")
def test_frees_its_tensor():
    t = torch.ones(1 << 20, device="cuda")
    del t
PYEOF
leak_line=$(grep -n THE_LEAK test_gpu_leak.py | cut -d: -f1)
# No caching allocator: a tensor's memory goes back to the driver when the tensor dies.
PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$V/python" -m pytest -p no:cacheprovider -q --cumemtrace \
  test_gpu_leak.py >pytest.log 2>&1
rc=$?
cat pytest.log
[ $rc = 1 ] && grep -q "1 failed, 1 passed" pytest.log &&
  grep -q "^FAILED test_gpu_leak.py::test_leaks_a_tensor" pytest.log &&
  grep -q "test_gpu_leak.py:$leak_line" pytest.log
verdict $? "pytest --cumemtrace fails the leaking test at test_gpu_leak.py:$leak_line (exit $rc)"

echo "validate_wheel: $([ $fail = 0 ] && echo all passed || echo FAILED) (work dir $WORK)"
exit $fail
