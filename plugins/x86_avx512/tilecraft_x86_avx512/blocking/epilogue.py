"""Elementwise epilogues fused into the contraction template: a GEMM or convolution ``C`` and the
one elementwise compute ``E`` that reads it (a bias and GELU, a residual add and ReLU, a
ReLU6) as one kernel.

The fusion planner (:mod:`tilecraft.fusion.planner`) calls such a consumer an epilogue: it
reads ``C`` only at its own index (``E[i, j] = f(C[i, j], bias[j], R[i, j])``). Run as a kernel
of its own it reads all of ``C`` back from memory (BERT's FFN GELU: 512 x 3072, 6 MB) after
the GEMM wrote it. Here the template's main kernel
(:func:`~.register_tiles.lower_contraction`, :func:`~.block_packed.lower_block_packed`)
computes ``E`` on each ``MC x NR`` block (the strips of one panel of a block of rows) right
after its last ``KC`` slice — while it is still in L2 — and stores ``E`` where ``C`` would have
been: ``C`` is never materialised and the consumer has no kernel of its own. Where the
reduction is one slice and A is read in place, the epilogue runs once per block of rows over
all the columns instead, after the block's last panel (:func:`whole_row_rows`: its other
operands, a residual, then stream row after row rather than ``NR`` columns a row stride
apart). (Per ``MI x NR``
register tile, in L1, is the other choice, ``Epilogue(per_tile=True)``: on BERT's FFN up GEMM
+ GELU, 512x768 -> 3072, 1 thread, same process alternating, Xeon family 6 model 167, load
~1.7, thread-time minima / medians: apart 20.7-20.9 / 22.1-23.2 ms, per block 20.6-20.8 /
21.4-21.9, per tile 21.5-21.8 / 22.4-23.0 — the GELU interleaved with the micro-kernel calls
cost more than it saved.)

What fuses (:func:`epilogue_problem` says why not otherwise): ``C`` a float32 contraction the
template runs itself (not a grouped or transposed convolution, not too small), not a graph
output and read by ``E`` alone; ``E`` elementwise (no reduction), none of ``C``'s operands among
its other inputs, and reading ``C`` either

- at its own index, in ``C``'s dtype: the micro-kernel accumulates into ``E``'s buffer over
  any number of ``KC`` slices and the epilogue runs after the last one; ``E``'s other inputs
  are read as ``[batch, M, N]`` views where their dimensions allow (a convolution's residual:
  contiguous along the tile's columns, no div/mod), else through their own indices; or
- through a one-to-one re-indexing that keeps the tile's rows contiguous (BERT's split into
  heads ``Q[h, s, d] = C[s, h*64 + d]``; not K's transposed ``[h, d, s]``, whose stores would
  scatter) or with a cast: the tile is accumulated in a local ``MI x NR`` buffer and each
  element written where ``E`` has it, per register tile — only when the reduction is one
  ``KC`` slice.

A shifted, padded or broadcast read (a convolution's pad, which reads neighbours' halo),
a reduction, or ``C`` read elsewhere too stays a kernel of its own.

>>> from tilecraft import ops, te
>>> from tilecraft.graph import Graph
>>> from tilecraft.lower.options import LoweringOptions
>>> A = te.placeholder((50, 40), name="A")
>>> B = te.placeholder((40, 30), name="B")
>>> bias = te.placeholder((30,), name="bias")
>>> C = ops.matmul(A, B, name="C")
>>> E = te.compute(C.shape, lambda i, j: te.max(C[i, j] + bias[j], 0.0), name="E")
>>> graph = Graph.from_outputs([E])
>>> [(c.name, e.name) for c, e in epilogue_pairs(graph)]
[('C', 'E')]
>>> kernels, _ = lower_with_epilogue(C, E, LoweringOptions(vector_lanes=16), 49152, 1 << 20, 1)
>>> [k.name for k in kernels], [p.name for p in kernels[-1].params]   # A and B read in place
(['E'], ['A', 'B', 'bias', 'E'])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from tilecraft.errors import LoweringError
from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import (
    Allocate,
    Buffer,
    BufferLoad,
    IfThenElse,
    Kernel,
    LoopKind,
    Stmt,
    Store,
)
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.col2im_gather import as_col2im_gather
from tilecraft.passes.contraction import Contraction, as_contraction
from tilecraft.te.expr import Binary, BinaryOp, Expr, IterVar, Load, Var, const
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import is_const, loads_in, transform
from tilecraft_x86_avx512.blocking.building import (
    kernel_expr,
    nest,
    unflatten,
    unique_params,
    unit_axes,
    vector_kind,
)
from tilecraft_x86_avx512.blocking.register_tiles import axis_groups_view

__all__ = ["EPILOGUE_BLOCK_L2_SHARE", "Epilogue", "at_own_index", "consumer_merges",
           "epilogue_pairs", "epilogue_problem", "epilogue_rows", "local_reason",
           "lower_with_epilogue", "template_contraction", "whole_row_rows"]


@dataclass(eq=False)
class Epilogue:
    """The elementwise consumer ``consumer`` of ``contraction``'s output, as the template's
    main kernel computes it on a finished tile; ``operands`` are the buffers of the other
    tensors it reads.

    When the consumer reads ``C`` at its own index and keeps its dtype, ``out`` is the
    consumer's buffer viewed ``[batch, M, N]``: the micro-kernel accumulates ``C`` into it
    over the ``KC`` slices and :meth:`tile` overwrites each tile with the consumer's values.
    Otherwise (a re-indexing such as BERT's split into heads, ``Q[h, s, d] = C[s, h*64 + d]``,
    or a cast) ``local`` is an ``MI x NR`` tile of ``C``'s dtype the micro-kernel accumulates
    into, and :meth:`tile` writes the consumer (``out``, its own shape) at the index each
    element of ``C`` goes to; the tile holds all of a product only with one ``KC`` slice
    (:meth:`check_slices`)."""

    contraction: Contraction
    consumer: Tensor
    options: LoweringOptions
    blocking: tuple[int, int] = (1, 1)   # (MI, NR): the local tile's size
    per_tile: bool = False               # same-index mode: per register tile, not per block
    whole_rows: bool = False             # per block: once over all N columns, not per panel
    out: Buffer = field(init=False)
    local: Buffer | None = field(init=False)
    operands: dict[Tensor, Buffer] = field(init=False)
    _groups: tuple[tuple[IterVar, ...], ...] = field(init=False)
    _viewed: set[Tensor] = field(init=False)
    _merges: list[list[IterVar]] | None = field(init=False)

    def __post_init__(self) -> None:
        c, e = self.contraction, self.consumer
        batch, m_total, n_total, _ = c.extents()
        level = self.options.param_level
        self.operands, self._viewed, self._groups = {}, set(), ()
        self._merges = None if local_reason(c, e) is None else consumer_merges(c, e)
        if self._merges is not None:
            mi, nr = self.blocking
            self.out = Buffer(e.name, tuple(e.shape), e.dtype, level=level)
            self.local = Buffer(f"{c.tensor.name}_etile", (1, mi, nr), c.tensor.dtype,
                                level=self.options.register_level or level)
            self.per_tile = True
        else:
            self.out = Buffer(e.name, (batch, m_total, n_total), e.dtype, level=level)
            self.local = None
            position = {axis: p for p, axis in enumerate(c.tensor.axes)}
            self._groups = tuple(tuple(e.axes[position[a]] for a in axes)
                                 for axes in (c.batch_axes, c.m_axes, c.n_axes))
        symbolic = (Var("b"), Var("m"), Var("n"))
        loads: dict[Tensor, list[Load]] = {}
        for ld in loads_in(e.op.body):
            if ld.tensor is not c.tensor:
                loads.setdefault(ld.tensor, []).append(ld)
        for tensor, reads in loads.items():
            views = [axis_groups_view(ld, self._with(symbolic), level) for ld in reads] \
                if self.local is None else [None]
            shapes = {None if v is None else v[0].shape for v in views}
            if None not in shapes and len(shapes) == 1:
                view = views[0]
                assert view is not None
                self.operands[tensor] = view[0]
                self._viewed.add(tensor)
            else:
                self.operands[tensor] = Buffer(tensor.name, tuple(tensor.shape), tensor.dtype,
                                               level=level)

    def _with(self, values: Sequence[Expr]) -> list[tuple[tuple[IterVar, ...], Expr]]:
        return list(zip(self._groups, values))

    def check_slices(self, k_blocks: int) -> None:
        """A local tile holds a whole product only when the reduction is one slice."""
        if self.local is not None and k_blocks > 1:
            raise LoweringError(
                f"epilogue {self.consumer.name} of {self.contraction.tensor.name}: a "
                f"re-indexing or casting epilogue needs the reduction in one KC slice, the "
                f"blocking cuts it into {k_blocks}")

    def accumulator(self, b_index: Expr, m0: Expr, n0: Expr) -> tuple[Buffer, tuple[Expr, ...]]:
        """Where the micro-kernel accumulates the tile at ``(m0, n0)``: the consumer's buffer
        at the tile, or the local tile."""
        if self.local is None:
            return self.out, (b_index, m0, n0)
        return self.local, (const(0), const(0), const(0))

    def wrap(self, stmt: Stmt) -> Stmt:
        """``stmt`` (one tile) with the local tile allocated around it (a stack slot)."""
        return stmt if self.local is None else Allocate(self.local, stmt)

    def _consumer_values(self, b: Expr, m: Expr, n: Expr) -> dict[IterVar, Expr]:
        """The consumer's axes at the element that ``C[b, m, n]`` goes to (local mode)."""
        c = self.contraction
        assert self._merges is not None
        c_values: dict[IterVar, Expr] = {}
        for axes, flat in ((c.batch_axes, b), (c.m_axes, m), (c.n_axes, n)):
            c_values.update(unflatten(flat, axes))
        values: dict[IterVar, Expr] = {}
        for axis, merged in zip(c.tensor.axes, self._merges):
            if merged:
                values.update(unflatten(c_values.get(axis, const(0)), merged))
        return values

    def store_value(self, b: Expr, m: Expr, n: Expr, value: Expr) -> Stmt:
        """The consumer's element of ``C[b, m, n]``, with ``value`` standing for ``C``'s
        (same-index mode: the transposed 1x1 path's tile, :mod:`.transposed_conv1x1`)."""
        return self._store(b, m, n, const(0), const(0), value)

    def _store(self, b: Expr, m: Expr, n: Expr, row: Expr, col: Expr,
               value_of_c: Expr | None = None) -> Stmt:
        """The consumer's element of ``C[b, m, n]`` (``row``, ``col`` of the local tile)."""
        c, e = self.contraction, self.consumer
        level = self.options.param_level
        groups = self._with((b, m, n))
        source = value_of_c if value_of_c is not None else \
            BufferLoad(self.out, (b, m, n)) if self.local is None else \
            BufferLoad(self.local, (const(0), row, col))

        def replace(node: Expr) -> Expr | None:
            if not isinstance(node, Load):
                return None
            if node.tensor is c.tensor:
                return source
            if node.tensor in self._viewed:
                found = axis_groups_view(node, groups, level)
                assert found is not None and isinstance(found[1], BufferLoad)
                return BufferLoad(self.operands[node.tensor], found[1].indices)
            return None

        if self.local is None:
            values: dict[IterVar, Expr] = {}
            for axes, flat in groups:
                values.update(unflatten(flat, axes))
            target: tuple[Expr, ...] = (b, m, n)
        else:
            values = self._consumer_values(b, m, n)
            target = tuple(values.get(a, const(0)) for a in e.axes)
        value = kernel_expr(transform(e.op.body, replace), values, self.operands,
                            extra_zero=unit_axes(e))
        return Store(self.out, target, simplify(value))

    def tile(self, b_index: Expr, m0: Expr, n0: Expr, rows: int, cols: int,
             options: LoweringOptions) -> Stmt:
        """The consumer over the ``rows x cols`` valid part of the tile at ``(m0, n0)`` of
        batch ``b_index``, vectorised along the columns (masked past ``cols``)."""
        row, col = Var("erow"), Var("ecol")
        lanes = max(1, options.lanes(self.contraction.tensor.dtype))
        return nest([(row, rows, LoopKind.SERIAL, 0), (col, cols, vector_kind(options), lanes)],
                    self._store(b_index, m0 + row, n0 + col, row, col))

    def block(self, b_index: Expr, m_start: Expr, rows: int, m_total: int, n0: Expr,
              n_total: int, nr: int, options: LoweringOptions) -> Stmt:
        """The consumer over the block of ``rows`` rows from ``m_start`` (those inside
        ``m_total``) and the ``nr`` columns from ``n0`` (those inside ``n_total``), in place:
        run once the block's last tile is final (same-index mode)."""
        row, col = Var("brow"), Var("bcol")
        lanes = max(1, options.lanes(self.contraction.tensor.dtype))
        m = m_start + row

        def columns(cols: int) -> Stmt:
            return nest([(col, cols, vector_kind(options), lanes)],
                        self._store(b_index, m, n0 + col, row, col))

        ragged = n_total % nr
        body = columns(nr) if not ragged else \
            IfThenElse(n0 + nr <= n_total, columns(nr), columns(ragged))
        if m_total % rows:
            body = IfThenElse(m < m_total, body)
        return nest([(row, rows, LoopKind.SERIAL, 0)], body)

    def kernel(self, tensor: Tensor, params: Sequence[Buffer], body: Stmt, micro_kernel: str,
               schedule: str, options: LoweringOptions) -> Kernel:
        """The main kernel, computing the consumer (the template's ``contraction_kernel``
        with the consumer's name, output and operands)."""
        e = self.consumer
        inputs = [p for p in params if p is not self.out]
        kernel = Kernel(e.name, tuple(unique_params([*inputs, *self.operands.values(),
                                                     self.out])),
                        (e.name,), body, attrs={
                            "compute": e.name, "statement": e.statement(),
                            "micro_kernel": micro_kernel, "fused": [tensor.name, e.name],
                            "schedule": f"{schedule}; epilogue {e.name} on each "
                                        + ("tile" if self.per_tile else
                                           "block of whole rows" if self.whole_rows else
                                           "block of rows")
                                        + " after its last k-slice"
                                        + ("" if self.local is None else " (local tile)")})
        verify_kernel(kernel, options.spec, check_bounds=False)  # see contraction_kernel
        return kernel


