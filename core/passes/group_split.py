"""Split a grouped output axis ``k = g * Kg + kk`` into two axes, so a grouped convolution
becomes a batched contraction with the group as its batch axis.

A grouped convolution reads its input channel as ``(k // Kg) * Cg + rc``: the output channel
``k`` carries both the group and the channel inside the group, and the group indexes both
operands (the input through ``k // Kg``, the weights through ``k`` itself).
:func:`~tilecraft.passes.contraction.as_contraction` sorts axes by which operands they index,
so it cannot see this compute as a matrix product. :func:`split_grouped_axis` builds the equivalent
compute over ``(g, kk)``:

- the output axis ``k`` (extent ``K``) becomes ``g`` (extent ``K / Kg``) and ``kk`` (``Kg``),
  where ``Kg`` is the divisor the body uses in ``k // Kg`` or ``k % Kg``;
- the body is rewritten with ``k = g * Kg + kk``, and ``(g * Kg + kk) // Kg`` simplified to
  ``g``, ``(g * Kg + kk) % Kg`` to ``kk``;
- an operand dimension indexed by ``a * c + b`` (``a``, ``b`` axes, ``b`` of extent ``c``,
  the dimension of extent ``a.extent * c``) is split into two dimensions indexed by ``a`` and
  ``b``: the load reads a *view* of the same tensor — a placeholder of the same name and a
  shape of the same size and row-major order, which the runtime and the Kernel IR interpreter
  pass by reshaping the array (as a target's lowering of a contraction views its output as
  ``[batch, M, N]``).

The split compute writes the same memory as the original: its output has the original's name
and shape with ``K`` replaced by ``(K / Kg, Kg)``. A convolution with ``groups=G`` becomes
``y[n, g, kk, h, w] = sum(x[n, g, rc, h + rh, w + rw] * w[g, kk, rc, rh, rw])``: batch ``g``,
rows ``kk`` (the weights, row-major ``[G, Kg, Cg*R*S]``), columns ``(h, w)`` (the input's
im2col per group).

>>> from tilecraft import ops, te
>>> x = te.placeholder((1, 6, 5, 5), name="x")
>>> w = te.placeholder((4, 3, 3, 3), name="w")
>>> y = split_grouped_axis(ops.conv2d(x, w, groups=2, name="y"))
>>> print(y.statement())
y[n, g, k, h, w] = sum(x[n, g, rc, (h + rh), (w + rw)] * w[g, k, rc, rh, rw],
    axis=[rc, rh, rw])
>>> y.shape, [t.shape for t in y.inputs]
((1, 2, 2, 3, 3), [(1, 2, 3, 5, 5), (2, 2, 3, 3, 3)])
"""

from __future__ import annotations

from collections.abc import Sequence

from tilecraft.te.expr import AxisKind, Binary, BinaryOp, Const, Expr, IterVar, Load
from tilecraft.te.tensor import ComputeOp, PlaceholderOp, Tensor
from tilecraft.te.validate import check_compute
from tilecraft.te.visit import loads_in, substitute, transform, walk

#: a split dimension: (outer axis, inner axis); None keeps the dimension
DimSplit = tuple[IterVar, IterVar] | None


def group_divisor(tensor: Tensor, axis: IterVar) -> int | None:
    """The ``Kg`` of ``axis // Kg`` or ``axis % Kg`` in ``tensor``'s body (``Kg`` divides the
    axis's extent and is smaller), when exactly one such divisor occurs; else ``None``."""
    found = set()
    for node in walk(tensor.body):
        if (isinstance(node, Binary) and node.op in (BinaryOp.FLOORDIV, BinaryOp.MOD)
                and node.a == axis and isinstance(node.b, Const)):
            divisor = int(node.b.value)
            if 0 < divisor < axis.extent and axis.extent % divisor == 0:
                found.add(divisor)
    return found.pop() if len(found) == 1 else None


