"""The small helpers every blocking module builds its Kernel IR with: loop nests and loop kinds,
flat indices of fused axis groups, te expressions as Kernel IR, and the finished kernel of a
contraction.

>>> from tilecraft.lower.options import LoweringOptions
>>> from tilecraft.te.expr import AxisKind, IterVar, Var
>>> i, j = IterVar("i", 3, AxisKind.SPATIAL), IterVar("j", 5, AxisKind.SPATIAL)
>>> ceil_div(10, 4), product_of([i, j])
(3, 15)
>>> {axis.name: str(value) for axis, value in unflatten(Var("f"), [i, j]).items()}
{'j': '(f % 5)', 'i': '(f // 5)'}
>>> options = LoweringOptions(vector_lanes=4, cores=2)
>>> parallel_kind(options, 8).value, parallel_kind(options, 1).value, vector_kind(options).value
('parallel', 'serial', 'vector')
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence, Set

from tilecraft.kernel_ir.nodes import Buffer, For, Kernel, LoopKind, Stmt
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower.compute import to_kernel_expr
from tilecraft.lower.options import LoweringOptions
from tilecraft.te.expr import Expr, IterVar, Load, Var, const
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import loads_in, substitute, transform, vars_in

#: one loop of :func:`nest`: (variable, extent, kind, vector lanes)
LoopSpec = tuple[Var, int, LoopKind, int]


def ceil_div(a: int, b: int) -> int:
    """``a / b`` rounded up."""
    return -(-a // b)


def product_of(axes: Sequence[IterVar]) -> int:
    """The product of the axes' extents (1 for none)."""
    total = 1
    for axis in axes:
        total *= axis.extent
    return total


def unflatten(flat: Expr, axes: Sequence[IterVar]) -> dict[IterVar, Expr]:
    """Each axis of a fused group as an expression of the group's flat (row-major) index."""
    values: dict[IterVar, Expr] = {}
    inner = 1
    for position in range(len(axes) - 1, -1, -1):
        axis = axes[position]
        value = flat // inner if inner > 1 else flat
        if position > 0:
            value = value % axis.extent
        values[axis] = value
        inner *= axis.extent
    return values


def axes_in(load: Load) -> set[IterVar]:
    """The axes ``load``'s index expressions use."""
    found: set[IterVar] = set()
    for index in load.indices:
        found |= {v for v in vars_in(index) if isinstance(v, IterVar)}
    return found


def unit_axes(tensor: Tensor) -> list[IterVar]:
    """``tensor``'s spatial and reduce axes of extent 1 (indexed by 0 wherever they occur)."""
    return [a for a in (*tensor.axes, *tensor.reduce_axes) if a.extent == 1]


def without_unit_taps(load: Load, kept: Collection[IterVar] = ()) -> Load:
    """``load`` with each extent-1 axis not in ``kept`` read as index 0 and the indices
    simplified: a 1x1 window's taps, ``x[n, c, h + rh, w + rw]``, become ``x[n, c, h, w]``, so
    the load's dimensions are plain axes again (what :func:`axis_groups_view` matches)."""
    unit = transform(load, lambda e: const(0) if isinstance(e, IterVar) and e.extent == 1
                     and e not in kept else None)
    assert isinstance(unit, Load)
    return Load(unit.tensor, tuple(simplify(index) for index in unit.indices))


def kernel_expr(expr: Expr, values: Mapping[IterVar, Expr], buffers: Mapping[Tensor, Buffer],
                extra_zero: Sequence[IterVar] = ()) -> Expr:
    """``expr`` (te) as a Kernel IR expression: axes replaced by ``values`` (the ``extra_zero``
    axes by 0 where ``values`` lacks them), loads by loads of ``buffers``."""
    mapping = dict(values)
    for axis in extra_zero:
        mapping.setdefault(axis, const(0))
    return to_kernel_expr(expr, mapping, buffers)


