"""torch.cuda.memory of the fake torch."""
import os


def _conf():
    return os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").replace(" ", "")


def _expandable():
    return "expandable_segments:True" in _conf()


def get_allocator_backend():
    return "cudaMallocAsync" if "backend:cudaMallocAsync" in _conf() else "native"
