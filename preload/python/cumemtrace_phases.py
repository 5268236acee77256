"""Automatic phases and ownership walks of a PyTorch program, with no change to its script.

Installed by cumemtrace_torch once torch is imported (whatever the allocator backend), this emits
the annotation contract that the analysis reads (docs/pytorch.md):
  START/END "auto:forward"    around the call of a root module (one called at depth 0 on a thread
                              that is not inside backward or another root),
  START/END "auto:loss"       instead of auto:forward when that root is a loss module
                              (torch.nn.modules.loss._Loss: nn.MSELoss, nn.CrossEntropyLoss...),
  START/END "auto:backward"   around the outermost autograd run (Tensor.backward,
                              torch.autograd.backward and torch.autograd.grad, the seed
                              gradient they make included; all end in
                              torch.autograd._engine_run_backward) outside a forward; while
                              it runs, the caller's Python frames are lent to autograd's engine
                              threads (cumemtrace_torch_backward_caller), so that their
                              allocations' site is the line that called backward,
  START/END "auto:optimizer"  between the global optimizer step pre- and post-hooks (every
                              torch.optim.Optimizer subclass), then the MARK "auto:step",
  START/END "auto:zero_grad"  around Optimizer.zero_grad and Module.zero_grad outside a forward
                              and backward.
These nest: a forward, loss, backward or zero_grad run inside optimizer.step(closure) (LBFGS,
PyTorch Lightning's automatic optimization) is marked inside the auto:optimizer pair, and the
analysis takes the innermost (collector/pytorch/phases.h), so "optimizer" is what remains.
and ownership walks (cumemtrace_torch_owners): at each optimizer post-hook the parameters of every
optimizer seen and of every root, their .grad, and the tensors in the optimizers' state; before the
first step the roots' parameters at their first forward. Only tensors on the traced device type,
deduplicated by data pointer, as (data pointer, numel * element size); also, at each root's
forward, its inputs (role 4), and FSDP2's all-gathered parameters after each parameter group's
wait_for_unshard (role 5); a tensor subclass
(DTensor: FSDP2's sharded parameters, gradients and optimizer state, whose own data_ptr() is 0) is
walked as its local tensors (__tensor_flatten__), so its bytes are this rank's shard; FSDP2's
flat communication buffers (role 7): a parameter group's all-gather output when its
wait_for_unshard begins (before the copy-out frees it) and its reduce-scatter input after its
post_backward; the KV cache a root's forward returns under no_grad (inference, generate:
transformers' Cache in its output's `cache`/`past_key_values`, role 8) at that forward's end;
torch's cuBLAS workspaces (role 6, cumemtrace_workspaces.py) at each step's walk
and, while no optimizer is known (inference), at each root forward's end, and right before
torch._C._cuda_clearCublasWorkspaces frees them (CUDA graph trees, torch.compile
mode="reduce-overhead", clear them before and after every warm-up and recording: the workspace a
recording made in the graph pool, the one every replay then uses, lives only between two clears
and no step's walk would see it). A role is sent only when its
list changed since it was last sent (a walk replaces that role's previous one; communication
buffers are sent at every walk: a new buffer often lands where the last one was). A step's walk is
one pass over the gradients' data pointers: parameters and state are walked again only when their
containers changed (Phases._walk), which keeps the hooks' cost per step in microseconds.

How the roots are found, and why so: a global forward hook disables Module._call_impl's fast path
for every module (+1-4% a step), so the global hooks stay only until the roots are known: until the
first backward or optimizer step begins, or a root is called a second time (inference), or a root
is compiled (torch.compile(model), or a module under it compiled in place). Then they are removed
and per-module hooks go on the roots alone. Inside compiled code the hooks do nothing (the tracer
sees a hook that returns at once), so they add no graph break.

What is missed, by design:
  - a root first called after discovery ended (e.g. an evaluation model first run after the first
    training step): its forward shows as no phase; its parameters still join the walks only if an
    optimizer holds them;
  - a root compiled in place (model.compile()): its hooks run inside the compiled code, so its
    forward has no marks; torch.compile(model) works (the wrapper's call is eager);
  - a loss module called after a compiled root in the first step (discovery ended at that root);
  - torch.compile of a whole step function that calls the modules during the first step: the
    global hooks become part of its first graph's guards, so removing them may recompile it once
    (seen with torch.compile(model) when the hooks were left on; a step function is untested);
  - a module running on another thread while discovery ends keeps its global hooks' depth count;
  - without always_call (torch < 2.1) a root whose forward raises leaves its range open.
Errors: no exception of ours reaches the program. The first one prints one `cumemtrace:` line and
turns all of this off (hooks removed, backward unwrapped). CUMEMTRACE_PHASES=0 turns it off.
pause() and resume() take every hook and wrapper out and put them back, between steps, keeping
what was learned: for benchmarks that alternate the two in one process
(bench/gpu/trainer_overhead.py); nothing reads an environment variable per step.
"""
import array
import ctypes
import importlib
import sys
import threading
import warnings
import weakref

