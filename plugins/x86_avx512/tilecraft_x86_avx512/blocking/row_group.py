"""A row group (:mod:`tilecraft.fusion.row_groups`: softmax, log_softmax, layer norm) as one
kernel: in parallel over the rows, each row's computes run one after another over that row,
their full-size intermediates in a row buffer that stays in L1 (or L2), per-row values in
one-element buffers. Passes over the row are as few as the computes allow:

- a full-size elementwise compute read once, by one other member, is inlined into it
  (softmax's ``x - max`` into its ``exp``);
- a row reduction whose only full-size input is the compute of the pass just before it is
  accumulated in that pass (softmax's sum, in the pass computing ``exp``), unless it reads a
  reduction that pass accumulates (not final before the pass ends).

Softmax is then three passes over a row (max; exp and sum; divide) of which only the first
two read the input from memory and the last writes the output: one read and one write of the
``rows x L`` tensor, against four kernels each reading (and two writing) all of it.

>>> from tilecraft import ops, te
>>> from tilecraft.graph import Graph
>>> from tilecraft.fusion.row_groups import row_groups
>>> from tilecraft.lower.options import LoweringOptions
>>> x = te.placeholder((3, 7), name="x")
>>> group, = row_groups(Graph.from_outputs([ops.softmax(x, name="y")]))
>>> kernel = lower_row_group(group, LoweringOptions(vector_lanes=16))
>>> kernel.attrs["schedule"]
'row group y_max -> y_sub -> y_exp -> y_sum -> y: parallel(3 rows) > 3 passes over 7'
"""

from __future__ import annotations

from tilecraft.fusion.row_groups import RowGroup, member_kind
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    For,
    Kernel,
    Seq,
    Stmt,
    Store,
)
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.te.expr import Expr, IterVar, Load, Reduce, Var, const
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import loads_in, transform
from tilecraft_x86_avx512.blocking.building import (
    inline_loads,
    kernel_expr,
    parallel_kind,
    unflatten,
    unit_axes,
    vector_kind,
)

__all__ = ["lower_row_group", "row_buffer_bytes"]


def _kinds(group: RowGroup) -> dict[Tensor, str]:
    kinds = {}
    for t in group.tensors:
        kind = member_kind(t, group.row_shape, group.width)
        assert kind is not None
        kinds[t] = kind
    return kinds


def _inlined(group: RowGroup, kinds: dict[Tensor, str]) -> set[Tensor]:
    readers: dict[Tensor, int] = {}
    for t in group.tensors:
        for ld in loads_in(t.op.body):
            if ld.tensor in kinds:
                readers[ld.tensor] = readers.get(ld.tensor, 0) + 1
    return {t for t in group.tensors[:-1] if kinds[t] == "full" and readers.get(t, 0) == 1}


def row_buffer_bytes(group: RowGroup) -> int:
    """The bytes of the row buffers one row needs (full-size members not inlined)."""
    kinds = _kinds(group)
    inlined = _inlined(group, kinds)
    full = [t for t in group.tensors[:-1] if kinds[t] == "full" and t not in inlined]
    return sum(group.width * t.dtype.bytes for t in full)


def lower_row_group(group: RowGroup, options: LoweringOptions) -> Kernel:
    """The kernel of ``group`` (module docstring)."""
    kinds = _kinds(group)
    inlined = _inlined(group, kinds)
    members = set(group.tensors)
    out = group.output
    nrows, width = len(group.row_shape), group.width
    lanes = max(1, options.lanes(out.dtype))
    level = options.param_level

    def expand(expr: Expr) -> Expr:
        return inline_loads(expr, inlined)

    row, lv = Var("row"), Var("l")
    params: dict[Tensor, Buffer] = {}
    local: dict[Tensor, Buffer] = {}
    allocs: list[Buffer] = []
    stmts: list[Stmt] = []
    # the last statement's pass: its compute, its body, the reductions it accumulates
    open_pass: tuple[Tensor, list[Stmt], set[Tensor]] | None = None
    passes = 0
    out_buffer = Buffer(out.name, tuple(out.shape), out.dtype, level=level)
    for t in group.tensors:
        if t in inlined:
            continue
        kind = kinds[t]
        body = expand(t.op.body)
        for ld in loads_in(body):
            if ld.tensor not in members and ld.tensor not in params:
                params[ld.tensor] = Buffer(ld.tensor.name, tuple(ld.tensor.shape),
                                           ld.tensor.dtype, level=level)
        values: dict[IterVar, Expr] = dict(unflatten(row, t.axes[:nrows]))
        if kind == "full":
            values[t.axes[-1]] = lv
        elif kind == "reduce":
            values[t.reduce_axes[0]] = lv
        full_reads = {ld.tensor for ld in loads_in(body)
                      if ld.tensor in members and kinds[ld.tensor] == "full"}

        def to_local(node: Expr) -> Expr | None:
            if isinstance(node, Load) and node.tensor in local:
                source = local[node.tensor]
                return BufferLoad(source, (lv,) if kinds[node.tensor] == "full" else (const(0),))
            return None

        expr = body.body if isinstance(body, Reduce) else body
        expr = kernel_expr(transform(expr, to_local), values, params, extra_zero=unit_axes(t))
        if t is out:
            buffer = out_buffer
            store = Store(buffer, tuple(values[a] for a in t.axes[:nrows]) + (lv,),
                          simplify(expr))
        elif kind == "full":
            buffer = Buffer(f"{t.name}_row", (width,), t.dtype,
                            level=options.register_level or level)
            store = Store(buffer, (lv,), simplify(expr))
        else:
            buffer = Buffer(f"{t.name}_row", (1,), t.dtype,
                            level=options.register_level or level)
        if t is not out:
            allocs.append(buffer)
            local[t] = buffer
        if kind == "row":
            stmts.append(Store(buffer, (const(0),), simplify(expr)))
            open_pass = None
        elif kind == "reduce":
            assert isinstance(body, Reduce)
            init = Store(buffer, (const(0),), const(body.identity(), t.dtype))
            update = Store(buffer, (const(0),), expr, accumulate=body.op)
            if open_pass is not None and full_reads == {open_pass[0]} and \
                    not any(ld.tensor in open_pass[2] for ld in loads_in(body)):
                open_pass[1].append(update)
                open_pass[2].add(t)
                stmts.insert(len(stmts) - 1, init)
                stmts[-1] = _pass(open_pass[1], lv, width, options, lanes)
                continue
            stmts.extend((init, _pass([update], lv, width, options, lanes)))
            passes += 1
            open_pass = None
        else:
            pass_body: list[Stmt] = [store]
            stmts.append(_pass(pass_body, lv, width, options, lanes))
            passes += 1
            open_pass = (t, pass_body, set())
    inner: Stmt = Seq(tuple(stmts))
    for buffer in allocs:
        inner = Allocate(buffer, inner)
    rows = group.rows
    main = For(row, const(rows), parallel_kind(options, rows), inner)
    label = " -> ".join(group.computes)
    kernel = Kernel(out.name, (*params.values(), out_buffer), (out.name,), main, attrs={
        "compute": out.name, "statement": out.statement(), "fused": list(group.computes),
        "schedule": f"row group {label}: parallel({rows} rows) > {passes} passes over "
                    f"{width}"})
    verify_kernel(kernel, options.spec, check_bounds=False)
    return kernel


def _pass(body: list[Stmt], lv: Var, width: int, options: LoweringOptions, lanes: int) -> Stmt:
    inner: Stmt = body[0] if len(body) == 1 else Seq(tuple(body))
    return For(lv, const(width), vector_kind(options), inner, lanes=lanes)
