"""torch.cuda of the fake torch: lazy initialisation, _lazy_call, and block allocation ops."""
import ctypes
import os

from . import _utils, graphs, memory  # noqa: F401

_lib = ctypes.CDLL(os.environ["FAKE_TORCH_LIB"])
_lib.fake_torch_malloc.restype = ctypes.c_void_p
_lib.fake_torch_malloc.argtypes = [ctypes.c_size_t]
_lib.fake_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_int]
_lib.fake_torch_set_limit.argtypes = [ctypes.c_size_t]
_lib.fake_torch_reserved.restype = ctypes.c_size_t
# The fake libtorch_cpu.so next to it: autograd's engine (as `import torch` loads PyTorch's).
_cpu = ctypes.CDLL(os.path.join(os.path.dirname(os.environ["FAKE_TORCH_LIB"]), "libtorch_cpu.so"))
_cpu.fake_torch_allocs_on_engine_thread.restype = None
_cpu.fake_torch_allocs_on_engine_thread.argtypes = [
    ctypes.c_size_t, ctypes.c_void_p * 2, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]

_cpu.fake_torch_make_node.restype = ctypes.c_uint64
_cpu.fake_torch_make_node.argtypes = [ctypes.c_size_t]
_cpu.fake_torch_backward_of_nodes.restype = ctypes.c_size_t
_cpu.fake_torch_backward_of_nodes.argtypes = [ctypes.c_void_p * 64, ctypes.c_size_t]
# at::RecordFunction::currentThreadId, whose id each node keeps (not an API of PyTorch's Python).
current_thread_id_address = ctypes.cast(_cpu._ZN2at14RecordFunction15currentThreadIdEv,
                                        ctypes.c_void_p).value

_initialized = False
_devices = 0
_queued = []


class OutOfMemoryError(RuntimeError):
    pass


def is_initialized():
    return _initialized


def device_count():
    return _devices


def _lazy_call(fn):
    """As PyTorch's: run fn now if CUDA is initialised, else right after initialisation."""
    if _initialized:
        fn()
    else:
        _queued.append(fn)


def _lazy_init():
    """As PyTorch's: the lazy calls run after the devices are known and before is_initialized()
    turns true."""
    global _initialized, _devices
    if _initialized:
        return
    if _lib.fake_torch_cuda_init(1 if memory._expandable() else 0,
                                 1 if memory.get_allocator_backend() == "cudaMallocAsync" else 0) != 0:
        raise RuntimeError("fake CUDA initialisation failed")
    _devices = 1
    for fn in _queued:
        fn()
    del _queued[:]
    _initialized = True


def alloc(nbytes):
    """A block of nbytes from the caching allocator: its address."""
    _lazy_init()
    p = _lib.fake_torch_malloc(nbytes)
    if not p:
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes" % nbytes)
    return p


def allocs_on_engine_thread(nbytes, from_driver=False):
    """Three alloc()s from autograd's engine thread, which runs no Python: two by an autograd
    node (MmBackward0), as a backward op allocates (from_driver: with cuMemAllocAsync itself, as
    a C++ extension's op may), the third by the thread's loop outside any node. Their addresses
    (not an API of PyTorch)."""
    _lazy_init()
    in_node, outside_node = (ctypes.c_void_p * 2)(), ctypes.c_void_p()
    _cpu.fake_torch_allocs_on_engine_thread(nbytes, in_node, ctypes.byref(outside_node),
                                            1 if from_driver else 0)
    got = [in_node[0], in_node[1], outside_node.value]
    if not all(got):
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes" % nbytes)
    return got


def make_node(nbytes):
    """A forward op's autograd node, made (and numbered) on the calling thread; the next
    backward_of_nodes() evaluates it, where it allocates `nbytes`. Its sequence number (not an API
    of PyTorch)."""
    return _cpu.fake_torch_make_node(nbytes)


def backward_of_nodes():
    """The backward of the nodes made since the last one, on an engine thread that runs no
    Python: each node, latest first, allocates its bytes. Their addresses (not an API of
    PyTorch)."""
    _lazy_init()
    out = (ctypes.c_void_p * 64)()
    n = _cpu.fake_torch_backward_of_nodes(out, 64)
    got = [out[i] for i in range(n)]
    if not all(got):
        raise OutOfMemoryError("CUDA out of memory in backward")
    return got


def free(ptr, deferred=False):
    """Frees a block; deferred leaves it pending (a record_stream'd block)."""
    _lib.fake_torch_free(ptr, 1 if deferred else 0)


def synchronize():
    """Completes pending frees."""
    _lib.fake_torch_complete_pending()


def empty_cache():
    _lib.fake_torch_empty_cache()


def set_memory_limit(nbytes):
    """Stands in for set_per_process_memory_fraction: the allocator's limit in bytes."""
    _lazy_init()
    _lib.fake_torch_set_limit(nbytes)


def memory_reserved():
    return _lib.fake_torch_reserved()


TOTAL_MEMORY = 1 << 30  # the fake device's memory, as cudaMemGetInfo's total


def current_device():
    return 0


def mem_get_info(device=None):
    return TOTAL_MEMORY - memory_reserved(), TOTAL_MEMORY


def set_per_process_memory_fraction(fraction, device=None):
    """As PyTorch's: the allocator may reserve int(fraction x the device's total memory)."""
    set_memory_limit(int(fraction * TOTAL_MEMORY))


def _set_allocator_settings(env):
    """As torch.cuda.memory._set_allocator_settings: recorded, changes nothing in the fake."""


memory.set_per_process_memory_fraction = set_per_process_memory_fraction
memory._set_allocator_settings = _set_allocator_settings