def _merged_axes(index: Expr) -> list[IterVar] | None:
    """The axes whose row-major merge ``index`` is (``i0 * 64 + i2`` -> ``[i0, i2]``; an
    extent-1 axis or 0 -> ``[]``), or ``None``."""
    if isinstance(index, IterVar):
        return [] if index.extent == 1 else [index]
    if is_const(index, 0):
        return []
    if isinstance(index, Binary) and index.op is BinaryOp.ADD:
        for high, low in ((index.a, index.b), (index.b, index.a)):
            low_axes = _merged_axes(low)
            if not low_axes:
                continue
            width = math.prod(a.extent for a in low_axes)
            if isinstance(high, Binary) and high.op is BinaryOp.MUL:
                for outer, scale in ((high.a, high.b), (high.b, high.a)):
                    if is_const(scale, width):
                        high_axes = _merged_axes(outer)
                        if high_axes:
                            return high_axes + low_axes
    return None


def consumer_merges(contraction: Contraction, consumer: Tensor) -> list[list[IterVar]] | None:
    """Per dimension of the contraction's output, the consumer's axes it is the row-major merge
    of, when the consumer reads it everywhere at one index that re-indexes it one to one (a
    split into heads, a transpose: ``Q[h, s, d] = C[s, h*64 + d]`` -> ``[[s], [h, d]]``);
    else ``None``."""
    c = contraction.tensor
    indices = {tuple(ld.indices) for ld in loads_in(consumer.op.body) if ld.tensor is c}
    if len(indices) != 1:
        return None
    (index,) = indices
    merges = [_merged_axes(i) for i in index]
    if any(m is None for m in merges):
        return None
    used = [a for m in merges for a in m]  # type: ignore[union-attr]
    wanted = [a for a in consumer.axes if a.extent > 1]
    if len(used) != len(set(used)) or set(used) != set(wanted):
        return None
    if any(math.prod(a.extent for a in m) != extent   # type: ignore[union-attr]
           for m, extent in zip(merges, c.shape)):
        return None
    return merges  # type: ignore[return-value]


