"""The Kernel IR interpreter: the living definition of what a kernel computes.

``run_kernel(kernel, arrays)`` executes any kernel on numpy arrays, writing its outputs in
place. It is the default :meth:`~tilecraft.target.base.Target.emulate` and the oracle code
generators are compared against. Its semantics are those of the numpy reference interpreter:

- float16 / bfloat16 are storage types: loads widen to float32, arithmetic is float32, stores
  (and casts to a half type) round to the storage type;
- integer arithmetic wraps around in its dtype; ``//`` and ``%`` are floor-based;
- every loop kind runs its iterations in order; ``Barrier`` makes the threads of the enclosing
  ``BOUND`` loops advance in lockstep (every thread reaches the barrier before any passes it);
- ``Allocate`` gives a zero-initialised array for the extent of its body (NaN-filled where
  it is not ``zeroed``: the lowering promised to write before reading);
- ``IntrinsicCall`` / ``MicroKernelCall`` run the callable registered under their name in
  ``semantics``, called as ``fn(*operands, **params)`` with each operand a writable numpy view
  of its region (in the buffer's storage dtype); it writes its results in place;
- ``StreamPush`` / ``StreamPop`` go through one FIFO per stream.

The kernel is compiled once into nested Python closures; an innermost loop whose body is a
single store runs as numpy operations over all its iterations at once where that provably gives
the sequential result (see :mod:`.interpreter_vector`).

>>> import numpy as np
>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir.nodes import Buffer, BufferLoad, For, Kernel, LoopKind, Store
>>> from tilecraft.te import Var, const
>>> A = Buffer("A", (5,), DType.FLOAT32)
>>> B = Buffer("B", (5,), DType.FLOAT32)
>>> i = Var("i")
>>> body = For(i, const(5), LoopKind.VECTOR, Store(B, (i,), BufferLoad(A, (i,)) * 2.0), lanes=16)
>>> kernel = Kernel("double", (A, B), ("B",), body)
>>> arrays = {"A": np.arange(5, dtype=np.float32), "B": np.zeros(5, np.float32)}
>>> run_kernel(kernel, arrays)
>>> arrays["B"]
array([0., 2., 4., 6., 8.], dtype=float32)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tilecraft.errors import IndexBoundsError, InputError, LoweringError, TargetError
from tilecraft.kernel_ir.interpreter_concurrency import ConcurrentStatements
from tilecraft.kernel_ir.interpreter_expr import (
    Env,
    ExprCompiler,
    StmtFn,
    accumulate_scalar,
    allocation_fill,
)
from tilecraft.kernel_ir.interpreter_lockstep import Lockstep, contains_sync
from tilecraft.kernel_ir.interpreter_vector import compile_vector_store
from tilecraft.kernel_ir.layout import parse_layout
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Barrier,
    Copy,
    For,
    IfThenElse,
    IntrinsicCall,
    Kernel,
    LoopKind,
    MicroKernelCall,
    Region,
    Seq,
    Stmt,
    Store,
    Stream,
    StreamPop,
    StreamPush,
)
from tilecraft.kernel_ir.printer import stmt_to_str
from tilecraft.kernel_ir.visitor import KernelVisitor
from tilecraft.te.expr import Const

Semantics = Mapping[str, Callable[..., Any]]


def run_kernel(kernel: Kernel, arrays: Mapping[str, np.ndarray],
               semantics: Semantics | None = None) -> None:
    """Execute ``kernel`` on ``arrays`` (one per parameter, by name); outputs are written in
    place. Raises :class:`~tilecraft.errors.InputError` for missing, extra or mistyped arrays."""
    compile_kernel(kernel, semantics)(arrays)


def compile_kernel(kernel: Kernel, semantics: Semantics | None = None) -> InterpretedKernel:
    """Verify and compile ``kernel`` once, to run it many times."""
    from tilecraft.kernel_ir.verify import verify_kernel

    verify_kernel(kernel, check_bounds=False)
    return InterpretedKernel(kernel, semantics or {})


def run_kernels(kernels: Sequence[Kernel], arrays: Mapping[str, np.ndarray],
                semantics: Semantics | None = None) -> dict[str, np.ndarray]:
    """Run ``kernels`` in order over one namespace of arrays.

    Outputs missing from ``arrays`` (intermediate and final results) are allocated as zeros;
    returns every array by name, inputs included. As in the runtime, a kernel may view an
    array in another shape of the same size (a C-contiguous array is reshaped, sharing memory).
    """
    namespace = dict(arrays)
    for kernel in kernels:
        for name in kernel.outputs:
            if name not in namespace:
                buffer = kernel.param(name)
                namespace[name] = np.zeros(buffer.storage_shape, buffer.dtype.numpy)
        run_kernel(kernel, {b.name: _viewed(namespace.get(b.name), b.storage_shape)
                            for b in kernel.params}, semantics)
    return namespace


def _viewed(array: Any, shape: tuple[int, ...]) -> Any:
    if (isinstance(array, np.ndarray) and array.shape != tuple(shape)
            and array.size == int(np.prod(shape)) and array.flags.c_contiguous):
        return array.reshape(shape)
    return array


def validate_arrays(kernel: Kernel, arrays: Mapping[str, Any]) -> None:
    """Raise :class:`~tilecraft.errors.InputError` unless ``arrays`` holds exactly one array
    of the right shape and dtype per parameter, with writable outputs."""
    names = [b.name for b in kernel.params]
    missing = [n for n in names if arrays.get(n) is None]
    if missing:
        raise InputError(f"kernel {kernel.name}: no array given for parameter(s) "
                         f"{', '.join(missing)}; pass one array per parameter: {', '.join(names)}")
    extra = sorted(set(arrays) - set(names))
    if extra:
        raise InputError(f"kernel {kernel.name}: unknown array name(s) {', '.join(extra)}; its "
                         f"parameters are {', '.join(names)}")
    for buffer in kernel.params:
        array = arrays[buffer.name]
        if not isinstance(array, np.ndarray):
            raise InputError(f"kernel {kernel.name}: parameter {buffer.name} must be a numpy "
                             f"array, got {type(array).__name__}")
        if buffer.layout != "row_major":
            size = parse_layout(buffer.layout).physical_size(buffer.shape)
            if array.size != size or not array.flags.c_contiguous:
                raise InputError(f"kernel {kernel.name}: array {buffer.name} must hold the "
                                 f"{size} elements of its {buffer.layout} layout in one "
                                 f"C-contiguous array, got shape {array.shape}")
        elif array.shape != buffer.storage_shape:
            raise InputError(f"kernel {kernel.name}: array {buffer.name} has shape {array.shape} "
                             f"but the parameter has shape {buffer.storage_shape}" +
                             (f" ({buffer.element_type}: the lanes last)"
                              if buffer.lanes > 1 else ""))
        if array.dtype != buffer.dtype.numpy:
            raise InputError(f"kernel {kernel.name}: array {buffer.name} has dtype {array.dtype} "
                             f"but the parameter is {buffer.dtype.value}; convert it with "
                             f".astype(...)")
        if buffer.name in kernel.outputs and not array.flags.writeable:
            raise InputError(f"kernel {kernel.name}: output array {buffer.name} is read-only; "
                             "pass a writable array (outputs are written in place)")


class InterpretedKernel(ConcurrentStatements, KernelVisitor[StmtFn]):
    """A kernel the interpreter turned into Python closures, once; call it with the arrays,
    like a loaded kernel (``Target.emulate`` runs one by default). Not to be confused with
    :class:`~tilecraft.runtime.executable.CompiledKernel`, a kernel with its source and runner."""

    def __init__(self, kernel: Kernel, semantics: Semantics):
        self.kernel = kernel
        self._semantics = semantics
        self._exprs = ExprCompiler(kernel.name)
        self._streams: dict[Stream, int] = {}
        self._setup_concurrency(kernel)
        self._param_slots = [(b, self._exprs.bind_buffer(b)) for b in kernel.params]
        self._body = self._stmt(kernel.body)

    def __call__(self, arrays: Mapping[str, np.ndarray]) -> None:
        validate_arrays(self.kernel, arrays)
        env: Env = [None] * self._exprs.slot_count
        laid_out = []
        for buffer, slot in self._param_slots:
            array = arrays[buffer.name]
            if buffer.layout != "row_major":
                # the caller passes the physical array; the kernel computes on the logical one
                offsets = parse_layout(buffer.layout).offsets(buffer.shape)
                laid_out.append((buffer, array, offsets, slot))
                array = array.reshape(-1)[offsets]
            env[slot] = array
        for slot in self._streams.values():
            env[slot] = deque()
        self._start_concurrency(env)
        with np.errstate(all="ignore"):
            self._body(env)
        self._finish_concurrency(env)
        for buffer, array, offsets, slot in laid_out:
            if buffer.name in self.kernel.outputs:
                array.reshape(-1)[offsets] = env[slot]

    # statements ---------------------------------------------------------------------------
    def _stmt(self, stmt: Stmt) -> StmtFn:
        return self.visit(stmt)

    def generic_visit(self, stmt: Stmt) -> StmtFn:
        raise LoweringError(f"kernel {self.kernel.name}: the interpreter does not know the "
                            f"statement {type(stmt).__name__}; express it with Kernel IR nodes")

    def visit_Seq(self, stmt: Seq) -> StmtFn:
        parts = [self._stmt(s) for s in stmt.stmts]

        def run_seq(env: Env) -> None:
            for part in parts:
                part(env)

        return run_seq

    def visit_For(self, stmt: For) -> StmtFn:
        return self._for(stmt)

    def visit_Store(self, stmt: Store) -> StmtFn:
        return self._store(stmt)

    def visit_Allocate(self, stmt: Allocate) -> StmtFn:
        return self._allocate(stmt)

    def visit_IfThenElse(self, stmt: IfThenElse) -> StmtFn:
        return self._if(stmt)

    def visit_Copy(self, stmt: Copy) -> StmtFn:
        return self._copy(stmt)

    def visit_IntrinsicCall(self, stmt: IntrinsicCall | MicroKernelCall) -> StmtFn:
        return self._call(stmt)

    visit_MicroKernelCall = visit_IntrinsicCall

    def visit_Barrier(self, stmt: Barrier) -> StmtFn:
        return _no_op

    def visit_StreamPush(self, stmt: StreamPush) -> StmtFn:
        return self._push(stmt)

    def visit_StreamPop(self, stmt: StreamPop) -> StmtFn:
        return self._pop(stmt)

    def _for(self, loop: For) -> StmtFn:
        extent = self._exprs.compile(loop.extent)
        fixed = int(loop.extent.value) if isinstance(loop.extent, Const) else None
        slot = self._exprs.bind_var(loop.var)
        if loop.kind is LoopKind.BOUND and contains_sync(loop.body):
            body_all = Lockstep(self, (slot,)).visit(loop.body)
            fork, join = self._fork_threads, self._join_threads

            def run_threads(env: Env) -> None:
                count = fixed if fixed is not None else int(extent(env))
                threads = []
                for value in range(count):
                    thread = list(env)
                    thread[slot] = value
                    threads.append(thread)
                fork(threads)
                body_all(threads)
                join(threads)

            return run_threads
        body = self._stmt(loop.body)
        vector = (compile_vector_store(self._exprs, loop.body, loop.var, slot)
                  if isinstance(loop.body, Store) else None)

        def run_loop(env: Env) -> None:
            count = fixed if fixed is not None else int(extent(env))
            if vector is not None and count > 1 and vector(env, count):
                return
            for value in range(count):
                env[slot] = value
                body(env)

        return run_loop

    def _store(self, store: Store) -> StmtFn:
        slot = self._exprs.buffer_slot(store.buffer, store)
        index = self._exprs.index(store.buffer, store.indices, f"store {stmt_to_str(store)}")
        value = self._exprs.compile(store.value)
        if store.accumulate is None:

            def run_store(env: Env) -> None:
                env[slot][index(env)] = value(env)

            return run_store
        combine = accumulate_scalar(store.accumulate, store.buffer.dtype)

        def run_accumulate(env: Env) -> None:
            array = env[slot]
            where = index(env)
            array[where] = combine(array[where], value(env))

        return run_accumulate

    def _allocate(self, alloc: Allocate) -> StmtFn:
        buffer = alloc.buffer
        slot = self._exprs.bind_buffer(buffer)
        body = self._stmt(alloc.body)
        shape, dtype = buffer.storage_shape, buffer.dtype.numpy

        guard = self._exprs.load_guards.get(id(buffer))

        fill = allocation_fill(alloc)

        def run_allocate(env: Env) -> None:
            env[slot] = np.full(shape, fill, dtype)
            if guard is not None:
                env[guard] = np.zeros(shape, bool)
            body(env)

        return run_allocate

    def _if(self, branch: IfThenElse) -> StmtFn:
        cond = self._exprs.compile(branch.cond)
        then_body = self._stmt(branch.then_body)
        else_body = self._stmt(branch.else_body) if branch.else_body is not None else _no_op

        def run_if(env: Env) -> None:
            if cond(env):
                then_body(env)
            else:
                else_body(env)

        return run_if

    def _region(self, region: Region, what: str) -> Callable[[Env], np.ndarray]:
        buffer = region.buffer
        slot = self._exprs.buffer_slot(buffer, what)
        bases = [self._exprs.compile(b) for b in region.base]
        extents, steps, shape = region.extents, region.steps, buffer.shape
        name = self.kernel.name

        def view(env: Env) -> np.ndarray:
            slices = []
            for dim, (base_fn, extent, step, size) in enumerate(zip(bases, extents, steps,
                                                                   shape)):
                base = int(base_fn(env))
                last = base + (extent - 1) * step
                if base < 0 or last >= size:
                    raise IndexBoundsError(
                        f"kernel {name}: {what}: region of {buffer.name} covers [{base}, {last}] "
                        f"in dimension {dim}, outside [0, {size}); fix the region's base or "
                        "extents")
                slices.append(slice(base, last + 1, step))
            return env[slot][tuple(slices)]

        return view

    def _copy(self, copy: Copy) -> StmtFn:
        what = f"`{stmt_to_str(copy)}`"
        dst, src = self._region(copy.dst, what), self._region(copy.src, what)

        def run_copy(env: Env) -> None:
            target = dst(env)
            target[...] = src(env).reshape(target.shape)

        return run_copy

    def _call(self, call: IntrinsicCall | MicroKernelCall) -> StmtFn:
        if isinstance(call, IntrinsicCall):
            name, params, kind = call.intrinsic, dict(call.attrs), "intrinsic"
        else:
            name, params, kind = call.micro_kernel, dict(call.params), "micro-kernel"
        fn = self._semantics.get(name)
        if fn is None:
            raise TargetError(
                f"kernel {self.kernel.name} calls the {kind} {name!r} but the interpreter has no "
                f"semantics for it; pass run_kernel(..., semantics={{{name!r}: fn}}) with "
                "fn(*operand_views, **params) writing its results in place")
        what = f"`{stmt_to_str(call)}`"
        views = [self._region(r, what) for r in call.operands]

        def run_call(env: Env) -> None:
            fn(*(view(env) for view in views), **params)

        return run_call

    def _stream_slot(self, stream: Stream) -> int:
        if stream not in self._streams:
            self._streams[stream] = self._exprs.new_slot()
        return self._streams[stream]

    def _push(self, push: StreamPush) -> StmtFn:
        slot = self._stream_slot(push.stream)
        value = self._exprs.compile(push.value)

        def run_push(env: Env) -> None:
            env[slot].append(value(env))

        return run_push

    def _pop(self, pop: StreamPop) -> StmtFn:
        slot = self._stream_slot(pop.stream)
        target = self._exprs.buffer_slot(pop.buffer, pop)
        index = self._exprs.index(pop.buffer, pop.indices, f"pop into {pop.buffer.name}")
        kernel, stream = self.kernel.name, pop.stream.name

        def run_pop(env: Env) -> None:
            fifo = env[slot]
            if not fifo:
                raise LoweringError(
                    f"kernel {kernel}: stream {stream} is popped while empty; in sequential "
                    "execution every value must be pushed before it is popped (order the "
                    "producing stage before the consuming one)")
            env[target][index(env)] = fifo.popleft()

        return run_pop


def _no_op(env: Env) -> None:
    return None


__all__ = ["InterpretedKernel", "Semantics", "compile_kernel", "run_kernel", "run_kernels",
           "validate_arrays"]
