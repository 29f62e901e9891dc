"""Where each buffer of a kernel lives in the AscendC program: the queues and buffers of its
``TPipe``.

- a kernel parameter is a ``GlobalTensor`` (GM);
- a UB buffer filled only by copies from GM and allocated around them unconditionally is a
  ``TQue<VECIN, 2>`` (copy-in stage: AllocTensor, DataCopy, EnQue; compute: DeQue ...
  FreeTensor); one read only by copies to GM is a ``TQue<VECOUT, 2>`` (compute: AllocTensor
  ... EnQue; copy-out: DeQue, DataCopy, FreeTensor); any other UB buffer a
  ``TBuf<VECCALC>`` (scratch, no queue discipline);
- a Cube operand (L0A / L0B) has a staging queue in L1 (``A1`` / ``B1``: GM -> L1 by
  DataCopyPad, zero-padded) and its own queue (``A2`` / ``B2``: L1 -> L0 by LoadData into
  fractals); a Cube result (L0C) has ``CO1`` and a staging queue ``CO2`` in UB (Fixpipe L0C ->
  UB, row-major), from which rows go to GM.

Queues have depth 2 (double buffering: the copy-in of the next tile may overlap the compute of
this one on the hardware). :func:`plan_buffers` refuses levels it has no position for.

>>> from tilecraft.dtypes import DType
>>> from tilecraft.kernel_ir import Allocate, Buffer, BufferLoad, For, Kernel, LoopKind, Seq, Store
>>> from tilecraft.te import Var, const
>>> x, y = Buffer("x", (32,), DType.FLOAT32), Buffer("y", (32,), DType.FLOAT32)
>>> ub = Buffer("x_ub", (32,), DType.FLOAT32, level="UB")
>>> i = Var("i")
>>> copy_in = For(i, const(32), LoopKind.SERIAL, Store(ub, (i,), BufferLoad(x, (i,))))
>>> copy_out = For(i, const(32), LoopKind.SERIAL, Store(y, (i,), BufferLoad(ub, (i,))))
>>> body = Allocate(ub, Seq((copy_in, copy_out)))
>>> plan = plan_buffers(Kernel("k", (x, y), ("y",), body), ("L0A", "L0B", "L0C"), ("L1",), "UB")
>>> plan.roles[ub]
'vecin'
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tilecraft.errors import CodegenError
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    IfThenElse,
    Kernel,
    Seq,
    Stmt,
    Store,
)
from tilecraft.kernel_ir.visitor import walk_stmts

__all__ = ["QUEUE_DEPTH", "BufferPlan", "plan_buffers"]

QUEUE_DEPTH = 2


@dataclass
class BufferPlan:
    """``roles``: each allocated buffer's role (vecin, vecout, calc, cube_a, cube_b, cube_c);
    ``order``: the allocated buffers in program order."""

    roles: dict[Buffer, str] = field(default_factory=dict)
    order: list[Buffer] = field(default_factory=list)


def _is_copy_in(store: Store, params: set[Buffer]) -> bool:
    value = store.value
    return store.accumulate is None and isinstance(value, BufferLoad) \
        and value.buffer in params and value.buffer.dtype == store.buffer.dtype


def _is_copy_out(store: Store, buffer: Buffer, params: set[Buffer]) -> bool:
    value = store.value
    return store.buffer in params and store.accumulate is None \
        and isinstance(value, BufferLoad) and value.buffer == buffer


def _conditional_stores(body: Stmt, under_if: bool = False) -> list[tuple[Store, bool]]:
    """Every store of ``body`` with whether an ``if`` encloses its nest (a guard directly
    inside a loop of the nest does not count: the nest runs whatever it skips)."""
    found: list[tuple[Store, bool]] = []
    if isinstance(body, Store):
        found.append((body, under_if))
    elif isinstance(body, Seq):
        for child in body.stmts:
            found += _conditional_stores(child, under_if)
    elif isinstance(body, For):
        inner = body.body
        if isinstance(inner, IfThenElse) and inner.else_body is None:
            inner = inner.then_body
        found += _conditional_stores(inner, under_if)
    elif isinstance(body, IfThenElse):
        found += _conditional_stores(body.then_body, True)
        if body.else_body is not None:
            found += _conditional_stores(body.else_body, True)
    elif isinstance(body, Allocate):
        found += _conditional_stores(body.body, under_if)
    return found


def _reads(store: Store, buffer: Buffer) -> bool:
    from tilecraft.kernel_ir.nodes import walk_expr

    exprs = [store.value, *store.indices]
    return any(isinstance(node, BufferLoad) and node.buffer == buffer
               for expr in exprs for node in walk_expr(expr))


def plan_buffers(kernel: Kernel, cube_levels: tuple[str, str, str],
                 staging_levels: tuple[str, ...], vector_level: str) -> BufferPlan:
    """The role of every allocated buffer (module docstring)."""
    params = set(kernel.params)
    plan = BufferPlan()
    cube_roles = dict(zip(cube_levels, ("cube_a", "cube_b", "cube_c")))
    for stmt in walk_stmts(kernel.body):
        if not isinstance(stmt, Allocate):
            continue
        buffer = stmt.buffer
        plan.order.append(buffer)
        if buffer.level in cube_roles:
            plan.roles[buffer] = cube_roles[buffer.level]
            continue
        if buffer.level != vector_level:
            known = ", ".join((vector_level, *cube_levels))
            raise CodegenError(
                f"kernel {kernel.name}: buffer {buffer.name} is allocated in {buffer.level}; "
                f"the AscendC code generator allocates buffers in {known} (L1 holds only the "
                "staging copies of Cube operands it makes itself)")
        stores = _conditional_stores(stmt.body)
        writes = [(s, cond) for s, cond in stores if s.buffer == buffer]
        reads = [(s, cond) for s, cond in stores if _reads(s, buffer)]
        if writes and all(_is_copy_in(s, params) and not cond for s, cond in writes):
            plan.roles[buffer] = "vecin"
        elif reads and all(_is_copy_out(s, buffer, params) and not cond for s, cond in reads):
            plan.roles[buffer] = "vecout"
        else:
            plan.roles[buffer] = "calc"
    return plan