def local_reason(contraction: Contraction, consumer: Tensor) -> str | None:
    """Why ``consumer`` cannot be computed in the consumer's own buffer (it re-indexes
    ``C`` or casts it: :class:`Epilogue`'s local mode), or ``None``."""
    c = contraction.tensor
    if consumer.dtype != c.dtype:
        return f"{consumer.name} is {consumer.dtype.value}, {c.name} {c.dtype.value}"
    if any(ld.tensor is c and not at_own_index(ld, consumer)
           for ld in loads_in(consumer.op.body)):
        return f"{consumer.name} reads {c.name} at another index than its own"
    return None


def template_contraction(tensor: Tensor) -> Contraction | None:
    """``tensor`` as the float32 contraction the x86 template lowers itself
    (:func:`~tilecraft_x86_avx512.gemm_template.lower_with_template` with no config), or
    ``None``: not a contraction, a grouped or transposed convolution (rewritten first), a
    col2im gather, or too small or narrow for the template."""
    from tilecraft_x86_avx512.conv_variants import template_view
    from tilecraft_x86_avx512.gemm_template import MIN_FLOPS, MIN_SIDE

    if tensor.is_placeholder or template_view(tensor) is not tensor or \
            as_col2im_gather(tensor) is not None:
        return None
    contraction = as_contraction(tensor, broadcast_batch=True)
    if contraction is None:
        return None
    _, rows, cols, _ = contraction.extents()
    if contraction.flops < MIN_FLOPS or min(rows, cols) < MIN_SIDE:
        return None
    return contraction


