"""Fused contraction chains on x86 (thesis ch. 3): which chains, which tiles, fused kernels.

For every chain :func:`~.blocking.contraction_chain.as_chain` finds (intermediates used only
inside it, not graph outputs), the block of ``MC`` rows is Chimera's tile solver's
(:func:`tilecraft.fusion.solve_chain`, translated by :mod:`.chain_planning`): the tiles that
minimise the most loaded core's time — arithmetic plus the bytes moved into L2 — with the
``L x MC`` intermediate tile within half of L2 and ``MC`` a multiple of both register tiles; a
chain whose smallest block does not fit is left unfused, and the report says so. Register
tiles come from Eq. 3.4 (:func:`.microkernels.register_blocking_candidates`), restricted to
column counts that suit the problem.

Chains sharing their columns — a convolution, elementwise computes, then a 1x1 convolution
(:func:`~.blocking.column_chain.as_column_chain`, thesis Table 3.6) — are blocked
by ``NC`` output pixels instead (:func:`column_chain_blocking`). A convolution reading a window
of another's output (a 3x3 second convolution, chain C6) stays unfused, with a note.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from tilecraft.errors import TargetError
from tilecraft.fusion import FusionPlan
from tilecraft.fusion.row_groups import row_groups
from tilecraft.graph import Graph
from tilecraft.lower.options import LoweringOptions
from tilecraft.passes.contraction import as_contraction
from tilecraft.target.base import FusedGroup
from tilecraft.target.spec import TargetSpec
from tilecraft.te.expr import Reduce
from tilecraft.te.tensor import Tensor
from tilecraft.te.visit import loads_in
from tilecraft_x86_avx512.blocking.chain_rows import lower_chain_rows, rows_applicable
from tilecraft_x86_avx512.blocking.column_chain import (
    ColumnBlocking,
    ColumnChain,
    as_column_chain,
    lower_column_chain,
)
from tilecraft_x86_avx512.blocking.contraction_chain import (
    ChainBlocking,
    ContractionChain,
    as_chain,
    lower_chain,
)
from tilecraft_x86_avx512.blocking.epilogue import epilogue_pairs, lower_with_epilogue
from tilecraft_x86_avx512.blocking.row_group import lower_row_group, row_buffer_bytes
from tilecraft_x86_avx512.microkernels import (
    OUTER_PRODUCT_F32,
    OUTER_PRODUCT_F32_ROWS,
    register_blocking_candidates,
)

#: chains below this many flops run unfused (packing would not pay)
MIN_CHAIN_FLOPS = 2 * 64 * 64 * 64


@dataclass(frozen=True)
class BlockingMachine:
    """The machine figures the x86 blocking reads, from the target's spec: the L1 and L2
    sizes and the threads.

    >>> from tilecraft_x86_avx512.host import CacheLevel, HostInfo
    >>> from tilecraft_x86_avx512.spec import build_spec
    >>> host = HostInfo("test CPU", 2, 4.0e9, "test", (CacheLevel("L1", 32768, False),
    ...                 CacheLevel("L2", 1 << 20, False), CacheLevel("L3", 32 << 20, True)),
    ...                 frozenset({"avx512f"}))
    >>> BlockingMachine.from_spec(build_spec(host), threads=2)
    BlockingMachine(l1_bytes=32768, l2_bytes=1048576, threads=2)
    """

    l1_bytes: int
    l2_bytes: int
    threads: int

    @classmethod
    def from_spec(cls, spec: TargetSpec, threads: int) -> BlockingMachine:
        return cls(l1_bytes=_size(spec, "L1"), l2_bytes=_size(spec, "L2"), threads=threads)


def _size(spec: TargetSpec, level: str) -> int:
    size = spec.memory.level(level).size_bytes
    if size is None:
        raise TargetError(f"target {spec.name}: memory level {level} has no size_bytes; the "
                          "block-size model needs the cache's capacity")
    return size


def _tiles() -> list[tuple[int, int, float]]:
    """Feasible Eq. 3.4 register tiles ``(MI, NR, intensity)`` the template can render."""
    tiles = []
    mi_max = OUTER_PRODUCT_F32.parameters["MI"].maximum or 32
    for cand in register_blocking_candidates(32, 256):
        nr = cand.ni * 16
        if nr in OUTER_PRODUCT_F32.parameters["NR"].choices and cand.mi <= mi_max:
            tiles.append((cand.mi, nr, cand.intensity))
    return tiles


def chain_blocking(chain: ContractionChain, machine: BlockingMachine, spec: TargetSpec | None,
                   rows: bool = False) -> tuple[ChainBlocking | None, str]:
    """Tiles for ``chain`` from Chimera's tile solver (:mod:`.chain_planning`): ``MC`` is the
    solver's tile of the intermediate's rows in L2, with the blocks spread over
    ``machine.threads`` cores; register tiles Eq. 3.4's. Or ``None`` and why it does not fit.
    ``rows``: the tile of ``T`` is ``MC x L`` (:mod:`~.blocking.chain_rows`)."""
    from tilecraft_x86_avx512.chain_planning import planned_chain_tiles

    if spec is None:
        raise TargetError("chain_blocking needs the target spec (LoweringOptions.spec is "
                          "None); build the options with LoweringOptions.from_spec")
    fields, reason = planned_chain_tiles(chain, _tiles(), spec, machine.threads, rows)
    return (None, reason) if fields is None else (ChainBlocking(**fields), "")


def column_chain_blocking(chain: ColumnChain, machine: BlockingMachine, spec: TargetSpec | None
                          ) -> tuple[ColumnBlocking | None, str]:
    """Tiles for a column chain (a convolution chain) from Chimera's tile solver
    (:func:`.chain_planning.planned_column_tiles`): blocks of ``NC`` pixels, a ``KC`` slice of
    the block's packed im2col columns (``KC x NC``) and the ``L x NC`` intermediate tile in
    half of L2, spread over ``machine.threads`` cores; or ``None`` and the reason it does not
    fit."""
    from tilecraft_x86_avx512.chain_planning import planned_column_tiles

    if spec is None:
        raise TargetError("column_chain_blocking needs the target spec (LoweringOptions.spec "
                          "is None); build the options with LoweringOptions.from_spec")
    fields, reason = planned_column_tiles(chain, _tiles(), spec, machine.threads)
    return (None, reason) if fields is None else (ColumnBlocking(**fields), "")


def _decide_pad_folding(chain: ColumnChain) -> ColumnChain:
    """Keep a folded pad only where it pays. The folded packing branches per lane, so every
    load of an im2col row is masked; a pad kernel costs one pass over the input, after which
    stride-1 rows load contiguously without masks. The packing reads ``R*S/stride^2`` times the
    input (9 for a 3x3 stride-1 convolution, 2.25 at stride 2). Measured side by side on one
    thread (strided loads as shuffles): folding loses 13% on C3 (stride 1) and wins 5-10% on
    C1/C2 (stride 2) and 25% on C5 (stride 4). So fold when the packing reads less than 4
    times what the pad writes."""
    if chain.padded is None:
        return chain
    _, _, n_total, k_total = chain.first.extents()
    if 4 * math.prod(chain.padded.shape) > n_total * k_total:
        return chain
    return dataclasses.replace(chain, padded=None)


def _windowed_producer(tensor: Tensor) -> Tensor | None:
    """The contraction whose output ``tensor`` (itself a contraction) reads through a window
    (a k x k convolution after another), through elementwise computes and pads — the chains
    left unfused on purpose; ``None`` otherwise."""
    if as_contraction(tensor) is None:
        return None
    frontier = [ld.tensor for ld in loads_in(tensor.op.body) if not ld.tensor.is_placeholder]
    seen: set[Tensor] = set()
    while frontier:
        t = frontier.pop()
        if t in seen:
            continue
        seen.add(t)
        if as_contraction(t) is not None:
            return t
        if not isinstance(t.op.body, Reduce):
            frontier.extend(ld.tensor for ld in loads_in(t.op.body)
                            if not ld.tensor.is_placeholder)
    return None


def fuse_chains(graph: Graph, options: LoweringOptions, machine: BlockingMachine,
                plan: FusionPlan | None) -> list[FusedGroup]:
    """The fused groups of ``graph``: each chain Chimera's ``plan`` fuses and the x86 kernels
    can express, lowered into one kernel (first); a note for each planned chain left unfused,
    with the reason."""
    planned = {} if plan is None else {group.anchors: group for group in plan.chains}
    consumers = {t: list(graph.consumers(t)) for t in graph.computes}
    outputs = set(graph.outputs)
    groups: list[FusedGroup] = []
    taken: set[str] = set()
    reasons: dict[tuple[str, ...], str] = {}
    for tensor in reversed(graph.computes):
        if tensor.name in taken:
            continue
        chain: ContractionChain | ColumnChain | None = as_chain(tensor, consumers)
        if chain is None:
            chain = as_column_chain(tensor, consumers)
        if chain is None:
            continue
        anchors = (chain.first.tensor.name, chain.second.tensor.name)
        if anchors not in planned:
            continue  # the planner keeps these computes apart
        names = tuple(t.name for t in chain.computes)
        if any(t in outputs for t in chain.computes[:-1]):
            reasons[anchors] = "an intermediate is also a graph output"
            continue
        if any(name in taken for name in names):
            continue
        if chain.flops < MIN_CHAIN_FLOPS:
            reasons[anchors] = (f"{chain.flops:,} flops, below the {MIN_CHAIN_FLOPS:,} where "
                                "packing pays")
            continue
        if isinstance(chain, ColumnChain):
            chain = _decide_pad_folding(chain)
            names = tuple(t.name for t in chain.computes)
            column_blocking, reason = column_chain_blocking(chain, machine, options.spec)
            kernels = [] if column_blocking is None else lower_column_chain(
                chain, OUTER_PRODUCT_F32.name, column_blocking, options,
                rows_micro_kernel=OUTER_PRODUCT_F32_ROWS.name)
        else:
            rows = rows_applicable(chain, options.param_level)
            blocking, reason = chain_blocking(chain, machine, options.spec, rows)
            if blocking is None:
                kernels = []
            elif rows:
                kernels = lower_chain_rows(chain, OUTER_PRODUCT_F32_ROWS.name, blocking, options)
            else:
                kernels = lower_chain(chain, OUTER_PRODUCT_F32.name, blocking, options)
        if not kernels:
            reasons[anchors] = reason
            continue
        taken.update(names)
        del planned[anchors]
        groups.append(FusedGroup(names, tuple(kernels), (
            f"fused {' -> '.join(names)} into one kernel: {kernels[-1].attrs['schedule']}",)))
    for anchors, group in planned.items():
        reason = reasons.get(anchors) or _inexpressible(graph, anchors)
        groups.append(FusedGroup((), (), (
            f"chain {' -> '.join(group.computes)} (planned by Chimera) not fused: {reason}",)))
    return groups


def fuse_row_groups(graph: Graph, options: LoweringOptions, machine: BlockingMachine,
                    taken: set[str]) -> list[FusedGroup]:
    """Each row group (:func:`tilecraft.fusion.row_groups.row_groups`) with no compute in
    ``taken`` as one kernel (:mod:`.blocking.row_group`) when its row buffers fit half of L2
    (the row is read again from the cache, not from memory); else a note."""
    groups: list[FusedGroup] = []
    for group in row_groups(graph, taken):
        label = " -> ".join(group.computes)
        need = row_buffer_bytes(group)
        if need > machine.l2_bytes // 2:
            groups.append(FusedGroup((), (), (
                f"row group {label} not fused: its row buffers ({need:,} bytes) exceed half "
                f"of L2 ({machine.l2_bytes // 2:,})",)))
            continue
        kernel = lower_row_group(group, options)
        groups.append(FusedGroup(group.computes, (kernel,), (
            f"fused {label} into one kernel: {kernel.attrs['schedule']}",)))
    return groups


def fuse_epilogues(graph: Graph, options: LoweringOptions, machine: BlockingMachine,
                   plan: FusionPlan | None, taken: set[str]) -> list[FusedGroup]:
    """Each template contraction with no compute in ``taken`` and its elementwise consumer
    (:func:`.blocking.epilogue.epilogue_pairs`) as one kernel computing the consumer on each
    finished tile (:mod:`.blocking.epilogue`); a note for each reader of a template
    contraction that does not fuse, with the reason. ``plan``'s decision, where it placed the
    consumer, is quoted in the group's note."""
    notes: list[str] = []
    groups: list[FusedGroup] = []
    decided = {} if plan is None else {d.subject: d for d in plan.decisions}
    for producer, consumer in epilogue_pairs(graph, taken, notes):
        kernels, reason = lower_with_epilogue(producer, consumer, options, machine.l1_bytes,
                                              machine.l2_bytes, machine.threads)
        if kernels is None:
            notes.append(f"epilogue {consumer.name} of {producer.name} not fused: {reason}")
            continue
        decision = decided.get(consumer.name)
        planned = f" (planner: {decision.action.value})" if decision is not None else ""
        groups.append(FusedGroup((producer.name, consumer.name), tuple(kernels), (
            f"fused {producer.name} -> {consumer.name} into one kernel{planned}: "
            f"{kernels[-1].attrs['schedule']}",), tunable=producer.name))
    if notes:
        groups.append(FusedGroup((), (), tuple(notes)))
    return groups


def _inexpressible(graph: Graph, anchors: tuple[str, ...]) -> str:
    """Why the x86 fused kernels cannot express a planned chain."""
    if len(anchors) != 2:
        return (f"the x86 fused kernels chain two contractions, this chain has "
                f"{len(anchors)} ({', '.join(anchors)})")
    last = graph.tensor(anchors[-1])
    producer = _windowed_producer(last)
    if producer is not None and producer.name == anchors[0]:
        return (f"{last.name} reads a window of {producer.name}'s output, so a block would "
                "recompute or wait for its neighbours' halo; the second product is "
                "compute-bound and fusing it does not pay (thesis §3.6, chain C6)")
    return ("the x86 fused kernels need two contractions with only elementwise computes, "
            "row reductions or a pad between them, the intermediate read whole as the second "
            "product's operand")


__all__ = ["BlockingMachine", "chain_blocking", "column_chain_blocking", "fuse_chains",
           "fuse_epilogues"]
