"""Row groups: row reductions and the elementwise computes over the same rows that read them
(softmax, log_softmax, layer norm), found so that a target can run each group as one kernel
per block of rows, the row kept in a cache, instead of one pass over memory per compute.

A group ends in one *output* compute of shape ``S = (*rows, L)`` (elementwise) and holds the
computes feeding it that only it (or other members) read, none a graph output, each one of:

- *full*: elementwise, shape ``S``;
- *row reduction*: one reduce axis of extent ``L``, shape ``rows`` or ``(*rows, 1)``;
- *per row*: elementwise, shape ``rows`` or ``(*rows, 1)`` (layer norm's mean).

Every load of a member by a member is *aligned*: its row indices are the reader's own row
axes, and a full member is read at the reader's lane (its last axis, or its reduce axis); a
per-row member is read at ``0`` or an axis of extent 1 after its rows. Tensors outside the
group are read as they are (placeholders, earlier computes). A group holds at least one row
reduction. Nothing here is target-specific: a target decides whether its rows fit its caches.

>>> from tilecraft import ops, te
>>> from tilecraft.graph import Graph
>>> x = te.placeholder((3, 7), name="x")
>>> [g.computes for g in row_groups(Graph.from_outputs([ops.softmax(x, name="y")]))]
[('y_max', 'y_sub', 'y_exp', 'y_sum', 'y')]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tilecraft.graph import Graph
from tilecraft.te.expr import Expr, IterVar, Reduce
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import is_const, loads_in

__all__ = ["RowGroup", "row_groups", "member_kind"]


@dataclass(frozen=True)
class RowGroup:
    """Computes (topological order, the output last) over ``rows`` rows of ``width``."""

    tensors: tuple[Tensor, ...]
    row_shape: tuple[int, ...]
    width: int

    @property
    def computes(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.tensors)

    @property
    def output(self) -> Tensor:
        return self.tensors[-1]

    @property
    def rows(self) -> int:
        return math.prod(self.row_shape)


def member_kind(tensor: Tensor, row_shape: tuple[int, ...], width: int) -> str | None:
    """``full``, ``reduce`` or ``row`` (module docstring), or ``None``."""
    shape = tuple(tensor.shape)
    body = tensor.op.body if tensor.op is not None else None
    if body is None:
        return None
    row_like = shape in (row_shape, (*row_shape, 1))
    if isinstance(body, Reduce):
        if row_like and len(tensor.reduce_axes) == 1 and tensor.reduce_axes[0].extent == width:
            return "reduce"
        return None
    if shape == (*row_shape, width):
        return "full"
    return "row" if row_like else None


def _lane(tensor: Tensor, kind: str) -> IterVar | None:
    if kind == "full":
        return tensor.axes[-1]
    return tensor.reduce_axes[0] if kind == "reduce" else None


def _aligned(index: tuple[Expr, ...], reader: Tensor, reader_kind: str, source_kind: str,
             nrows: int) -> bool:
    if len(index) < nrows or any(index[p] is not reader.axes[p] for p in range(nrows)):
        return False
    rest = index[nrows:]
    if source_kind == "full":
        lane = _lane(reader, reader_kind)
        return lane is not None and len(rest) == 1 and rest[0] is lane
    return all(is_const(e) or (isinstance(e, IterVar) and e.extent == 1) for e in rest)


def row_groups(graph: Graph, taken: set[str] | frozenset[str] = frozenset()) -> list[RowGroup]:
    """The row groups of ``graph`` (module docstring), none holding a compute in ``taken``."""
    computes = list(graph.computes)
    position = {t: p for p, t in enumerate(computes)}
    consumers = {t: set(graph.consumers(t)) for t in computes}
    outputs = set(graph.outputs)
    used = set(taken)
    groups: list[RowGroup] = []
    for out in reversed(computes):
        if out.name in used or out.op is None or isinstance(out.op.body, Reduce) \
                or len(out.shape) < 1:
            continue
        row_shape, width = tuple(out.shape[:-1]), out.shape[-1]
        kinds = {out: "full"}
        changed = True
        while changed:
            changed = False
            for member in list(kinds):
                for ld in loads_in(member.op.body):
                    p = ld.tensor
                    if p in kinds or p.is_placeholder or p not in position or p.name in used \
                            or p in outputs or not consumers[p] <= set(kinds):
                        continue
                    kind = member_kind(p, row_shape, width)
                    if kind is not None:
                        kinds[p] = kind
                        changed = True
        if not any(kind == "reduce" for kind in kinds.values()):
            continue
        nrows = len(row_shape)
        if not all(_aligned(tuple(ld.indices), member, kinds[member], kinds[ld.tensor], nrows)
                   for member in kinds for ld in loads_in(member.op.body)
                   if ld.tensor in kinds):
            continue
        members = tuple(sorted(kinds, key=position.__getitem__))
        used.update(t.name for t in members)
        groups.append(RowGroup(members, row_shape, width))
    return groups