ROLE_PARAMETER, ROLE_GRADIENT, ROLE_OPTIMIZER_STATE = 1, 2, 3  # snap::OwnerRole, wire kTorchOwners
ROLE_INPUT, ROLE_PARAMETER_UNSHARDED = 4, 5
ROLE_CUBLAS_WORKSPACE, ROLE_COMMUNICATION, ROLE_KV_CACHE = 6, 7, 8
# FSDP2's parameter group (torch 2.6+, then 2.4-2.5): its wait_for_unshard leaves the all-gathered
# parameters in place; they are walked right after it (role 5).
_FSDP_GROUP_MODULES = ("torch.distributed.fsdp._fully_shard._fsdp_param_group",
                       "torch.distributed._composable.fsdp._fsdp_param_group")
FORWARD, BACKWARD, OPTIMIZER, STEP = b"auto:forward", b"auto:backward", b"auto:optimizer", b"auto:step"
LOSS, ZERO_GRAD = b"auto:loss", b"auto:zero_grad"

# The warning torch.compile's wrapper gives while a global module hook exists: ours exist only
# during discovery, which ends at that wrapper's first forward pre-hook (before anything fires
# twice), so the warning would describe something that does not happen.
_COMPILE_WARNING = r"Using `torch.compile\(module\)` when there are global hooks"


