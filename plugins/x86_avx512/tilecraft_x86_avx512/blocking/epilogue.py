"""Elementwise epilogues fused into the contraction template: a GEMM or convolution ``C`` and the
one elementwise compute ``E`` that reads it (a bias and GELU, a residual add and ReLU, a
ReLU6) as one kernel.

The fusion planner (:mod:`tilecraft.fusion.planner`) calls such a consumer an epilogue: it
reads ``C`` only at its own index (``E[i, j] = f(C[i, j], bias[j], R[i, j])``). Run as a kernel
of its own it reads all of ``C`` back from memory (BERT's FFN GELU: 512 x 3072, 6 MB) after
the GEMM wrote it. Here the template's main kernel
(:func:`~.register_tiles.lower_contraction`, :func:`~.block_packed.lower_block_packed`)
computes ``E`` on each ``MI x NR`` register tile right after the tile's last ``KC`` slice —
while it is still in L1 — and stores ``E`` where ``C`` would have been: ``C`` is never
materialised and the consumer has no kernel of its own.

What fuses (:func:`epilogue_problem` says why not otherwise): ``C`` a float32 contraction the
template runs itself (not a grouped or transposed convolution, not too small), not a graph
output and read by ``E`` alone; ``E`` elementwise (no reduction) of ``C``'s shape and dtype
(the tile accumulates in ``E``'s buffer, so a cast would change the partial sums), every load
of ``C`` at ``E``'s own index, and none of ``C``'s operands among its other inputs. Those
other inputs are read as ``[batch, M, N]`` views where their dimensions allow (a residual of a
convolution: contiguous along the tile's columns, no div/mod), else through their own indices.

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
>>> kernels = lower_with_epilogue(C, E, LoweringOptions(vector_lanes=16), 49152, 1 << 20, 1)
>>> [k.name for k in kernels], [p.name for p in kernels[-1].params]
(['C_bpacked_pack', 'E'], ['A', 'C_bpacked', 'bias', 'E'])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tilecraft.graph import Graph
from tilecraft.kernel_ir.nodes import Buffer, BufferLoad, Kernel, LoopKind, Stmt, Store
from tilecraft.kernel_ir.simplify import simplify
from tilecraft.kernel_ir.verify import verify_kernel
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.col2im_gather import as_col2im_gather
from tilecraft.passes.contraction import Contraction, as_contraction
from tilecraft.te.expr import Expr, IterVar, Load, Var
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

__all__ = ["Epilogue", "epilogue_pairs", "epilogue_problem", "lower_with_epilogue",
           "template_contraction"]


@dataclass(eq=False)
class Epilogue:
    """The elementwise consumer ``consumer`` of ``contraction``'s output, as the template's
    main kernel computes it on a finished tile: ``out`` is the consumer's buffer viewed
    ``[batch, M, N]`` (the micro-kernel accumulates ``C`` into it, :meth:`tile` overwrites it
    with the consumer's values), ``operands`` the buffers of the other tensors it reads."""

    contraction: Contraction
    consumer: Tensor
    options: LoweringOptions
    out: Buffer = field(init=False)
    operands: dict[Tensor, Buffer] = field(init=False)
    _groups: tuple[tuple[IterVar, ...], ...] = field(init=False)
    _viewed: set[Tensor] = field(init=False)

    def __post_init__(self) -> None:
        c, e = self.contraction, self.consumer
        batch, m_total, n_total, _ = c.extents()
        level = self.options.param_level
        self.out = Buffer(e.name, (batch, m_total, n_total), e.dtype, level=level)
        position = {axis: p for p, axis in enumerate(c.tensor.axes)}
        self._groups = tuple(tuple(e.axes[position[a]] for a in axes)
                             for axes in (c.batch_axes, c.m_axes, c.n_axes))
        self.operands, self._viewed = {}, set()
        symbolic = (Var("b"), Var("m"), Var("n"))
        loads: dict[Tensor, list[Load]] = {}
        for ld in loads_in(e.op.body):
            if ld.tensor is not c.tensor:
                loads.setdefault(ld.tensor, []).append(ld)
        for tensor, reads in loads.items():
            views = [axis_groups_view(ld, self._with(symbolic), level) for ld in reads]
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

    def value(self, b: Expr, m: Expr, n: Expr) -> Expr:
        """The consumer's element ``(b, m, n)`` (flat batch, row and column of the tile), ``C``
        read from :attr:`out`."""
        c, e = self.contraction, self.consumer
        groups = self._with((b, m, n))
        level = self.options.param_level

        def replace(node: Expr) -> Expr | None:
            if not isinstance(node, Load):
                return None
            if node.tensor is c.tensor:
                return BufferLoad(self.out, (b, m, n))
            if node.tensor in self._viewed:
                found = axis_groups_view(node, groups, level)
                assert found is not None and isinstance(found[1], BufferLoad)
                return BufferLoad(self.operands[node.tensor], found[1].indices)
            return None

        values: dict[IterVar, Expr] = {}
        for axes, flat in groups:
            values.update(unflatten(flat, axes))
        return kernel_expr(transform(e.op.body, replace), values, self.operands,
                           extra_zero=unit_axes(e))

    def tile(self, b_index: Expr, m0: Expr, n0: Expr, rows: int, cols: int,
             options: LoweringOptions) -> Stmt:
        """The consumer over the ``rows x cols`` valid part of the tile at ``(m0, n0)`` of
        batch ``b_index``, in place, vectorised along the columns (masked past ``cols``)."""
        row, col = Var("erow"), Var("ecol")
        lanes = max(1, options.lanes(self.out.dtype))
        value = self.value(b_index, m0 + row, n0 + col)
        return nest([(row, rows, LoopKind.SERIAL, 0), (col, cols, vector_kind(options), lanes)],
                    Store(self.out, (b_index, m0 + row, n0 + col), simplify(value)))

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
                            "schedule": f"{schedule}; epilogue {e.name} on each tile after "
                                        "its last k-slice"})
        verify_kernel(kernel, options.spec, check_bounds=False)  # see contraction_kernel
        return kernel


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
    if tuple(e.shape) != tuple(c.shape):
        return f"{e.name}'s shape {tuple(e.shape)} is not {c.name}'s {tuple(c.shape)}"
    if e.dtype != c.dtype:
        return (f"{e.name} is {e.dtype.value}, {c.name} {c.dtype.value}: the tile accumulates "
                f"in {e.name}'s buffer")
    operands = {contraction.a.tensor, contraction.b.tensor}
    for ld in loads_in(e.op.body):
        if ld.tensor is c and not _at_own_index(ld, e):
            return (f"{e.name} reads {c.name} at another index than its own (a shifted or "
                    "transposed read needs neighbouring tiles)")
        if ld.tensor in operands:
            return f"{e.name} also reads {ld.tensor.name}, an operand of {c.name}"
    return None