def epilogue_problem(contraction: Contraction, consumer: Tensor, graph: Graph) -> str | None:
    """Why ``consumer`` cannot run as ``contraction``'s epilogue (module docstring), or
    ``None`` when it can."""
    c, e = contraction.tensor, consumer
    if c in graph.outputs:
        return f"{c.name} is also a graph output, so it must be written whole"
    others = [t.name for t in graph.consumers(c) if t is not e]
    if others:
        return f"{c.name} is also read by {', '.join(others)}"
    if e.reduce_axes:
        return f"{e.name} is a reduction, an epilogue is elementwise"
    if local_reason(contraction, e) is not None:
        merges = consumer_merges(contraction, e)
        if merges is None:
            return (f"{e.name} reads {c.name} at another index than its own, and not as a one "
                    "to one re-indexing (a shifted or padded read needs neighbouring tiles)")
        inner = [a for a in e.axes if a.extent > 1][-1:]
        last = [m for m, extent in zip(merges, c.shape) if extent > 1][-1:]
        if inner and (not last or last[0][-1] is not inner[0]):
            # BERT's K split [h, d, s]: 16-lane scatters along the tile's columns, measured
            # slower than the separate pass (512x768x768 + split, 1 thread: 5.66 -> 6.04 ms)
            return (f"{e.name} transposes {c.name}: the tile's rows would be stored with a "
                    "stride (scatters cost more than the pass they save)")
    operands = {contraction.a.tensor, contraction.b.tensor}
    for ld in loads_in(e.op.body):
        if ld.tensor in operands:
            return f"{e.name} also reads {ld.tensor.name}, an operand of {c.name}"
    return None