class PreloadSink:
    """Emits through libcumemtrace.so's exported functions (include/cumemtrace.h), GIL held."""

    def __init__(self, err=None):
        lib = ctypes.PyDLL(None)
        self._push = lib.cumemtrace_range_push
        self._push.argtypes, self._push.restype = [ctypes.c_char_p], None
        self._pop = lib.cumemtrace_range_pop
        self._pop.argtypes, self._pop.restype = [], None
        self._mark = lib.cumemtrace_mark
        self._mark.argtypes, self._mark.restype = [ctypes.c_char_p], None
        # Lends the backward caller's frames to autograd's engine threads (an older preload has
        # no such export: their allocations keep the node alone as their site).
        self._caller = getattr(lib, "cumemtrace_torch_backward_caller", None)
        if self._caller is not None:
            self._caller.argtypes, self._caller.restype = [ctypes.c_int], ctypes.c_int
        try:
            self._owners = lib.cumemtrace_torch_owners
            self._owners.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64]
            self._owners.restype = ctypes.c_int
        except AttributeError:
            self._owners = None
            (err or sys.stderr).write("cumemtrace: this libcumemtrace.so has no "
                                      "cumemtrace_torch_owners; phases without ownership walks\n")

    def push(self, name):
        self._push(name)

    def pop(self):
        self._pop()

    def mark(self, name):
        self._mark(name)

    def backward_caller(self, skip):
        """Lends this thread's Python frames, less this call's and `skip` more of ours, to
        autograd's engine threads while a backward runs; skip < 0 takes them back."""
        if self._caller is not None:
            self._caller(skip + 1 if skip >= 0 else -1)

    def owners(self, role, pairs):
        """pairs: (data pointer, bytes) flattened into one list of ints."""
        if self._owners is None:
            return
        buf = array.array("Q", pairs)
        address, n = buf.buffer_info()
        self._owners(role, address, n // 2)


class _ThreadState(threading.local):
    def __init__(self):
        self.depth = 0  # modules (roots, after discovery) whose pre-hook ran and post-hook not yet
        self.forward_open = False  # this thread's auto:forward is open
        self.backward = 0  # autograd runs in progress on this thread
        self.optimizers = []  # optimizer steps in progress on this thread (outermost first)
        self.zero_grad = 0  # zero_grad calls in progress on this thread


class Phases:
    """The hooks. `sink` has push(name), pop(), mark(name) and owners(role, flat pairs);
    `device_type` is the tensors' device type that walks keep ("cuda" when traced)."""

    def __init__(self, torch, sink, device_type="cuda", err=None, modules=None):
        self._torch = torch
        self._modules = modules  # cumemtrace_modules.Modules: names for the "by module" view
        self._sink = sink
        self._device_type = device_type
        self._err = err or sys.stderr
        self._tls = _ThreadState()
        self._off = False
        self._discovering = False
        self._roots = weakref.WeakKeyDictionary()  # root module -> its per-module hook handles
        self._optimizers = weakref.WeakSet()
        # role -> the tuple of pairs last sent; an empty list is sent only to clear a sent one
        self._sent = {ROLE_PARAMETER: (), ROLE_GRADIENT: (), ROLE_OPTIMIZER_STATE: (),
                      ROLE_INPUT: (), ROLE_PARAMETER_UNSHARDED: (), ROLE_CUBLAS_WORKSPACE: (),
                      ROLE_COMMUNICATION: (), ROLE_KV_CACHE: ()}
        self._workspaces = None  # cumemtrace_workspaces.Workspaces, set by install()
        self._fsdp_watched = False
        self._global_handles = []
        self._optimizer_handles = []
        self._warning_filter = None
        self._engine_run = None  # torch.autograd's original _engine_run_backward
        self._wrapped_names = []  # (module, name, original) of what was replaced
        self._is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (
            lambda: False)
        self._graph_task_id = getattr(torch._C, "_current_graph_task_id", None) or (lambda: -1)
        # Tensor.is_cuda (is_cpu, ...) is a plain flag; Tensor.device builds an object
        self._on_device = "is_" + device_type
        self._tensor = torch.Tensor
        self._plain = (torch.Tensor, torch.nn.Parameter)  # types walked as they are
        loss_mod = sys.modules.get("torch.nn.modules.loss")
        self._loss_type = getattr(loss_mod, "_Loss", None) or ()
        self._volatile_state = False  # an optimizer keeps lists of tensors in its state (LBFGS)
        self._always_call = True
        self._paused_state = None  # pause(): {"discovering": bool} until resume()

    # --- installing and removing ------------------------------------------------------------

    def install(self):
        torch = self._torch
        self._add_global_hooks()
        self._add_optimizer_hooks()

        autograd = torch.autograd
        bw = (self._backward_begin, self._backward_end)
        # The public entry points (Tensor.backward calls the first through the module): backward
        # begins where the user's call does, before _make_grads makes the seed gradient (a
        # ones_like of the loss, 512 B on a GPU) that the engine then consumes; marked from the
        # engine run instead, that block fell before the phase (in "loss", or in a closure's
        # "optimizer" under Lightning, as unknown). The engine run too: a caller holding its
        # own reference to backward or grad still reaches it (the outermost call marks).
        self._wrap(autograd, "backward", *bw)
        self._wrap(autograd, "grad", *bw)
        if callable(getattr(autograd, "_engine_run_backward", None)):
            self._wrap(autograd, "_engine_run_backward", *bw)
        # The only zero_grad definitions in torch (subclasses and wrappers such as accelerate's
        # AcceleratedOptimizer end in Optimizer's); wrapped on the classes.
        zg = (self._zero_grad_begin, self._zero_grad_end)
        self._wrap(torch.optim.Optimizer, "zero_grad", *zg)
        self._wrap(torch.nn.Module, "zero_grad", *zg)
        self._watch_workspace_clears()

    def _watch_workspace_clears(self):
        """Walks the cuBLAS workspaces right before torch._C._cuda_clearCublasWorkspaces frees
        them (the module docstring says why). Looked up on torch._C at each call by torch's own
        callers (cudagraph_trees.clear_cublass_cache), so replacing it there reaches them; a torch
        without it (CPU builds) has nothing to watch."""
        C = self._torch._C
        if getattr(C, "_cuda_clearCublasWorkspaces", None) is not None:
            self._wrap(C, "_cuda_clearCublasWorkspaces", self._before_workspace_clear,
                       lambda opened: None)

    def _before_workspace_clear(self):
        if not self._off:
            try:
                self._workspace_walk()
            except Exception as e:  # never the program's failure
                self._fail("cuBLAS workspace walk before a clear", e)

    def _add_global_hooks(self):
        module_mod = importlib.import_module("torch.nn.modules.module")
        warnings.filterwarnings("ignore", message=_COMPILE_WARNING, category=UserWarning)
        self._warning_filter = warnings.filters[0]
        self._global_handles.append(module_mod.register_module_forward_pre_hook(self._pre_hook))
        try:
            post = module_mod.register_module_forward_hook(self._post_hook, always_call=True)
        except TypeError:  # torch < 2.1
            if self._always_call:
                self._note("torch %s has no always_call forward hooks: a forward that raises "
                           "leaves its phase open" % self._torch.__version__)
            self._always_call = False
            post = module_mod.register_module_forward_hook(self._post_hook)
        self._global_handles.append(post)
        self._discovering = True

    def _add_optimizer_hooks(self):
        optim = importlib.import_module("torch.optim.optimizer")  # not an attribute in 2.11
        if hasattr(optim, "register_optimizer_step_pre_hook"):
            self._optimizer_handles = [
                optim.register_optimizer_step_pre_hook(self._optimizer_pre_hook),
                optim.register_optimizer_step_post_hook(self._optimizer_post_hook)]
        elif not self._paused_state:  # said once, at install
            self._note("torch %s has no global optimizer step hooks: no auto:optimizer phases or "
                       "ownership walks" % self._torch.__version__)

    def pause(self):
        """Takes every hook and wrapper out, as uninstall() does, but keeps what was learned (the
        roots, the optimizers, the walks sent, the module names), so that resume() puts the same
        hooks back with no new discovery and nothing re-sent that did not change. While paused
        nothing is marked or walked, and torch runs as if we were not there (Module._call_impl's
        fast path included). For a benchmark that alternates the two in one process
        (bench/gpu/trainer_overhead.py): call it between steps, on the thread that runs them.
        Returns False, changing nothing, when already paused, turned off, or while a forward,
        backward, zero_grad or optimizer step is in progress on this thread."""
        tls = self._tls
        if (self._off or self._paused_state or tls.depth or tls.forward_open or tls.backward
                or tls.optimizers or tls.zero_grad):
            return False
        self._paused_state = {"discovering": self._discovering}
        self._off = True  # a wrapper someone else wrapped over ours (not removable) passes
        self._remove_global_hooks()
        for root in list(self._roots.keys()):
            for h in self._roots[root] or ():
                h.remove()
            self._roots[root] = None
        for h in self._optimizer_handles:
            h.remove()
        self._optimizer_handles = []
        for module, name, original, wrapper in self._wrapped_names:
            if getattr(module, name, None) is wrapper:
                setattr(module, name, original)
        return True

    def resume(self):
        """Puts back what pause() took out: the discovery's global hooks if it was still going,
        else the hooks on the known roots; the optimizer hooks; the wrappers (one that someone
        replaced meanwhile stays theirs). Returns False when not paused."""
        state = self._paused_state
        if not state:
            return False
        if state["discovering"]:
            self._add_global_hooks()
        else:
            for root in list(self._roots.keys()):
                self._hook_root(root)
        self._add_optimizer_hooks()
        for module, name, original, wrapper in self._wrapped_names:
            if getattr(module, name, None) is original:
                setattr(module, name, wrapper)
        self._paused_state = None
        self._off = False
        return True

    def set_workspaces(self, workspaces):
        """The reader of torch's cuBLAS workspace maps (cumemtrace_workspaces), or None."""
        self._workspaces = workspaces

    def _wrap(self, module, name, begin, end):
        original = getattr(module, name)

        def run_backward(*args, **kwargs):
            opened = begin()
            try:
                return original(*args, **kwargs)
            finally:
                end(opened)

        run_backward.__wrapped__ = original
        run_backward.__name__ = getattr(original, "__name__", name)
        run_backward.__doc__ = getattr(original, "__doc__", None)
        setattr(module, name, run_backward)
        self._wrapped_names.append((module, name, original, run_backward))

    def uninstall(self):
        self._off = True
        self._paused_state = None
        self._fsdp_watched = False
        self._remove_global_hooks()
        for handles in list(self._roots.values()):
            for h in handles or ():  # None: a root not hooked yet
                h.remove()
        self._roots = weakref.WeakKeyDictionary()
        for h in self._optimizer_handles:
            h.remove()
        self._optimizer_handles = []
        for module, name, original, wrapper in self._wrapped_names:
            if getattr(module, name, None) is wrapper:  # someone else's wrapper stays (ours passes)
                setattr(module, name, original)
        self._wrapped_names = []

    def _remove_global_hooks(self):
        self._discovering = False
        for h in self._global_handles:
            h.remove()
        self._global_handles = []
        if self._warning_filter is not None:
            try:
                warnings.filters.remove(self._warning_filter)
                warnings._filters_mutated()
            except (ValueError, AttributeError):
                pass
            self._warning_filter = None

    def _end_discovery(self):
        """Global hooks off; per-module hooks on the roots known now."""
        self._end_pending = False
        self._remove_global_hooks()
        for root in list(self._roots.keys()):
            self._hook_root(root)

    def _hook_root(self, root):
        if self._roots.get(root):
            return
        pre = root.register_forward_pre_hook(self._pre_hook, with_kwargs=True)
        if self._always_call:
            post = root.register_forward_hook(self._post_hook, always_call=True)
        else:
            post = root.register_forward_hook(self._post_hook)
        self._roots[root] = [pre, post]

    def _note(self, what):
        self._err.write("cumemtrace: %s\n" % what)

    def _fail(self, where, e):
        if self._off:
            return
        try:
            self._note("automatic phases off (%s: %s: %s)" % (where, type(e).__name__, e))
            self.uninstall()
        except Exception:
            self._off = True

    # --- forward ----------------------------------------------------------------------------

    def _busy(self, tls):
        """In backward on this thread (or on autograd's engine thread). An optimizer step is not
        busy: a closure's forward inside it is a forward (the analysis nests it)."""
        return tls.backward or self._graph_task_id() != -1

    def _pre_hook(self, module, args, kwargs=None):
        if self._off or self._is_compiling():
            return
        try:
            tls = self._tls
            if tls.depth == 0 and not self._busy(tls):
                if kwargs is None and self._discovering:  # the global hook has no kwargs
                    kwargs = self._caller_kwargs()
                new = module not in self._roots
                if new:
                    self._roots[module] = None
                    if self._modules:
                        self._modules.on_root(module)
                if self._discovering and (not new or self._compiled(module)):
                    self._end_discovery()  # before a compiled forward's guards see our hooks
                elif not self._discovering and new:
                    self._hook_root(module)
                loss = isinstance(module, self._loss_type)
                self._sink.push(LOSS if loss else FORWARD)
                tls.forward_open = True
                if new:
                    self._walk((ROLE_PARAMETER,))
                    self._watch_fsdp()
                if not loss:
                    self._send_inputs(args, kwargs)
            tls.depth += 1
        except Exception as e:
            self._fail("forward pre-hook", e)

    def _caller_kwargs(self):
        """The keyword arguments of the Module._call_impl that runs the global hooks (a global
        forward pre-hook gets none), or None elsewhere."""
        frame = sys._getframe(2)  # _caller_kwargs <- _pre_hook <- _call_impl (its inner())
        if frame.f_code.co_name not in ("_call_impl", "inner"):
            return None
        kwargs = frame.f_locals.get("kwargs")
        return kwargs if isinstance(kwargs, dict) else None

    def _send_inputs(self, args, kwargs):
        """The input walk: the tensors passed to a root's forward, one level into lists, tuples
        and dicts (a batch dict, transformers' BatchEncoding), so that the analysis can tell
        them from the program's own tensors (collector/pytorch/categories.h, rule 5)."""
        tensor = self._tensor
        values = list(args)
        if kwargs:
            values.extend(kwargs.values())
        tensors = []
        for v in values:
            if isinstance(v, tensor):
                tensors.append(v)
            elif isinstance(v, (list, tuple)):
                tensors.extend(x for x in v if isinstance(x, tensor))
            elif isinstance(v, dict):
                tensors.extend(x for x in v.values() if isinstance(x, tensor))
        found = {}
        self._keep(tensors, found)
        self._send(ROLE_INPUT, found)

    def _watch_fsdp(self):
        """Once FSDP2 is imported (a new root may be fully_shard'ed): the all-gathered parameters
        are walked after each FSDPParamGroup.wait_for_unshard (forward, and backward's re-gather),
        a few walks a step per parameter group."""
        if self._fsdp_watched:
            return
        for name in _FSDP_GROUP_MODULES:
            group = getattr(sys.modules.get(name), "FSDPParamGroup", None)
            if group is not None and callable(getattr(group, "wait_for_unshard", None)):
                self._fsdp_watched = True
                self._wrap_after(group, "wait_for_unshard", self._unsharded_walk,
                                 self._all_gather_walk)
                if callable(getattr(group, "post_backward", None)):
                    self._wrap_after(group, "post_backward", self._reduce_scatter_walk)
                return

    def _wrap_after(self, owner, name, after, before=None):
        original = getattr(owner, name)

        def run_then_walk(this, *args, **kwargs):
            if before is not None:
                before(this)
            result = original(this, *args, **kwargs)
            after(this)
            return result

        run_then_walk.__wrapped__ = original
        run_then_walk.__name__ = getattr(original, "__name__", name)
        setattr(owner, name, run_then_walk)
        self._wrapped_names.append((owner, name, original, run_then_walk))

    def _unsharded_walk(self, group):
        if self._off or self._is_compiling():
            return
        try:
            tensors = [t for fp in group.fsdp_params for t in fp.all_gather_outputs
                       if t.untyped_storage().nbytes()]
            found = {}
            self._keep(tensors, found)
            self._send(ROLE_PARAMETER_UNSHARDED, found)
        except Exception as e:
            self._fail("FSDP unshard walk", e)

    def _all_gather_walk(self, group):
        """FSDP2's flat all-gather output of `group` (its all-gather input is a view into it),
        alive from the all-gather until the copy-out (or the next group's, when deferred)."""
        if self._off or self._is_compiling():
            return
        try:
            result = getattr(group, "_all_gather_result", None)
            out = getattr(result, "all_gather_output", None)
            if out is not None and out.untyped_storage().nbytes():
                found = {}
                self._keep([out], found)
                self._send(ROLE_COMMUNICATION, found, force=True)
        except Exception as e:
            self._fail("FSDP all-gather walk", e)

    def _reduce_scatter_walk(self, group):
        """FSDP2's flat reduce-scatter input, kept in comm_ctx until the next group's reduce."""
        if self._off or self._is_compiling():
            return
        try:
            state = getattr(getattr(group, "comm_ctx", None), "reduce_scatter_state", None)
            buf = getattr(state, "reduce_scatter_input", None)
            if buf is not None and buf.untyped_storage().nbytes():
                found = {}
                self._keep([buf], found)
                self._send(ROLE_COMMUNICATION, found, force=True)
        except Exception as e:
            self._fail("FSDP reduce-scatter walk", e)

    def _kv_cache_walk(self, result):
        """The KV cache a root returned (inference): a transformers ModelOutput's `cache` (5.x)
        or `past_key_values` (4.x), read as a dict (its attributes warn of deprecation): a Cache's
        layers' keys and values, its key_cache/value_cache lists, or tuples of tensors."""
        if not isinstance(result, dict):
            return
        cache = dict.get(result, "cache")
        if cache is None:
            cache = dict.get(result, "past_key_values")
        if cache is None:
            return
        tensors = []
        layers = getattr(cache, "layers", None)
        if isinstance(layers, (list, tuple)):
            for layer in layers:
                tensors.extend(getattr(layer, n, None) for n in ("keys", "values"))
        elif isinstance(getattr(cache, "key_cache", None), list):
            tensors = list(cache.key_cache) + list(getattr(cache, "value_cache", None) or [])
        elif isinstance(cache, (list, tuple)):
            for layer in cache:
                tensors.extend(layer if isinstance(layer, (list, tuple)) else (layer,))
        found = {}
        self._keep([t for t in tensors if isinstance(t, self._tensor)], found)
        self._send(ROLE_KV_CACHE, found)

    def _workspace_walk(self):
        """torch's cuBLAS workspaces (role 6); a busy map is read at the next walk."""
        if self._workspaces is None:
            return
        try:
            pointers = self._workspaces.pointers()
        except Exception as e:  # a map of another shape: only this walk stops, the phases go on
            self._workspaces = None
            self._note("cuBLAS workspaces no longer read (%s: %s); they keep the label of the "
                       "phase that made them" % (type(e).__name__, e))
            return
        if pointers is not None:
            self._send(ROLE_CUBLAS_WORKSPACE, {p: 0 for p in pointers})

    def _post_hook(self, module, args, result):
        if self._off or self._is_compiling():
            return
        try:
            tls = self._tls
            if tls.depth == 0:
                return  # its pre-hook ran before we were installed
            tls.depth -= 1
            if tls.depth == 0:
                if tls.forward_open:
                    tls.forward_open = False
                    self._sink.pop()
                    if not self._optimizers:  # inference: no step walks
                        self._workspace_walk()
                    if not self._torch.is_grad_enabled():
                        self._kv_cache_walk(result)
                if self._discovering and self._end_pending:
                    self._end_discovery()
        except Exception as e:
            self._fail("forward hook", e)

    _end_pending = False

    def _compiled(self, module):
        """torch.compile's wrapper, or a module with a submodule compiled in place."""
        if type(module).__name__ == "OptimizedModule":
            return True
        return any(getattr(m, "_compiled_call_impl", None) is not None for m in module.modules())

    def _discovery_ends(self, tls):
        if tls.depth == 0:
            self._end_discovery()
        else:  # a backward or step inside a forward: when that forward ends
            self._end_pending = True

    # --- backward ---------------------------------------------------------------------------

    def _backward_begin(self):
        """True when this call opened auto:backward."""
        if self._off:
            return False
        try:
            tls = self._tls
            outer = (not tls.backward and not tls.forward_open and self._graph_task_id() == -1
                     and not self._is_compiling())
            tls.backward += 1
            if outer:
                if self._discovering:
                    self._discovery_ends(tls)
                self._sink.push(BACKWARD)
                # Engine threads run no Python: their allocations' site is the line that called
                # backward (preload/stacks/backward_caller.h). Ours: this frame and the wrapper.
                self._sink.backward_caller(2)
            return outer
        except Exception as e:
            self._fail("backward", e)
            return False

    def _backward_end(self, opened):
        if self._off and not opened:
            return
        try:
            tls = self._tls
            if tls.backward:
                tls.backward -= 1
            if opened:  # taken back even when turned off meanwhile: the frames end here
                self._sink.backward_caller(-1)
            if opened and not self._off:
                self._sink.pop()
        except Exception as e:
            self._fail("backward", e)

    # --- zero_grad ----------------------------------------------------------------------------

    def _zero_grad_begin(self):
        """True when this call opened auto:zero_grad (the outermost, outside forward/backward)."""
        if self._off or self._is_compiling():
            return False
        try:
            tls = self._tls
            outer = (not tls.zero_grad and not tls.forward_open and not tls.depth
                     and not self._busy(tls))
            tls.zero_grad += 1
            if outer:
                self._sink.push(ZERO_GRAD)
            return outer
        except Exception as e:
            self._fail("zero_grad", e)
            return False

    def _zero_grad_end(self, opened):
        if self._off and not opened:
            return
        try:
            tls = self._tls
            if tls.zero_grad:
                tls.zero_grad -= 1
            if opened and not self._off:
                self._sink.pop()
        except Exception as e:
            self._fail("zero_grad", e)

    # --- optimizer step ---------------------------------------------------------------------

    def _optimizer_pre_hook(self, optimizer, args, kwargs):
        if self._off:
            return
        try:
            tls = self._tls
            if optimizer in tls.optimizers:  # its step raised last time: those ranges stay open
                del tls.optimizers[tls.optimizers.index(optimizer):]
            self._optimizers.add(optimizer)
            if not tls.optimizers:
                if self._discovering and len(self._roots):  # none yet: a closure's forward
                    self._discovery_ends(tls)                 # inside this step finds them
                self._sink.push(OPTIMIZER)
            tls.optimizers.append(optimizer)
        except Exception as e:
            self._fail("optimizer step pre-hook", e)

    def _optimizer_post_hook(self, optimizer, args, kwargs):
        if self._off:
            return
        try:
            tls = self._tls
            if optimizer not in tls.optimizers:
                return  # its pre-hook ran before we were installed
            del tls.optimizers[tls.optimizers.index(optimizer):]
            if not tls.optimizers:
                self._sink.pop()
                self._sink.mark(STEP)
                if self._modules:
                    self._modules.on_step()
                self._walk((ROLE_PARAMETER, ROLE_GRADIENT, ROLE_OPTIMIZER_STATE))
                self._workspace_walk()
        except Exception as e:
            self._fail("optimizer step post-hook", e)

    # --- ownership --------------------------------------------------------------------------

    def _keep(self, tensors, found):
        """Adds the strided tensors on the traced device type to found {data pointer: bytes}.
        One loop with locals: a walk of ~150 parameters is ~600 tensors a step (Adam)."""
        on_device, plain = self._on_device, self._plain
        for t in tensors:
            if type(t) not in plain:
                inner = self._local_tensors(t)
                if inner is not None:
                    self._keep(inner, found)
                    continue
            if getattr(t, on_device):
                try:
                    ptr = t.data_ptr()
                except RuntimeError:  # sparse and other layouts without one block: not walked
                    continue
                if ptr and ptr not in found:
                    found[ptr] = t.nbytes  # numel * element size

    def _local_tensors(self, t):
        """The tensors a wrapper subclass holds (DTensor: its local shard), or None for a tensor
        walked as it is. Keyed by the local storage: a DTensor's own data_ptr() is 0 and its
        storage reports the global size."""
        if type(t) in self._plain:  # the usual case, without a failed attribute lookup
            return None
        flatten = getattr(t, "__tensor_flatten__", None)
        if flatten is None:
            return None
        names, _ = flatten()
        return [getattr(t, n) for n in names]

    def walk_lists(self):
        """{role: {data pointer: bytes}} of what the optimizers seen and the roots own now."""
        params, state = self._owned_params(), self._state_tensors()
        grads = [g for g in (p.grad for p in params) if g is not None]
        lists = {ROLE_PARAMETER: {}, ROLE_GRADIENT: {}, ROLE_OPTIMIZER_STATE: {}}
        self._keep(params, lists[ROLE_PARAMETER])
        self._keep(grads, lists[ROLE_GRADIENT])
        self._keep(state, lists[ROLE_OPTIMIZER_STATE])
        return lists

    def _owned_params(self):
        """The optimizers' parameters, then the roots' that no optimizer holds."""
        params = []
        for opt in list(self._optimizers):
            for group in opt.param_groups:
                params.extend(group["params"])
        held = set(map(id, params))  # a root's parameters are mostly the optimizers' already
        for root in list(self._roots.keys()):
            params.extend(p for p in root.parameters() if id(p) not in held)
        return params

    def _state_tensors(self):
        """Tensor values of every optimizer's per-parameter state, and the tensors in list or
        tuple values (LBFGS keeps its history, old_dirs/old_stps/ro/al, in lists)."""
        tensor = self._tensor
        out = []
        for opt in list(self._optimizers):
            for per_param in opt.state.values():
                for v in per_param.values():
                    if isinstance(v, tensor):
                        out.append(v)
                    elif isinstance(v, (list, tuple)):
                        self._volatile_state = True
                        out.extend(x for x in v if isinstance(x, tensor))
        return out

    def _containers_key(self):
        """What changes when the parameter lists or the optimizer state's entries do: the
        optimizers, their groups' lists and lengths, their state dicts and lengths, the roots. An
        in-place update (the usual step) changes none of it, so a step re-walks only gradients."""
        key = []
        for opt in list(self._optimizers):
            key.append(id(opt))
            key.append(id(opt.state))
            key.append(len(opt.state))
            for group in opt.param_groups:
                ps = group["params"]
                key.append(id(ps))
                key.append(len(ps))
        key.append(len(self._roots))
        return key

    def _send(self, role, found, force=False):
        pairs = tuple(found.items())
        if self._sent.get(role) == pairs and not force:
            return
        self._sent[role] = pairs
        self._sink.owners(role, [x for pair in pairs for x in pair])
        if self._modules:
            self._modules.on_owners(role, found, self._params, list(self._optimizers),
                                    self._local_tensors)

    def _walk(self, roles):
        """Sends each role whose list changed. A step's walk (all three roles) costs one pass over
        the gradients' data pointers when nothing else moved: the parameters and the state are
        walked again only when _containers_key changed (a new optimizer or param group, state
        filled at the first step or loaded, a new root). A parameter whose data is replaced in
        place (param.data = ...) between such changes is not seen until the next one."""
        key = self._containers_key()
        # list-valued state (LBFGS) is replaced, not updated in place, on every step
        rewalk = key != self._key or ROLE_GRADIENT not in roles or self._volatile_state
        if rewalk:
            self._key = key if ROLE_OPTIMIZER_STATE in roles else None  # None: state not walked
            self._params = self._owned_params()
            found = {}
            self._keep(self._params, found)
            self._send(ROLE_PARAMETER, found)
        if ROLE_GRADIENT in roles:
            grads = [g for g in (p.grad for p in self._params) if g is not None]
            try:
                plain = self._plain
                pointers = [g.data_ptr() if type(g) in plain else
                            tuple(x.data_ptr() for x in self._local_tensors(g) or (g,))
                            for g in grads]
            except RuntimeError:  # a sparse gradient: the careful walk below skips it
                pointers = None
            if pointers is None or pointers != self._grad_pointers:
                self._grad_pointers = pointers
                found = {}
                self._keep(grads, found)
                self._send(ROLE_GRADIENT, found)
        if rewalk and ROLE_OPTIMIZER_STATE in roles:
            found = {}
            self._keep(self._state_tensors(), found)
            self._send(ROLE_OPTIMIZER_STATE, found)

    _key = None
    _params = ()
    _grad_pointers = None


_phases = None


def install(torch, err=None):
    """Installs the hooks with the preload's sink; never raises (one `cumemtrace:` line)."""
    global _phases
    err = err or sys.stderr
    if _phases is not None:
        return _phases
    phases = None
    try:
        import cumemtrace_modules
        import cumemtrace_workspaces
        phases = Phases(torch, PreloadSink(err), "cuda", err,
                        cumemtrace_modules.make(torch, err))
        phases.set_workspaces(cumemtrace_workspaces.make(torch, err))
        phases.install()
        _phases = phases
    except Exception as e:
        if phases is not None:
            try:
                phases.uninstall()
            except Exception:
                pass
        err.write("cumemtrace: automatic phases not installed (%s: %s)\n" % (type(e).__name__, e))
    return _phases


def pause():
    """Pauses the installed phases (Phases.pause): True when they were on and now are paused."""
    return _phases is not None and _phases.pause()


def resume():
    """Resumes paused phases (Phases.resume): True when they were paused and now are on."""
    return _phases is not None and _phases.resume()