def split_grouped_axis(tensor: Tensor) -> Tensor | None:
    """The equivalent compute with the first grouped output axis split into ``(g, kk)`` (see
    the module docstring), or ``None`` when ``tensor`` has no output axis used as
    ``axis // Kg`` / ``axis % Kg``."""
    if tensor.is_placeholder:
        return None
    for position, axis in enumerate(tensor.axes):
        divisor = group_divisor(tensor, axis)
        if divisor is not None:
            return _split(tensor, position, divisor)
    return None


def _split(tensor: Tensor, position: int, divisor: int) -> Tensor:
    axis = tensor.axes[position]
    group = IterVar("g", axis.extent // divisor, AxisKind.SPATIAL)
    inner = IterVar(axis.name, divisor, AxisKind.SPATIAL)
    flat = group * divisor + inner

    def simplify(node: Expr) -> Expr | None:
        if isinstance(node, Binary) and node.a == flat and node.b == Const(divisor, flat.dtype):
            if node.op is BinaryOp.FLOORDIV:
                return group
            if node.op is BinaryOp.MOD:
                return inner
        return None

    body = transform(substitute(tensor.body, {axis: flat}), simplify)
    body = _view_operands(body)
    axes = (*tensor.axes[:position], group, inner, *tensor.axes[position + 1:])
    shape = (*tensor.shape[:position], group.extent, divisor, *tensor.shape[position + 1:])
    check_compute(tensor.name, axes, body)
    return Tensor(tensor.name, shape, tensor.dtype, ComputeOp(axes, body))


def _dim_split(index: Expr, extent: int) -> DimSplit:
    """``(a, b)`` when ``index`` is ``a * c + b`` over axes with ``b.extent == c`` and
    ``a.extent * c == extent`` (the row-major flat index of a ``(a, b)`` pair)."""
    if not (isinstance(index, Binary) and index.op is BinaryOp.ADD
            and isinstance(index.a, Binary) and index.a.op is BinaryOp.MUL):
        return None
    outer, scale, inner = index.a.a, index.a.b, index.b
    if not (isinstance(outer, IterVar) and isinstance(inner, IterVar)
            and isinstance(scale, Const)):
        return None
    if inner.extent != scale.value or outer.extent * inner.extent != extent:
        return None
    return outer, inner


def _plan(loads: Sequence[Load]) -> tuple[bool, ...] | None:
    """Which dimensions every load of one tensor splits (the same for all of them), or
    ``None`` when the loads disagree or none splits anything."""
    plans = {tuple(_dim_split(i, e) is not None for i, e in zip(load.indices, load.tensor.shape))
             for load in loads}
    if len(plans) != 1:
        return None
    plan = plans.pop()
    return plan if any(plan) else None


def _view_operands(body: Expr) -> Expr:
    """``body`` with each operand dimension indexed by a flat ``a * c + b`` read through a
    split view of its tensor (see the module docstring)."""
    by_tensor: dict[int, list[Load]] = {}
    for load in loads_in(body):
        by_tensor.setdefault(id(load.tensor), []).append(load)
    views: dict[int, tuple[Tensor, tuple[bool, ...]]] = {}
    for key, loads in by_tensor.items():
        plan = _plan(loads)
        if plan is None:
            continue
        source = loads[0].tensor
        shape: list[int] = []
        for split, index, extent in zip(plan, loads[0].indices, source.shape):
            pair = _dim_split(index, extent) if split else None
            shape.extend((pair[0].extent, pair[1].extent) if pair is not None else (extent,))
        views[key] = (Tensor(source.name, tuple(shape), source.dtype, PlaceholderOp()), plan)

    def rewrite(node: Expr) -> Expr | None:
        if not isinstance(node, Load) or id(node.tensor) not in views:
            return None
        view, plan = views[id(node.tensor)]
        indices: list[Expr] = []
        for split, index, extent in zip(plan, node.indices, node.tensor.shape):
            pair = _dim_split(index, extent) if split else None
            indices.extend(pair if pair is not None else (index,))
        return Load(view, tuple(indices))

    return transform(body, rewrite)


__all__ = ["group_divisor", "split_grouped_axis"]