def at_own_index(load: Load, consumer: Tensor) -> bool:
    """Whether ``load`` reads its tensor at ``consumer``'s own index: each index is the
    consumer's axis at that position, or 0 (or an axis of extent 1) where that axis has
    extent 1 (``C[0, k, h, w]`` in a batch-1 network)."""
    if len(load.indices) != len(consumer.axes):
        return False
    for index, axis in zip(load.indices, consumer.axes):
        if index is axis:
            continue
        if axis.extent == 1 and (is_const(index, 0) or
                                 (isinstance(index, IterVar) and index.extent == 1)):
            continue
        return False
    return True


def epilogue_pairs(graph: Graph, taken: set[str] | frozenset[str] = frozenset(),
                   notes: list[str] | None = None) -> list[tuple[Tensor, Tensor]]:
    """``(contraction, consumer)`` pairs of ``graph`` that fuse (:func:`epilogue_problem`),
    none in ``taken``; a consumer reading several template contractions takes the latest one
    that qualifies. Why a template contraction's reader does not fuse goes to ``notes``."""
    pairs: list[tuple[Tensor, Tensor]] = []
    used = set(taken)
    for consumer in graph.computes:
        if consumer.name in used or consumer.op is None:
            continue
        producers = list(dict.fromkeys(ld.tensor for ld in loads_in(consumer.op.body)
                                       if not ld.tensor.is_placeholder))
        for producer in reversed(producers):
            if producer.name in used:
                continue
            contraction = template_contraction(producer)
            if contraction is None:
                continue
            problem = epilogue_problem(contraction, consumer, graph)
            if problem is None:
                pairs.append((producer, consumer))
                used.update((producer.name, consumer.name))
                break
            if notes is not None:
                notes.append(f"epilogue {consumer.name} of {producer.name} not fused: "
                             f"{problem}")
    return pairs


