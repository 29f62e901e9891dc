"""Lowering a schedule to Kernel IR kernels: one per stage computed at the root.

Before emitting anything the whole schedule is checked against the lowering target: every
step of the trace must be a primitive the target offers, producing loop kinds it expresses;
every ``compute_at`` must point at a current leaf loop of a stage that is itself lowered, and
the attached stage must have that stage as its only reader. After emitting a kernel its loop
placement is checked — the one PARALLEL loop is the kernel's outermost statement (only
allocations around it), a VECTOR loop is the innermost loop of its stage — and it is verified
with :func:`~tilecraft.kernel_ir.verify.verify_kernel` against the target's spec.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    For,
    IfThenElse,
    Kernel,
    LaunchConfig,
    LoopKind,
    Seq,
    Stmt,
)
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.schedule.emit import KernelEmitter
from tilecraft.schedule.errors import schedule_error
from tilecraft.schedule.stage import Stage
from tilecraft.schedule.stage_base import AttachKind
from tilecraft.schedule.target import TargetView
from tilecraft.target.hierarchy import LaunchScope
from tilecraft.target.spec import SchedulePrimitive
from tilecraft.te.tensor import Tensor

#: the Table 4.1 primitive behind each trace step
STEP_PRIMITIVES = {
    "split": SchedulePrimitive.SPLIT, "fuse": SchedulePrimitive.FUSE,
    "reorder": SchedulePrimitive.REORDER, "tile": SchedulePrimitive.TILE,
    "unroll": SchedulePrimitive.UNROLL, "vectorize": SchedulePrimitive.VECTORIZE,
    "parallel": SchedulePrimitive.PARALLEL, "bind": SchedulePrimitive.BIND,
    "pipeline": SchedulePrimitive.PIPELINE, "compute_inline": SchedulePrimitive.INLINE,
    "compute_at": SchedulePrimitive.COMPUTE_AT, "cache_read": SchedulePrimitive.CACHE,
    "cache_write": SchedulePrimitive.CACHE, "buffer": SchedulePrimitive.BUFFER,
    "partition": SchedulePrimitive.PARTITION, "dataflow": SchedulePrimitive.PIPELINE,
}

def lower_schedule(schedule: Any, view: TargetView,
                   computes: Sequence[str] | None = None) -> list[Kernel]:
    """The kernels of ``schedule`` for the target seen through ``view`` (module docstring);
    only those of the root stages named in ``computes`` when given."""
    check_trace(schedule, view)
    options = view.lowering_options()
    children, roots = _attachments(schedule)
    if computes is not None:
        wanted = set(computes)
        missing = sorted(wanted - {root.name for root in roots})
        if missing:
            raise schedule_error("lower", missing[0], None, "it is not a stage computed in its "
                                 "own kernel (inlined, computed at another stage, or not a "
                                 f"stage); lower one of {', '.join(r.name for r in roots)}")
        roots = [root for root in roots if root.name in wanted]
    kernels = []
    for root in roots:
        tree = _tree(root, children)
        params = _params(schedule, root, tree, options.param_level)
        emitter = KernelEmitter(schedule, root, children, params, view, options)
        body = emitter.emit_root()
        _check_placement(root, body, emitter)
        kernel = Kernel(root.name, tuple(params.values()), (root.name,), body,
                        launch=_launch(body, options.threads),
                        attrs={"compute": root.name, "statement": root.tensor.statement(),
                               "schedule": "; ".join(f"{stage.name}: {stage.describe()}"
                                                     for stage in tree),
                               "trace": schedule.trace})
        verify_kernel(kernel, view.spec)
        kernels.append(kernel)
    return kernels


def check_trace(schedule: Any, view: TargetView) -> None:
    """Every step of the trace is offered by the target, with loop kinds it expresses."""
    if not view.known:
        return
    for step in schedule.trace:
        verb = step["primitive"]
        primitive = STEP_PRIMITIVES.get(verb)
        if primitive is None:
            continue
        stage_name = step.get("stage") or step.get("tensor")
        loop = step.get("loop")
        view.require(primitive, verb, stage_name, loop)
        if verb in ("cache_read", "cache_write", "buffer"):
            view.require_level(verb, stage_name, step["level"])
        if verb == "dataflow":
            for kind in (LoopKind.STAGE, LoopKind.PIPELINED):
                if not view.allows_kind(kind):
                    raise schedule_error(verb, stage_name, None, f"{view.name} cannot express "
                                         f"{kind.value} loops, which a dataflow region's stages "
                                         "are made of; leave dataflow out for this target")
        threads = getattr(view.spec, "threads", None)
        if verb == "bind" and threads is not None and \
                step["thread_axis"] not in threads.axis_names:
            raise schedule_error(verb, stage_name, loop, f"{step['thread_axis']!r} is not a "
                                 f"bindable axis of {view.name}; bind to one of "
                                 f"{', '.join(threads.axis_names)}")
        if verb == "bind" and threads is not None:
            stage = schedule.stage(step["stage"], verb)
            if stage.loop(loop).is_reduce:
                axis = threads.axis(step["thread_axis"])
                if axis.scope is not LaunchScope.BLOCK:
                    raise schedule_error(verb, stage_name, loop, f"the loop is a reduction "
                                         f"and {axis.name} indexes blocks of {view.name}, which "
                                         "cannot combine partial results; bind it to a thread "
                                         "axis of a block")
        if verb == "vectorize":
            stage = schedule.stage(step["stage"], verb)
            if stage.loop(loop).is_reduce:
                why = view.vector_reduction(stage.tensor.dtype)
                if why is not None:
                    raise schedule_error(verb, stage.name, loop, f"the loop is a reduction and "
                                         f"{why}; vectorise a spatial loop instead")


def _attachments(schedule: Any) -> tuple[dict[str, dict[object, list[Stage]]], list[Stage]]:
    """Which stages are computed inside which stage's loops, and the root stages; checks that
    every attachment is still valid."""
    readers: dict[Tensor, list[Stage]] = {}
    for stage in schedule.stages:
        if stage.attach.kind is not AttachKind.INLINE:
            for tensor in schedule.reads_of(stage):
                readers.setdefault(tensor, []).append(stage)
    children: dict[str, dict[object, list[Stage]]] = {}
    roots = []
    for stage in schedule.stages:
        attach = stage.attach
        if attach.kind is AttachKind.ROOT:
            roots.append(stage)
            continue
        if attach.kind is AttachKind.INLINE:
            continue
        verb = _verb(stage)
        parent = schedule.stage(attach.stage, verb)
        if parent.attach.kind is AttachKind.INLINE:
            raise schedule_error(verb, stage.name, None, f"it is computed inside {parent.name}, "
                                 f"which is inlined and has no loops; attach it to a stage "
                                 f"that is not inlined")
        if attach.loop is not None and attach.loop not in parent.leaves:
            raise schedule_error(verb, stage.name, attach.loop.name, f"the loop of "
                                 f"{parent.name} it is computed at was transformed afterwards "
                                 f"({parent._replacement(attach.loop)}); attach it to one of "
                                 f"the current loops: {parent._leaf_names()}")
        children.setdefault(parent.name, {}).setdefault(attach.loop, []).append(stage)
    for parent_name, points in children.items():
        for loop, group in points.items():
            for position, stage in enumerate(group):
                _check_readers(stage, parent_name, loop, group[position + 1:],
                               readers.get(stage.tensor, []))
    return children, roots


def _check_readers(stage: Stage, parent: str, loop: Any, later: list[Stage],
                   readers: list[Stage]) -> None:
    """A stage computed at a point is read only there: by the stage owning the loop, or by
    stages computed at the same point after it."""
    verb = _verb(stage)
    where = f"{parent}.{loop.name}" if loop is not None else f"the top of {parent}"
    allowed = {parent} | {s.name for s in later}
    if not readers:
        raise schedule_error(verb, stage.name, None, f"nothing reads {stage.name} at {where} "
                             "(any more); attach it to the stage that reads it")
    outside = [s.name for s in readers if s.name not in allowed]
    if outside:
        raise schedule_error(verb, stage.name, None, f"{stage.name} is computed at {where} but "
                             f"also read by {', '.join(outside)}, outside that point; compute "
                             f"those readers at the same point too, or compute {stage.name} at "
                             "the root (its own kernel)")


def _verb(stage: Stage) -> str:
    """The primitive that placed ``stage`` where it is, for messages."""
    if stage.attach.explicit or stage.cache is None:
        return "compute_at"
    return f"cache_{stage.cache}"


def _tree(root: Stage, children: dict[str, dict[object, list[Stage]]]) -> list[Stage]:
    found = [root]
    for group in children.get(root.name, {}).values():
        for child in group:
            found += _tree(child, children)
    return found


def _params(schedule: Any, root: Stage, tree: list[Stage], level: str) -> dict[Tensor, Buffer]:
    """Kernel parameters: every tensor the tree reads that it does not compute, in order of
    first use (producers' reads first), then the root's output."""
    produced = {stage.tensor for stage in tree}
    params: dict[Tensor, Buffer] = {}
    for stage in schedule.stages:
        if stage not in tree:
            continue
        for tensor in schedule.reads_of(stage):
            if tensor not in produced and tensor not in params:
                params[tensor] = Buffer(tensor.name, tensor.shape, tensor.dtype, level=level)
    params[root.tensor] = Buffer(root.name, root.tensor.shape, root.tensor.dtype, level=level)
    return params


def _statements(stmt: Stmt, loops: tuple[For, ...] = ()) -> Iterator[tuple[Stmt,
                                                                          tuple[For, ...]]]:
    yield stmt, loops
    if isinstance(stmt, Seq):
        for part in stmt.stmts:
            yield from _statements(part, loops)
    elif isinstance(stmt, For):
        yield from _statements(stmt.body, loops + (stmt,))
    elif isinstance(stmt, Allocate):
        yield from _statements(stmt.body, loops)
    elif isinstance(stmt, IfThenElse):
        yield from _statements(stmt.then_body, loops)
        if stmt.else_body is not None:
            yield from _statements(stmt.else_body, loops)


def _check_placement(root: Stage, body: Stmt, emitter: KernelEmitter) -> None:
    top = body
    while isinstance(top, Allocate):
        top = top.body
    for stmt, enclosing in _statements(body):
        if not isinstance(stmt, For):
            continue
        stage, loop = emitter.origins.get(stmt.var, (root.name, stmt.var.name))
        if stmt.kind is LoopKind.PARALLEL and stmt is not top:
            where = f"inside loop {enclosing[-1].var.name}" if enclosing else \
                "after other statements (stages or copies computed at the kernel's root)"
            raise schedule_error("parallel", stage, loop, f"the parallel loop must be the "
                                 f"outermost statement of kernel {root.name}, but it is {where}; "
                                 "make it the first loop of the kernel's root stage and compute "
                                 "other stages inside it")
        if stmt.kind is LoopKind.VECTOR:
            inner = [s for s, _ in _statements(stmt.body) if isinstance(s, For)]
            if inner:
                inner_stage, inner_loop = emitter.origins.get(inner[0].var,
                                                              (root.name, inner[0].var.name))
                what = f"loop {inner_loop}" if inner_stage == stage else \
                    f"stage {inner_stage} (computed at this loop)"
                raise schedule_error("vectorize", stage, loop, f"the vector loop must be the "
                                     f"innermost loop of its stage, but {what} runs inside it; "
                                     "reorder it innermost (and attach stages outside it)")


def _launch(body: Stmt, threads: Any) -> LaunchConfig | None:
    """The grid and block extents of the loops bound to the axes of the target's thread
    hierarchy (each axis names its launch scope and dimension) and the bytes of the buffers
    allocated in its shared level; None without bound loops."""
    if threads is None:
        return None
    dims: dict[str, dict[int, int]] = {"grid": {}, "block": {}}
    axes = {axis.name: axis for axis in threads.axes}
    for stmt, _ in _statements(body):
        if isinstance(stmt, For) and stmt.kind is LoopKind.BOUND and stmt.axis in axes:
            axis = axes[stmt.axis]
            dims[axis.scope.value][axis.dim] = int(getattr(stmt.extent, "value", 1))
    if not dims["grid"] and not dims["block"]:
        return None
    shared = sum(stmt.buffer.nbytes for stmt, _ in _statements(body)
                 if isinstance(stmt, Allocate) and stmt.buffer.level == threads.shared_level)

    def shape(found: dict[int, int]) -> tuple[int, ...]:
        if not found:
            return (1,)
        return tuple(found.get(d, 1) for d in range(max(found) + 1))

    return LaunchConfig(grid=shape(dims["grid"]), block=shape(dims["block"]),
                        shared_bytes=shared)


__all__ = ["STEP_PRIMITIVES", "check_trace", "lower_schedule"]