def inline_loads(expr: Expr, inlined: Set[Tensor]) -> Expr:
    """``expr`` with every load of a compute in ``inlined`` replaced by that compute's body at
    the load's indices, recursively (a fused kernel computes those values where they are read).

    >>> from tilecraft import te
    >>> a = te.placeholder((4,), name="a")
    >>> b = te.compute((4,), lambda i: a[i] * 2.0, name="b")
    >>> c = te.compute((4,), lambda i: b[i] + 1.0, name="c")
    >>> from tilecraft.te.printer import expr_to_str
    >>> expr_to_str(inline_loads(c.op.body, {b}))
    '((a[i] * 2.0) + 1.0)'
    """
    def inline(node: Expr) -> Expr | None:
        if isinstance(node, Load) and node.tensor in inlined:
            producer = node.tensor
            return substitute(inline_loads(producer.op.body, inlined),
                              dict(zip(producer.axes, node.indices)))
        return None

    return transform(expr, inline)


def nest(loops: Sequence[LoopSpec], body: Stmt) -> Stmt:
    """``body`` inside ``loops``, the first outermost."""
    for var, extent, kind, lanes in reversed(loops):
        body = For(var, const(extent), kind, body, lanes=lanes)
    return body


def parallel_kind(options: LoweringOptions, extent: int) -> LoopKind:
    """PARALLEL for a loop of ``extent`` > 1 where the options allow it, else SERIAL."""
    if options.parallel and options.allows(LoopKind.PARALLEL) and extent > 1:
        return LoopKind.PARALLEL
    return LoopKind.SERIAL


def vector_kind(options: LoweringOptions) -> LoopKind:
    """VECTOR where the options allow it, else SERIAL."""
    if options.vectorize and options.allows(LoopKind.VECTOR):
        return LoopKind.VECTOR
    return LoopKind.SERIAL


def unique_params(buffers: Sequence[Buffer]) -> list[Buffer]:
    """``buffers`` without repeated names, the first of each kept (an operand read twice is
    one parameter)."""
    seen: dict[str, Buffer] = {}
    for buffer in buffers:
        seen.setdefault(buffer.name, buffer)
    return list(seen.values())


def topological_order(computes: Sequence[Tensor], ref: Tensor) -> list[Tensor] | None:
    """``computes`` (without repeats) in an order where each comes after the computes it reads,
    given that ``ref`` is computed first; ``None`` when one of them reads a compute that is
    neither ``ref`` nor among them."""
    remaining, done, order = list(dict.fromkeys(computes)), {ref}, []
    while remaining:
        ready = next((t for t in remaining
                      if all(ld.tensor in done or ld.tensor.is_placeholder
                             for ld in loads_in(t.op.body))), None)
        if ready is None:
            return None
        order.append(ready)
        done.add(ready)
        remaining.remove(ready)
    return order


def contraction_kernel(tensor: Tensor, params: Sequence[Buffer], body: Stmt, micro_kernel: str,
                       schedule: str, options: LoweringOptions) -> Kernel:
    """The kernel computing ``tensor`` with ``body``, its attributes naming the micro-kernel
    and the ``schedule`` (one line for the report), verified."""
    kernel = Kernel(tensor.name, tuple(unique_params(params)), (tensor.name,), body,
                    attrs={"compute": tensor.name, "statement": tensor.statement(),
                           "schedule": schedule, "micro_kernel": micro_kernel})
    # tiles are kept in bounds by the whole-tile / edge conditions around them, which the
    # verifier's interval analysis does not use; the interpreter checks every access instead
    verify_kernel(kernel, options.spec, check_bounds=False)
    return kernel


__all__ = ["LoopSpec", "axes_in", "ceil_div", "contraction_kernel", "kernel_expr", "nest",
           "parallel_kind", "product_of", "topological_order", "unflatten", "unique_params",
           "unit_axes", "vector_kind", "without_unit_taps"]