#: the share of L2 the block of C an epilogue re-reads may take (:func:`epilogue_rows`)
EPILOGUE_BLOCK_L2_SHARE = 8


def epilogue_rows(mc: int, mi: int, nr: int, l2_bytes: int) -> int:
    """``MC`` for a contraction with an epilogue run per block: at most the rows whose
    ``MC x NR`` block of C (which the epilogue reads back after the block's last tile) fills an
    eighth of L2, so it is still there (ResNet's stage-1 1x1 convolutions with a residual
    epilogue, K = 64, had their 3136 rows in one block: 800 KB of C). Whole networks, same
    process, Xeon family 6 model 167, no cap -> an eighth: ResNet-50 58.42 -> 57.69 and 57.73
    -> 57.09 ms (1 thread), 31.00 -> 31.14 (2); MobileNet-V2 7.12 -> 6.92, 7.08 -> 6.99 (1),
    4.55 -> 4.54 (2); ResNet-18 25.78 -> 25.75 (1).

    >>> epilogue_rows(3138, 6, 64, 1 << 21), epilogue_rows(516, 6, 64, 1 << 21)
    (1020, 516)
    """
    most = (l2_bytes // EPILOGUE_BLOCK_L2_SHARE) // (4 * nr) // mi * mi
    return min(mc, max(mi, most)) // mi * mi


def whole_row_rows(mc: int, mi: int, n_total: int, k_total: int, nr: int,
                   l2_bytes: int) -> int | None:
    """``MC`` for an epilogue run once per block over all ``n_total`` columns, after the
    block's last panel (:attr:`Epilogue.whole_rows`), or ``None`` where that form does not fit:
    the block's ``MC x N`` of C takes at most an eighth of L2 and, with every panel of B
    (``k_total x N``, one reduction slice), at most half of it, the panels being re-read from
    L2 for each block. Per panel, the epilogue reads its other operands ``NR`` columns at a
    time, a row stride apart (a residual ``[pixels, channels]``: 4 cache lines every 1-2 KB,
    a pattern the hardware prefetcher does not follow); over whole rows it reads them as one
    stream. ResNet-50's stage-1 and stage-2 1x1 convolutions with a residual add and ReLU (K =
    64 / 128, N = 256 / 512), per panel -> whole rows, 1 thread, Xeon family 6 model 167:
    0.96 / 0.88 / 0.85 -> 0.82 / 0.82 / 0.76 ms and 0.82 -> 0.70 ms; its stage 3 (K = 256, N =
    1024: 60 rows a block, the panels 1 MB) ran 0.72 -> 0.75-0.80 ms, which the half of L2
    excludes. The whole network, same process alternating: 60.27 -> 58.95 and 58.61 -> 58.00
    ms (1 thread), 33.24 -> 32.24 (2); MobileNet-V2 (its 7x7 projections, one panel) and
    ResNet-18 (no such kernel) unchanged within 1.5 %.

    >>> whole_row_rows(3138, 6, 256, 64, 64, 1 << 21), whole_row_rows(786, 6, 512, 128, 64, 1 << 21)
    (252, 126)
    >>> whole_row_rows(198, 6, 1024, 256, 64, 1 << 21) is None
    True
    """
    rows = (l2_bytes // EPILOGUE_BLOCK_L2_SHARE) // (4 * n_total) // mi * mi
    panels_bytes = 4 * k_total * -(-n_total // nr) * nr
    if rows < mi or panels_bytes + 4 * rows * n_total > l2_bytes // 2:
        return None
    return max(mi, min(mc, rows) // mi * mi)


def lower_with_epilogue(tensor: Tensor, consumer: Tensor, options: LoweringOptions,
                        l1_bytes: int, l2_bytes: int, threads: int
                        ) -> tuple[list[Kernel] | None, str]:
    """The template's kernels of the contraction ``tensor`` with its default parameters
    (:func:`~tilecraft_x86_avx512.gemm_template.default_config`), the last one computing
    ``consumer`` as the epilogue of each tile (B packed per block inside the kernel where the
    template would, else by a kernel of its own); or ``None`` and why (a local-tile epilogue
    whose reduction the blocking cuts into several ``KC`` slices)."""
    from tilecraft_x86_avx512.blocking import amx_split, split_k
    from tilecraft_x86_avx512.blocking.amx_split import amx_split_applies
    from tilecraft_x86_avx512.blocking.block_packed import lower_block_packed
    from tilecraft_x86_avx512.blocking.direct_conv import lower_direct_config, prefers_direct
    from tilecraft_x86_avx512.blocking.direct_nhwc import (
        lower_direct_nhwc_config,
        prefers_direct_nhwc,
    )
    from tilecraft_x86_avx512.blocking.register_tiles import Blocking, lower_contraction
    from tilecraft_x86_avx512.blocking.transposed_conv1x1 import (
        lower_transposed_config,
        prefers_transposed,
    )
    from tilecraft_x86_avx512.blocking.winograd import lower_winograd, prefers_winograd
    from tilecraft_x86_avx512.gemm_template import default_config
    from tilecraft_x86_avx512.microkernels import OUTER_PRODUCT_F32, OUTER_PRODUCT_F32_ROWS

    contraction = as_contraction(tensor, broadcast_batch=True)
    assert contraction is not None, f"{tensor.name} is not a contraction"
    chosen = default_config(contraction, l1_bytes, l2_bytes, threads)
    mi = chosen["MI"]
    _, _, n_total, k_total = contraction.extents()
    # the rows path (A read in place, B packed first) with one reduction slice: the epilogue
    # over whole rows of the block where they fit (whole_row_rows), else per panel
    whole = whole_row_rows(chosen["MC"], mi, n_total, k_total, chosen["NR"], l2_bytes) \
        if not chosen.get("PACK_A", 1) and not chosen.get("NC", 0) \
        and k_total <= chosen["KC"] else None
    blocking = Blocking(mi=mi, nr=chosen["NR"], kc=chosen["KC"],
                        mc=whole or max(mi, epilogue_rows(chosen["MC"], mi, chosen["NR"],
                                                          l2_bytes)),
                        pack_a=bool(chosen.get("PACK_A", 1)),
                        pack_b=bool(chosen.get("PACK_B", 1)))
    OUTER_PRODUCT_F32.resolve({"MI": mi, "NR": blocking.nr})
    epilogue = Epilogue(contraction, consumer, options, (mi, blocking.nr))
    try:
        if prefers_winograd(contraction):
            winograd = lower_winograd(contraction, options, l1_bytes, l2_bytes, threads,
                                      epilogue=epilogue)
            if winograd is not None:
                return winograd, ""
        if prefers_direct(contraction, l2_bytes):
            direct = lower_direct_config(contraction, {}, options, threads, epilogue=epilogue,
                                         l1_bytes=l1_bytes)
            if direct is not None:
                return direct, ""
        if prefers_direct_nhwc(contraction):
            direct = lower_direct_nhwc_config(contraction, {}, options, threads,
                                              epilogue=epilogue, l1_bytes=l1_bytes,
                                              l2_bytes=l2_bytes)
            if direct is not None:
                return direct, ""
        if split_k.SPLIT_K and epilogue.local is None \
                and split_k.prefers_split_k(contraction, threads):
            return split_k.lower_split_k(contraction, options, threads, mi, chosen["NR"],
                                         chosen["KC"], epilogue), ""
        if prefers_transposed(contraction, l2_bytes, threads):
            transposed = lower_transposed_config(contraction, {}, options, l2_bytes, threads,
                                                 epilogue=epilogue)
            if transposed is not None:
                return transposed, ""
        if amx_split_applies(contraction, options):
            tile = (amx_split.TILE, amx_split.TILE)
            amx_epilogue = Epilogue(contraction, consumer, options, tile)
            if amx_split.takes_epilogue(contraction, amx_epilogue, l2_bytes):
                return amx_split.lower_amx_split(contraction, options, l2_bytes, threads,
                                                 amx_epilogue), ""
        if chosen.get("NC", 0) > 0 and not blocking.pack_a:
            kernels = lower_block_packed(contraction, OUTER_PRODUCT_F32_ROWS.name, blocking,
                                         int(chosen["NC"]), options, epilogue=epilogue)
            if kernels is not None:
                return kernels, ""
        epilogue.whole_rows = whole is not None   # lower_contraction clears it where unused
        return lower_contraction(contraction, OUTER_PRODUCT_F32.name, blocking, options,
                                 rows_micro_kernel=OUTER_PRODUCT_F32_ROWS.name,
                                 epilogue=epilogue), ""
    except LoweringError as err:
        return None, str(err)
