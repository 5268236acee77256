"""A fake `torch` for GPU-less tests of cumemtrace's PyTorch capture (tests/fake_torch).

Only what cumemtrace's sitecustomize touches is real here: __version__ (FAKE_TORCH_VERSION,
default 2.11.0), torch.cuda._lazy_call, torch.cuda.device_count,
torch.cuda.memory.get_allocator_backend; the rest drives the fake libc10_cuda.so (FAKE_TORCH_LIB) so that tests can allocate and free blocks.
"""
import os

__version__ = os.environ.get("FAKE_TORCH_VERSION", "2.11.0")

from . import cuda  # noqa: E402,F401  (PyTorch imports torch.cuda from torch/__init__ too)
