"""The cuBLAS workspaces torch keeps, by their data pointers, read from torch's own maps.

Why: torch gives every (cuBLAS handle, stream) a workspace from the caching allocator at a
thread's first cuBLAS call and keeps it (CUBLAS_WORKSPACE_CONFIG, 32 MiB on Hopper and Blackwell,
~8 MiB before; cuBLASLt's own, CUBLASLT_WORKSPACE_SIZE, 1 MiB, unless
TORCH_CUBLASLT_UNIFIED_WORKSPACE=1 shares cuBLAS's). They are no tensor: labelled by the phase
that first made them they read as 33 MiB of "activation" and 32 MiB of "autograd" on an H100 that
never go away, and they raised every module's forward peak over MemTracker's (which does not see
them). The Phases send these pointers as an ownership walk of their own role
(collector/pytorch/categories.h: "cuBLAS workspace").

How: at::cuda::cublas_handle_stream_to_workspace() and cublaslt_handle_stream_to_workspace()
(exported by libtorch_cuda.so, torch 2.5-2.11 in this shape) return a struct holding a
std::map<std::tuple<void*, void*>, c10::DataPtr> and then a std::shared_mutex. The map is read
under the mutex's read lock (pthread_rwlock_tryrdlock: never waits; a busy map is read next
time), with libstdc++'s red-black tree layout: the header node at +8 (parent = root at +16,
leftmost +24, rightmost +32, node count +40), each node's children at +16/+24 and its value at
+32: the key's 16 bytes, then the DataPtr, whose first word is the data pointer.
Before trusting a map its shape is checked: an empty map's leftmost and rightmost are its header
and its root null; a non-empty one's nodes number exactly its count (at most 4096) and every
child pointer is aligned. Anything else: one `cumemtrace:` line, and no workspace walks (the
rest still works); the analysis then keeps the phase's label, as before.
What is missed: other torch versions' layouts (a thread-local map of (device, stream) in newer
torch: not readable from another thread) and ROCm (hipBLASLt): no walk, one line.
"""
import ctypes
import ctypes.util
import os
import struct

_MAPS = ("_ZN2at4cuda33cublas_handle_stream_to_workspaceEv",    # at::cuda::cublas_handle_...
         "_ZN2at4cuda35cublaslt_handle_stream_to_workspaceEv")  # at::cuda::cublaslt_handle_...
MAP_BYTES = 48  # sizeof(std::map) in libstdc++: the comparator's word, the header, the count
MAX_NODES = 4096  # handles x streams: far more than any process makes


class LayoutError(Exception):
    pass


def read_tree(read, header, count):
    """The data pointers held in a libstdc++ map of (tuple<void*, void*> -> DataPtr) whose header
    node is at `header` holding `count` nodes. `read(address, n)` returns n bytes of memory.
    Raises LayoutError when the tree is not a map of that shape."""
    root, leftmost, rightmost = struct.unpack("<3Q", read(header + 8, 24))
    if count == 0:
        if root != 0 or leftmost != header or rightmost != header:
            raise LayoutError("an empty map's header does not point at itself")
        return []
    if count > MAX_NODES or root == 0 or root % 8:
        raise LayoutError("a map of %d nodes with root %#x" % (count, root))
    out, todo, seen = [], [root], 0
    while todo:
        node = todo.pop()
        seen += 1
        if seen > count:
            raise LayoutError("more nodes than the map's count (%d)" % count)
        left, right = struct.unpack("<2Q", read(node + 16, 16))
        (data,) = struct.unpack("<Q", read(node + 48, 8))
        for child in (left, right):
            if child:
                if child % 8:
                    raise LayoutError("a child pointer %#x is not aligned" % child)
                todo.append(child)
        if data:
            out.append(data)
    if seen != count:
        raise LayoutError("%d nodes for a count of %d" % (seen, count))
    return out


def _read(address, n):
    return ctypes.string_at(address, n)


class Workspaces:
    """Reads torch's workspace maps; `pointers()` gives the data pointers held now (sorted)."""

    def __init__(self, torch):
        lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
        path = os.path.join(lib_dir, "libtorch_cuda.so")
        # RTLD_NOLOAD: only the copy torch itself loaded (none: nothing to read).
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        self._tryrdlock, self._unlock = libc.pthread_rwlock_tryrdlock, libc.pthread_rwlock_unlock
        for f in (self._tryrdlock, self._unlock):
            f.argtypes, f.restype = [ctypes.c_void_p], ctypes.c_int
        self._maps = []
        for name in _MAPS:
            get = getattr(lib, name)  # AttributeError: not this torch's shape
            get.argtypes, get.restype = [], ctypes.c_void_p
            address = get()
            if not address:
                raise LayoutError("%s returned null" % name)
            self._maps.append(address)
        self.pointers()  # the shape check, once, before any walk is sent

    def pointers(self):
        """The data pointers of every workspace now, or None when a map was busy."""
        out = []
        for m in self._maps:
            lock = m + MAP_BYTES
            if self._tryrdlock(lock) != 0:
                return None
            try:
                (count,) = struct.unpack("<Q", _read(m + 40, 8))
                out.extend(read_tree(_read, m + 8, count))
            finally:
                self._unlock(lock)
        return sorted(set(out))


def make(torch, err):
    """Workspaces, or None with one `cumemtrace:` line when this torch's maps cannot be read
    (silently None for a torch without libtorch_cuda.so: CPU-only or ROCm, nothing to read)."""
    lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so")
    if not os.path.exists(lib):
        return None
    try:
        return Workspaces(torch)
    except (LayoutError, AttributeError, OSError) as e:
        err.write("cumemtrace: cuBLAS workspaces not recognised (%s); they keep the label of the "
                  "phase that made them\n" % e)
        return None