def _at_own_index(load: Load, consumer: Tensor) -> bool:
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


def lower_with_epilogue(tensor: Tensor, consumer: Tensor, options: LoweringOptions,
                        l1_bytes: int, l2_bytes: int, threads: int) -> list[Kernel]:
    """The template's kernels of the contraction ``tensor`` with its default parameters
    (:func:`~tilecraft_x86_avx512.gemm_template.default_config`), the last one computing
    ``consumer`` as the epilogue of each tile (B packed per block inside the kernel where the
    template would, else by a kernel of its own)."""
    from tilecraft_x86_avx512.blocking.block_packed import lower_block_packed
    from tilecraft_x86_avx512.blocking.register_tiles import Blocking, lower_contraction
    from tilecraft_x86_avx512.gemm_template import default_config
    from tilecraft_x86_avx512.microkernels import OUTER_PRODUCT_F32, OUTER_PRODUCT_F32_ROWS

    contraction = as_contraction(tensor, broadcast_batch=True)
    assert contraction is not None, f"{tensor.name} is not a contraction"
    chosen = default_config(contraction, l1_bytes, l2_bytes, threads)
    mi = chosen["MI"]
    blocking = Blocking(mi=mi, nr=chosen["NR"], kc=chosen["KC"],
                        mc=max(mi, chosen["MC"] // mi * mi),
                        pack_a=bool(chosen.get("PACK_A", 1)))
    OUTER_PRODUCT_F32.resolve({"MI": mi, "NR": blocking.nr})
    epilogue = Epilogue(contraction, consumer, options)
    if chosen.get("NC", 0) > 0 and not blocking.pack_a:
        kernels = lower_block_packed(contraction, OUTER_PRODUCT_F32_ROWS.name, blocking,
                                     int(chosen["NC"]), options, epilogue=epilogue)
        if kernels is not None:
            return kernels
    return lower_contraction(contraction, OUTER_PRODUCT_F32.name, blocking, options,
                             rows_micro_kernel=OUTER_PRODUCT_F32_ROWS.name, epilogue=epilogue)


